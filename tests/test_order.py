"""A run's micro-batches as the Trainer draws them, reproduced without training (`builders.order`), and the run's
longest micro-batch trained at step one of a job (`measure.first_batch`): real TRL training on the tiny model,
in-process."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from bench.chats import record, write_chats
from pipeline.builders.order import Batching, RunOrder, micro_batches
from pipeline.builders.sft_args import sft_kwargs
from pipeline.config.validate import validate
from pipeline.jobs.child import Job
from pipeline.jobs.task import job_spec
from pipeline.measure import memory
from pipeline.records import Status
from tests.helpers.configs import composed

QUIET = ["train.progress_bar=false", "measure.warmup_steps=1", "data=jsonl"]


class Seen(Job):
    """A job that notes the records' lengths of every micro-batch its model trains on: the attention mask's rows,
    or the sequences a padding-free row holds (its position ids start again at 0)."""

    def _setup_compile(self) -> None:
        super()._setup_compile()
        self.seen: list[list[int]] = []

        def note(module, args, kwargs) -> None:
            if not module.training:
                return
            positions, mask = kwargs.get("position_ids"), kwargs.get("attention_mask")
            if positions is not None:
                row = positions[0].tolist()
                starts = [i for i, p in enumerate(row) if p == 0] + [len(row)]
                self.seen.append(sorted(b - a for a, b in zip(starts, starts[1:], strict=False)))
            else:
                self.seen.append(sorted(mask.sum(1).tolist()))

        self.trainer.model.register_forward_pre_hook(note, with_kwargs=True)


def _run(tmp_path, job_class, *overrides: str, first=None) -> Job:
    spec = job_spec(validate(composed(*QUIET, *overrides)))
    workdir = tmp_path / "job"
    workdir.mkdir(parents=True, exist_ok=True)
    job = job_class(dataclasses.replace(spec, first_batch=first), workdir)
    job.result = job.run()
    assert job.result.status is Status.OK, job.result.traceback
    return job


@pytest.mark.parametrize(
    ("padding", "split"), [("longest", "2x2"), ("padding_free", "2x2"), ("packing", "1x4"), ("longest", "3x1")]
)
def test_the_runs_micro_batches_are_those_the_trainer_draws(tmp_path, padding, split):
    """20 records of 20 distinct lengths, 8 steps of 4: two epochs of the sampler (a new order each), the last
    micro-batch of an epoch short (3x1: 20 = 6 x 3 + 2); packed rows as TRL packs them. Every micro-batch the model
    trained on holds the records the reproduction says, in the same order of micro-batches."""
    path = tmp_path / "distinct.jsonl"
    rng = np.random.default_rng(0)
    path.write_text("".join(json.dumps(record(rng, 40 + 7 * i)) + "\n" for i in range(20)), encoding="utf-8")
    effective = 3 if split == "3x1" else 4
    overrides = [f"data.path={path}", f"batch.effective={effective}", f"batch.split={split}", "train.steps=8"]
    job = _run(tmp_path, Seen, *overrides, f"train.padding={padding}", "train.max_length=256")
    order = RunOrder(job.cfg, epoch=False, tokenizer=job.tokenizer)
    packing = padding == "packing"
    rows, _ = order.rows(packing)
    lengths = order.lengths(packing)
    drawn = [
        sorted(lengths[i] for row in idx for i in rows[row])
        for _, idx in micro_batches(len(rows), Batching.of(job.sft_kwargs, 1), 8)
    ]
    assert job.seen == drawn
    assert len({tuple(d) for d in drawn}) >= 8  # not one batch over and over: the comparison says something


def test_the_longest_micro_batch_of_an_epoch_holds_its_longest_record(tmp_path):
    """One record of 1,000 tokens at line 181 of 200 short ones: a run of 4 steps of 8 never reads it, a pass over
    the file does; padded to it, the micro-batch holding it has the most tokens of the run, 8 x 1,000."""
    path = tmp_path / "late.jsonl"
    write_chats(path, records=200, shortest=30, longest=120, seed=0, long_at=180, long_tokens=1000)
    job = validate(
        composed(
            *QUIET,
            f"data.path={path}",
            "batch.effective=8",
            "batch.split=8x1",
            "train.steps=4",
            "train.max_length=1024",
        )
    )
    sft = sft_kwargs(8, 1, job.config.train, "fp32", "cpu")
    epoch = RunOrder(job.config, epoch=True).longest(sft, 1)
    assert (180,) in epoch.rows and epoch.tokens == 8 * 1000 and epoch.of_records == 200
    steps = RunOrder(job.config, epoch=False).longest(sft, 1)
    assert (180,) not in steps.rows and steps.tokens <= 8 * 120 and steps.step <= 4 and steps.of_records == 32
    free = RunOrder(job.config, epoch=True).longest({**sft, "padding_free": True}, 1)
    assert free.tokens == free.real < epoch.tokens and free.squares == free.tokens**2


@pytest.mark.parametrize(
    "padding",
    # the default tier trains one (6 s); padding_free and packing (30 s) in the slow tier
    ["longest", pytest.param("padding_free", marks=pytest.mark.slow), pytest.param("packing", marks=pytest.mark.slow)],
)
def test_the_longest_micro_batch_trains_at_step_one_and_leaves_the_run_as_it_was(tmp_path, padding, monkeypatch):
    """The job's steps train on what they would without it (the same losses, tokens and micro-batches), and step
    one's peak holds the longest micro-batch's, marked so: no steady step. The allocator's cached segments are
    returned before it, once, and step one records how many bytes (the CPU caches none: a stand-in returns some)."""
    path = tmp_path / "late.jsonl"
    write_chats(path, records=200, shortest=30, longest=120, seed=0, long_at=180, long_tokens=1000)
    overrides = [f"data.path={path}", "batch.effective=8", "batch.split=4x2", "train.steps=4", "train.max_length=1024"]
    overrides += [f"train.padding={padding}", "model.vocab_size=8192"]  # logits large beside the rest
    job = validate(composed(*QUIET, *overrides))
    longest = RunOrder(job.config, epoch=True).longest(sft_kwargs(4, 2, job.config.train, "fp32", "cpu"), 1)
    plain = _run(tmp_path / "plain", Job, *overrides).result
    monkeypatch.setattr(memory, "release_cached", lambda: 3 * 2**20)
    first = _run(tmp_path / "first", Job, *overrides, first=longest).result
    assert [s.loss for s in first.steps] == [s.loss for s in plain.steps]
    assert [(s.tokens, s.micro_batches) for s in first.steps] == [(s.tokens, s.micro_batches) for s in plain.steps]
    assert [s.first_batch_tokens for s in first.steps] == [longest.tokens, 0, 0, 0]
    assert [s.released_bytes for s in first.steps] == [3 * 2**20, 0, 0, 0]
    assert [s.released_bytes for s in plain.steps] == [0, 0, 0, 0]
    assert not first.steps[0].steady_candidate and first.steps[1].steady_candidate
    if padding != "packing":  # packed rows are full whichever they are: the longest is no larger than the first
        assert first.steps[0].peak_bytes > plain.steps[0].peak_bytes + 50 * 2**20, (
            first.steps[0].peak_bytes,
            plain.steps[0].peak_bytes,
        )


class Shapes(Job):
    """A job that notes the shape of every micro-batch its model trains on."""

    def _setup_compile(self) -> None:
        super()._setup_compile()
        self.shapes: list[tuple[int, ...]] = []

        def note(module, args, kwargs) -> None:
            if module.training:
                self.shapes.append(tuple(kwargs["input_ids"].shape))

        self.trainer.model.register_forward_pre_hook(note, with_kwargs=True)


def test_length_buckets_bound_the_shapes_and_change_nothing_learned(tmp_path):
    """Padded to the longest rounded up to a quarter of max_length (64 of 256): every micro-batch is one of four
    widths, its padded tokens are those the reproduction lays out, and the losses are padding to the longest's."""
    path = tmp_path / "chats.jsonl"
    write_chats(path, records=64, shortest=30, longest=250, seed=1)
    overrides = [f"data.path={path}", "batch.effective=4", "batch.split=2x2", "train.steps=8", "train.max_length=256"]
    bucketed = _run(tmp_path / "buckets", Shapes, *overrides, "train.padding=buckets")
    longest = _run(tmp_path / "longest", Shapes, *overrides, "train.padding=longest")
    assert bucketed.sft_kwargs["pad_to_multiple_of"] == 64
    assert {width for _, width in bucketed.shapes} <= {64, 128, 192, 256}
    assert len({width for _, width in longest.shapes}) > 4  # unbucketed, the widths are as many as the longests
    order = RunOrder(bucketed.cfg, epoch=False, tokenizer=bucketed.tokenizer)
    b = Batching.of(bucketed.sft_kwargs, 1)
    lengths = order.lengths(False)
    laid = [b.layout([lengths[i] for i in idx])[0] for _, idx in micro_batches(len(lengths), b, 8)]
    assert laid == [rows * width for rows, width in bucketed.shapes]
    pairs = zip(bucketed.result.steps, longest.result.steps, strict=True)
    assert max(abs(a.loss - b.loss) / abs(b.loss) for a, b in pairs) <= 1e-5
    assert [s.tokens for s in bucketed.result.steps] == [s.tokens for s in longest.result.steps]  # real tokens alike
