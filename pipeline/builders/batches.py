"""How many records a run keeps where its data holds fewer than its steps read: whole effective batches alone.

The Trainer goes round the data again when it runs out, and a pass that ends in part of a batch trains a short step
(4, 1, 4, 1 samples a step from 5 records at an effective batch of 4), which the figures would count as if it were
whole. With packing a step's samples are the packed sequences, cut the same way once the trainer has made them
(`whole_sequences`). Plain code, no import of torch or datasets: the exported script copies both as they are.
"""

from __future__ import annotations


def whole_batches(count: int, needed: int, effective: int) -> int:
    """How many of `count` records a run of `needed` samples keeps: every one where they cover it, else whole
    batches of `effective`; fewer than one batch as they are (a jsonl file of so few is refused up front,
    `config.data`; synthetic `data.num_samples` must be a multiple of the batch there)."""
    return count if count >= needed or count < effective else count - count % effective


def whole_sequences(trainer) -> None:
    """With packing, the sequences the trainer packed, cut to whole batches where fewer than its steps read (its
    arguments give the steps and the effective batch); fewer than one batch is refused: every step would be short."""
    args = trainer.args
    effective = args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size
    count = len(trainer.train_dataset)
    if count < effective:
        raise ValueError(
            f"packing made {count} sequence{'s' if count != 1 else ''} of the data, fewer than "
            f"batch.effective {effective}: more records, a smaller train.max_length or a smaller batch.effective"
        )
    keep = whole_batches(count, args.max_steps * effective, effective)
    if keep < count:
        trainer.train_dataset = trainer.train_dataset.select(range(keep))
