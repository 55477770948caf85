"""How many records a run keeps where its data holds fewer than its steps read: whole effective batches alone.

The Trainer goes round the data again when it runs out, and a pass that ends in part of a batch trains a short step
(4, 1, 4, 1 samples a step from 5 records at an effective batch of 4), which the figures would count as if it were
whole. Plain code, no import of torch or datasets: the exported script copies `whole_batches` as it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pipeline.config.schema import DataConfig


def whole_batches(count: int, needed: int, effective: int) -> int:
    """How many of `count` records a run of `needed` samples keeps: every one where they cover it, else whole
    batches of `effective` (fewer than one batch is refused up front, `config.data`)."""
    return count if count >= needed or count < effective else count - count % effective


def synthetic_count(data: DataConfig, needed: int, effective: int) -> int:
    """The synthetic records a run makes: `data.num_samples` cut to whole batches where set, else `needed`."""
    return whole_batches(data.num_samples, needed, effective) if data.num_samples else needed
