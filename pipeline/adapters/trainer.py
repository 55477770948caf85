"""The Trainer's private steps that the step-one pass (`measure.first_batch`) reuses so that its micro-batch is
prepared and weighed as the job's own: TRL's `SFTTrainer._prepare_dataset` (tokenizing and truncating records as
the trainer does) and transformers' `Trainer._get_num_items_in_batch` (the token count a loss is normalised by).
Neither has a public equivalent; tests/test_adapters.py checks both against the installed versions."""

from __future__ import annotations

from typing import Any


def prepare_records(trainer: Any, records: Any, name: str) -> Any:
    """`records` tokenized as the trainer prepared its own dataset, one row per record (not packed)."""
    return trainer._prepare_dataset(records, trainer.processing_class, trainer.args, False, None, name)


def items_in_batch(trainer: Any, inputs: dict[str, Any]) -> Any:
    """The token count the trainer normalises one micro-batch's loss by (`inputs`: a collated micro-batch)."""
    return trainer._get_num_items_in_batch([inputs], trainer.args.device)
