"""The run a study's answer must fit, and each config's micro-batch of it with the most tokens: what the probes and
every trial measure first (`measure.first_batch`), and what the memory predictor is given (its tokens).

The run is `train.steps` optimizer steps of `batch.effective` records, as the study's jobs read the data, or one pass
over every record (`optimize.fit_over=epoch`, as a full run reads it), drawn in the Trainer's order
(`builders.order`). Where every micro-batch of a config is alike (records of one length, or padded to max_length), a
job's own first step is as large as any and nothing is trained beside it.
"""

from __future__ import annotations

from pipeline import knobs
from pipeline.builders.order import RunOrder
from pipeline.builders.sft_args import sft_kwargs
from pipeline.config.choices import FitOver
from pipeline.config.job import parse_split
from pipeline.config.schema import Config
from pipeline.records import MicroBatch


class RunBatches:
    """The longest micro-batch of the run of each config of one study (the records read once, whatever the config)."""

    def __init__(self, fit_over: str) -> None:
        self.epoch = fit_over == FitOver.EPOCH
        self._orders: dict[tuple, RunOrder] = {}

    def order(self, config: Config) -> RunOrder:
        """The run of `config`'s data: one per data, tokenizer, length and number of records read."""
        t, m = config.train, config.model
        key = (
            repr(config.data),
            m.source,
            m.name_or_path,
            m.name,
            t.max_length,
            t.seed,
            t.steps,
            config.batch.effective,
        )
        if key not in self._orders:
            self._orders[key] = RunOrder(config, self.epoch)
        return self._orders[key]

    def longest(self, config: Config) -> MicroBatch:
        """The micro-batch with the most tokens of the run of `config`, at its split and world size."""
        split = parse_split(config.batch.split)
        sft = sft_kwargs(split.micro, split.accumulation, config.train, "fp32", "cpu", config.world_size)
        return self.order(config).longest(sft, config.world_size)

    def first(self, config: Config) -> MicroBatch | None:
        """What a job of `config` trains at step one beside its own micro-batches: the run's longest, where the
        micro-batches of the run differ in size; None where they are all alike."""
        if knobs.one_shape(config.train) or not self.order(config).varies():
            return None
        return self.longest(config)

    def text(self, config: Config) -> str:
        """What the run is, in words: `train.steps=16 (128 records)` or `one pass over 2,000 records`."""
        records = len(self.order(config).lengths(knobs.packs(config.train)))
        if self.epoch:
            return f"one pass over {records:,} records"
        return f"train.steps={config.train.steps} ({records:,} records)"
