"""The run's longest micro-batch (`builders.order`), trained at step one beside the job's own micro-batches, so that a
job's peak holds that of the run's worst step from its first step on, and a config that cannot fit stops there.

It goes through the Trainer's own `training_step` (forward, loss, backward: checkpointing, compilation and mixed
precision as the job's), once step one's optimizer step has run (the optimizer's state then exists, as at any later
step), and its gradient is dropped: the job's weights, optimizer state, schedule and data order stay those of the run,
so the per-step losses of every config still compare, while the step's peak memory holds the longest micro-batch's.
Before it, the allocator's cached segments go back to the device: those step one's shorter micro-batches were cut
into, which a larger block cannot use (each request no cached block fits gets a segment of its own) and which the
allocator returns itself under a cap before it fails. Kept, they sat in the peak beside the longest's: the chats
grid's peaks were 0.5-5.2 GiB over one shape's line where step one's own micro-batches were shorter than the longest
(`bench.step_one`), a figure of the order the shapes came in, not of what the run needs.
The meter leaves its forward out of the step's work and marks the step (no steady step).
"""

from __future__ import annotations

from typing import Any

from datasets import Dataset
from transformers import TrainerCallback

from pipeline.adapters.trainer import items_in_batch, prepare_records
from pipeline.builders.dataset import truncated
from pipeline.measure import memory
from pipeline.measure.callback import StepMeter
from pipeline.records import MicroBatch


def examples(trainer: Any, records: Dataset, batch: MicroBatch, max_length: int) -> list[dict[str, Any]]:
    """The micro-batch's rows as the trainer's dataset holds them: its records prepared by TRL as the job's own were
    (padding-free: truncated first, as the job's data is), a packed row the concatenation of its records."""
    args = trainer.args
    if args.padding_free and not args.packing:
        records = truncated(records, trainer.processing_class, max_length)
    prepared = prepare_records(trainer, records, "longest micro-batch")
    found = iter(prepared)
    by_record = {i: next(found) for row in batch.rows for i in row}
    rows = []
    for row in batch.rows:
        parts = [by_record[i] for i in row]
        example = {
            "input_ids": [t for p in parts for t in p["input_ids"]],
            "labels": [t for p in parts for t in p.get("labels", p["input_ids"])],
        }
        if args.packing:
            example["seq_lengths"] = [len(p["input_ids"]) for p in parts]
        rows.append(example)
    return rows


class FirstBatch(TrainerCallback):
    """Trains `batch` (its records in `records`, in the order of its rows) at the end of step one, before the meter
    reads the step's peak: put it before the meter among the callbacks."""

    def __init__(self, batch: MicroBatch, records: Dataset, meter: StepMeter, max_length: int) -> None:
        self.batch = batch
        self.records = records
        self.meter = meter
        self.max_length = max_length
        self.trainer: Any = None
        self.done = False

    def bind(self, trainer: Any) -> None:
        self.trainer = trainer

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if self.done or self.trainer is None:
            return
        self.done = True
        trainer = self.trainer
        rows = examples(trainer, self.records, self.batch, self.max_length)
        inputs = trainer.data_collator(rows)
        items = items_in_batch(trainer, inputs)
        wrapped = trainer.model_wrapped
        with self.meter.aside():
            self.meter.released_bytes = memory.release_cached()
            trainer.training_step(wrapped, inputs, items)
        wrapped.zero_grad(set_to_none=True)
        self.meter.first_batch_tokens = self.batch.tokens
