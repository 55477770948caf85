"""How many records a run keeps where its data holds fewer than its steps read: whole effective batches alone.

The Trainer goes round the data again when it runs out, and a pass that ends in part of a batch trains a short step
(4, 1, 4, 1 samples a step from 5 records at an effective batch of 4), which the figures would count as if it were
whole. Records, not packed sequences: with packing a step's samples are sequences, cut by no rule here. Plain code,
no import of torch or datasets: the exported script copies `whole_batches` as it is.
"""

from __future__ import annotations


def whole_batches(count: int, needed: int, effective: int) -> int:
    """How many of `count` records a run of `needed` samples keeps: every one where they cover it, else whole
    batches of `effective`; fewer than one batch as they are (a jsonl file of so few is refused up front,
    `config.data`; synthetic `data.num_samples` must be a multiple of the batch there)."""
    return count if count >= needed or count < effective else count - count % effective
