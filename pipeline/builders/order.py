"""A run's micro-batches in the order the Trainer draws them, and the one with the most tokens: what a config's peak
memory is judged on when the records vary in length.

transformers' Trainer samples a `RandomSampler`, which accelerate replaces by its `SeedableRandomSampler`: epoch e
draws `torch.randperm(n)` from a generator seeded `data_seed + e`. A micro-batch is the next
`per_device_train_batch_size` indices (an epoch's last one shorter, or dropped with `dataloader_drop_last`), the ranks
of a torchrun job take every world_size-th, and an optimizer step takes `gradient_accumulation_steps` of a rank's
(an epoch's last step fewer). TRL lays a micro-batch out as its SFTConfig says: padded to its longest record (to a
multiple of `pad_to_multiple_of`), or one row without padding (padding-free, and packing, whose rows are the records
best-fit-decreasing packed into `max_length`, as TRL's `pack_dataset` packs them).

A run is `train.steps` optimizer steps over the records the job reads (`builders.dataset`), or one pass over every
record. torch (for its generator) and TRL (to pack) are imported inside: only data whose lengths vary pays for them.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass

from pipeline.builders.batches import whole_batches
from pipeline.builders.dataset import record_ids, run_records, synthetic_lengths, token_count
from pipeline.config.choices import DataKind, Distribution
from pipeline.config.schema import Config
from pipeline.records import MicroBatch


@dataclass(frozen=True)
class Batching:
    """What of a job's SFTConfig arguments decides its micro-batches and their layout."""

    micro: int
    accumulation: int
    world_size: int
    seed: int
    drop_last: bool
    padding_free: bool  # one row without padding (TRL's padding-free collator, packing's too)
    pad_to: int | None  # pad_to_multiple_of
    packing: bool = False  # rows of records packed together (TRL's best-fit-decreasing packing)

    @classmethod
    def of(cls, sft: dict, world_size: int) -> Batching:
        return cls(
            micro=sft["per_device_train_batch_size"],
            accumulation=sft["gradient_accumulation_steps"],
            world_size=world_size,
            seed=sft["data_seed"] if sft.get("data_seed") is not None else sft["seed"],
            drop_last=bool(sft.get("dataloader_drop_last")),
            padding_free=bool(sft.get("padding_free") or sft.get("packing")),
            pad_to=sft.get("pad_to_multiple_of"),
            packing=bool(sft.get("packing")),
        )

    def layout(self, lengths: list[int]) -> tuple[int, int, int]:
        """(tokens computed, real tokens, sum of the squared row lengths) of a micro-batch of rows of `lengths`."""
        real = sum(lengths)
        if self.padding_free:
            row = _padded(real, self.pad_to)
            return row, real, row * row
        longest = _padded(max(lengths), self.pad_to)
        return len(lengths) * longest, real, len(lengths) * longest * longest


def _padded(length: int, multiple: int | None) -> int:
    return math.ceil(length / multiple) * multiple if multiple else length


def permutation(n: int, seed: int, epoch: int) -> list[int]:
    """The indices accelerate's `SeedableRandomSampler` draws in `epoch` (0 first)."""
    import torch

    generator = torch.Generator()
    generator.manual_seed(seed + epoch)
    return torch.randperm(n, generator=generator).tolist()


