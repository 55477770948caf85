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

After the last step it is trained once more (`measure.longest_last`), the segments as the run's other shapes left
them: where they are cut so that its blocks no longer fit under the cap, the job is out of memory, as a run that
meets its longest micro-batch late would be (on the chats, an answer 0.93 GiB under a 20 GiB cap ran out of memory
at step 10 of three 16-step runs with 1.80 GiB reserved and unused). Its peak is kept apart
(`JobMemory.last_longest_bytes`); the job's peaks stay its steps'.
"""

from __future__ import annotations

from typing import Any

import torch
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
    reads the step's peak: put it before the meter among the callbacks; and, `again`, after the run's last step."""

    def __init__(self, batch: MicroBatch, records: Dataset, meter: StepMeter, max_length: int, again: bool) -> None:
        self.batch = batch
        self.records = records
        self.meter = meter
        self.max_length = max_length
        self.again = again
        self.trainer: Any = None
        self.done = False

    def bind(self, trainer: Any) -> None:
        self.trainer = trainer

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if self.done or self.trainer is None:
            return
        self.done = True
        with self.meter.aside():
            self.meter.released_bytes = memory.release_cached()
            self._train()
        self.meter.first_batch_tokens = self.batch.tokens

    def on_train_end(self, args, state, control, **kwargs):
        """Once more after a run that trained all its steps, the segments kept; its peak on its own (the peak counters
        reset after the steps' are kept)."""
        if not (self.again and self.done and self.trainer is not None and state.global_step >= state.max_steps):
            return
        cuda = self.meter.cuda
        if cuda:
            self.meter.steps_peaks = (torch.cuda.max_memory_reserved(), torch.cuda.max_memory_allocated())
            torch.cuda.reset_peak_memory_stats()
        try:
            with self.meter.aside():
                self._train()
        except torch.OutOfMemoryError as err:
            raise torch.OutOfMemoryError(
                f"on the run's longest micro-batch ({self.batch.tokens:,} tokens) trained again after step "
                f"{state.global_step}, the allocator's segments as the other shapes left them: "
                f"{str(err).splitlines()[0] if str(err) else ''}"
            ) from err
        if cuda:
            torch.cuda.synchronize()
            self.meter.last_longest_bytes = torch.cuda.max_memory_reserved() + self.meter.context_bytes
        else:
            self.meter.last_longest_bytes = memory.peak_rss_bytes()

    def _train(self) -> None:
        """One forward and backward of the batch through the Trainer's own step; its gradient dropped."""
        trainer = self.trainer
        rows = examples(trainer, self.records, self.batch, self.max_length)
        inputs = trainer.data_collator(rows)
        wrapped = trainer.model_wrapped
        trainer.training_step(wrapped, inputs, items_in_batch(trainer, inputs))
        wrapped.zero_grad(set_to_none=True)