def micro_batches(n: int, b: Batching, steps: int | None) -> Iterator[tuple[int, list[int]]]:
    """(optimizer step, indices) of every micro-batch of the run over `n` rows, every rank's: `steps` optimizer steps
    (`None`: one epoch)."""
    done, epoch = 0, 0
    while steps is None or done < steps:
        order = permutation(n, b.seed, epoch)
        count = n // b.micro if b.drop_last else math.ceil(n / b.micro)
        per_rank = math.ceil(count / b.world_size)  # accelerate's shards: even, the last ones from the start again
        in_epoch = math.ceil(per_rank / b.accumulation)
        for chunk in range(count):
            step = done + (chunk // b.world_size) // b.accumulation + 1
            if steps is not None and step > steps:
                return
            yield step, order[chunk * b.micro : (chunk + 1) * b.micro]
        done, epoch = done + in_epoch, epoch + 1
        if steps is None or not count:
            return


def pack(lengths: list[int], max_length: int) -> list[tuple[int, ...]]:
    """The records (indices) in each of the rows TRL's best-fit-decreasing packing makes of records of `lengths`:
    packed as TRL packs them, each record's ids its own index."""
    from datasets import Dataset
    from trl.data_utils import pack_dataset

    ids = Dataset.from_dict({"input_ids": [[i] * n for i, n in enumerate(lengths)]})
    rows = []
    for row in pack_dataset(ids, max_length, "bfd")["input_ids"]:
        rows.append(tuple(dict.fromkeys(row)))
    return rows


class RunOrder:
    """The run of one config's data: its records' lengths (read and tokenized once), its rows (records, or packed
    rows) and the micro-batch with the most tokens at a given batching."""

    def __init__(self, config: Config, epoch: bool, tokenizer=None) -> None:
        """`epoch`: the run is one pass over every record, else `train.steps` steps of `batch.effective`;
        `tokenizer`: the job's (built from the model config when needed)."""
        self.config = config
        self.epoch = epoch
        self._tokenizer = tokenizer

    @functools.cached_property
    def tokenizer(self):
        if self._tokenizer is None:
            from pipeline.builders.tokenizer import build_tokenizer

            self._tokenizer = build_tokenizer(self.config.model)
        return self._tokenizer

    @functools.cache  # noqa: B019 - one instance per study, kept as long as it is
    def lengths(self, packing: bool) -> list[int]:
        """Each record's tokens as the run's data holds them (at most max_length)."""
        data, train, effective = self.config.data, self.config.train, self.config.batch.effective
        needed = None if self.epoch else train.steps * effective
        if data.kind == DataKind.SYNTHETIC:
            uniform = data.distribution == Distribution.UNIFORM
            count = data.num_samples or needed or train.steps * effective
            found = synthetic_lengths(count, data.length, data.min_length, uniform, train.seed)
            return [min(n, train.max_length) for n in found]
        count = functools.partial(token_count, self.tokenizer, train.max_length) if packing else None
        tokens = (needed or 0) * train.max_length if packing else 0
        records = run_records(data, needed, count, tokens, effective)
        return [min(len(record_ids(self.tokenizer, r)), train.max_length) for r in records]

    @functools.cache  # noqa: B019
    def rows(self, packing: bool) -> tuple[tuple[tuple[int, ...], ...], list[int]]:
        """The rows the sampler draws from (a record each; with packing, the records packed into each) and their
        lengths."""
        lengths = self.lengths(packing)
        if not packing:
            return tuple((i,) for i in range(len(lengths))), lengths
        packed = pack(lengths, self.config.train.max_length)
        if not self.epoch:  # the job's cut of them (`whole_sequences`)
            effective = self.config.batch.effective
            packed = packed[: whole_batches(len(packed), self.config.train.steps * effective, effective)]
        return tuple(packed), [sum(lengths[i] for i in row) for row in packed]

    def varies(self) -> bool:
        """Whether the records differ in length: else every micro-batch of a size is alike."""
        lengths = self.lengths(False)
        return min(lengths) != max(lengths)

    def longest(self, sft: dict, world_size: int) -> MicroBatch:
        """The micro-batch of the run with the most tokens (as its layout computes them), then the largest squared
        lengths, then the most real tokens; the first such."""
        batching = Batching.of(sft, world_size)
        return self._longest(batching, batching.packing)

    @functools.cache  # noqa: B019
    def _longest(self, b: Batching, packing: bool) -> MicroBatch:
        rows, lengths = self.rows(packing)
        records = len(self.lengths(packing))
        if not packing and min(lengths) == max(lengths):  # every micro-batch alike: the first, unshuffled
            tokens, real, squares = b.layout(lengths[: b.micro])
            return MicroBatch(rows[: b.micro], tokens, real, squares, 1, records)
        best, key = None, None
        for step, indices in micro_batches(len(rows), b, None if self.epoch else self.config.train.steps):
            tokens, real, squares = b.layout([lengths[i] for i in indices])
            if key is None or (tokens, squares, real) > key:
                best, key = (step, indices), (tokens, squares, real)
        step, indices = best
        return MicroBatch(tuple(rows[i] for i in indices), key[0], key[2], key[1], step, records)
