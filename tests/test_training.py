"""Real TRL training on the tiny model, in-process (the job logic without the process around it)."""

from __future__ import annotations

import dataclasses
import json
import os
import time

import pytest
import torch
from transformers import TrainerCallback

from pipeline.config.validate import validate
from pipeline.jobs.child import Job
from pipeline.jobs.task import job_spec
from pipeline.measure.callback import IN_STEP_FACTOR
from pipeline.measure.host import node_of
from pipeline.measure.summary import summarize_job
from pipeline.records import Fit, JobResult, Status, StopRule
from tests.helpers.configs import composed

QUIET = ["train.progress_bar=false", "train.steps=8", "measure.warmup_steps=2"]


def make_job(tmp_path, *overrides: str, stop: StopRule | None = None) -> Job:
    spec = job_spec(validate(composed(*QUIET, *overrides)), stop=stop)
    workdir = tmp_path / "job"
    workdir.mkdir(parents=True, exist_ok=True)
    return Job(spec, workdir)


def losses(result: JobResult) -> list[float]:
    assert result.status is Status.OK, result.traceback
    return [s.loss for s in result.steps]


def test_splits_give_the_same_losses_in_fp32(tmp_path):
    """Gradient accumulation is normalised by token count: 1x4, 2x2, 4x1 train the same model, step by step."""
    runs = {split: losses(make_job(tmp_path / split, f"batch.split={split}").run()) for split in ("1x4", "2x2", "4x1")}
    reference = runs["1x4"]
    assert len(reference) == 8
    for split, values in runs.items():
        worst = max(abs(a - b) / abs(b) for a, b in zip(values, reference, strict=True))
        assert worst <= 1e-5, f"{split} deviates by {worst:.2e}"
    # and they do learn something different from a different seed (the comparison is not vacuous)
    other = losses(make_job(tmp_path / "seed", "batch.split=4x1", "train.seed=7").run())
    assert max(abs(a - b) for a, b in zip(other, reference, strict=True)) > 1e-4


def test_splits_with_variable_lengths_agree(tmp_path):
    """With padding in play (uniform lengths), token-normalised accumulation still agrees across splits."""
    common = ["data.distribution=uniform", "data.min_length=16"]
    a = losses(make_job(tmp_path / "a", "batch.split=1x4", *common).run())
    b = losses(make_job(tmp_path / "b", "batch.split=4x1", *common).run())
    assert max(abs(x - y) / abs(y) for x, y in zip(a, b, strict=True)) <= 1e-5


def test_padding_free_trains_and_keeps_each_sequence_to_itself(tmp_path):
    """Padding-free flattens a micro-batch into one row: with variable lengths, its losses equal padding's only if
    every sequence attends to itself alone (sdpa reads the sequence boundaries from the position ids). TRL refuses
    padding-free without packing when max_length is set; the job truncates the data up front instead."""
    common = ["data.distribution=uniform", "data.min_length=16", "batch.split=4x1"]
    padded = losses(make_job(tmp_path / "padded", *common).run())
    job = make_job(tmp_path / "free", *common, "train.padding=padding_free")
    free = losses(job.run())
    assert job.sft_kwargs["padding_free"] is True and job.sft_kwargs["max_length"] is None
    assert max(abs(x - y) / abs(y) for x, y in zip(free, padded, strict=True)) <= 1e-5


def test_padding_free_truncates_text_records_to_max_length(tmp_path):
    """A text record longer than train.max_length trains padding-free: cut to max_length tokens up front."""
    path = tmp_path / "long.jsonl"
    path.write_text("".join(json.dumps({"text": "word " * 400}) + "\n" for _ in range(8)), encoding="utf-8")
    job = make_job(tmp_path, "data=jsonl", f"data.path={path}", "train.padding=padding_free", "train.max_length=64")
    result = job.run()
    assert result.status is Status.OK, result.traceback
    assert {len(ids) for ids in job.dataset["input_ids"]} == {64}
    assert all(s.tokens == 4 * 64 for s in result.steps)


def test_only_adapter_weights_change(tmp_path):
    job = make_job(tmp_path)
    job._setup_device()
    job._setup_model()
    before = {p: p.detach().clone() for p in job.model.parameters()}
    job._setup_data()
    job._setup_trainer()
    job._train()
    for param, value in before.items():
        assert torch.equal(param, value), "a base weight changed"
    adapters = {n: p for n, p in job.trainer.model.named_parameters() if p.requires_grad}
    assert adapters and all("lora_" in n for n in adapters)
    assert any(p.abs().sum() > 0 for n, p in adapters.items() if "lora_B" in n), "adapters did not train"


def test_record_holds_steps_phases_and_memory(tmp_path):
    result = make_job(tmp_path, "batch.split=2x2").run()
    assert result.status is Status.OK
    step = result.steps[-1]
    assert step.micro_batches == 2 and step.samples == 4 and step.tokens == 4 * 128
    # every measured phase is a real, positive share of the step (on CPU they come from perf_counter marks)
    assert all(step.phase(p) > 0 for p in ("forward", "backward", "optimizer"))
    assert step.forward_s + step.backward_s + step.optimizer_s < step.step_time_s
    assert result.memory.peak_rss_bytes > 0 and result.lora_params > 0
    assert (
        result.sft_kwargs["per_device_train_batch_size"] == 2 and result.sft_kwargs["gradient_accumulation_steps"] == 2
    )
    lines = (tmp_path / "job" / "steps.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == list(range(1, 9))
    # where the training thread ran: after the warm-up and at the end, on CPUs it was allowed
    assert len(result.host["cpus"]) == 2 and set(result.host["cpus"]) <= os.sched_getaffinity(0)
    assert result.host["allowed"] == len(os.sched_getaffinity(0)) and len(result.host["nodes"]) == 2
    # the record survives its trip through JSON unchanged (the process boundary)
    assert JobResult.from_json(json.loads(json.dumps(result.to_json()))) == result


def test_a_cpu_job_trains_on_the_threads_it_is_given(tmp_path):
    """One thread by default on the CPU: a second one waits on whatever else the two cores run, and the steps vary."""
    before = torch.get_num_threads()
    try:
        assert make_job(tmp_path / "one", "train.steps=3", "measure.warmup_steps=1").run().host["threads"] == 1
        torch.set_num_threads(before)
        own = make_job(tmp_path / "own", "train.steps=3", "measure.warmup_steps=1", "measure.cpu_threads=null").run()
        assert own.host["threads"] == before
    finally:
        torch.set_num_threads(before)


def test_a_cpus_memory_node_is_read_from_the_system_and_none_where_it_says_none(tmp_path):
    (tmp_path / "cpu3" / "node1").mkdir(parents=True)
    (tmp_path / "cpu4").mkdir()
    assert node_of(3, tmp_path) == 1 and node_of(4, tmp_path) is None


def test_pretrained_model_from_a_local_directory(tmp_path):
    """The hub path, offline: a tiny model and tokenizer saved with save_pretrained, loaded with from_pretrained."""
    from pipeline.builders.model import build_model
    from pipeline.builders.tokenizer import byte_level_tokenizer
    from pipeline.config.schema import ModelConfig

    tokenizer = byte_level_tokenizer()
    shape = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2)
    shape.update(num_key_value_heads=1, head_dim=16, vocab_size=300, max_position_embeddings=64)
    model = ModelConfig(name="saved", **shape)
    saved = tmp_path / "saved"
    build_model(model, tokenizer, torch.float32, "cpu", 0).save_pretrained(saved)
    tokenizer.save_pretrained(saved)
    record = make_job(
        tmp_path, "model=pretrained", f"model.name_or_path={saved}", "data.length=32", "train.max_length=32"
    ).run()
    assert record.status is Status.OK, record.traceback
    assert record.base_matmul_params == 1 * (3 * 32 * 64 + 32 * 32 + 2 * 32 * 16 + 32 * 32) + 300 * 32


@pytest.mark.parametrize("kind", ["messages", "text"])
def test_jsonl_data_trains(tmp_path, kind):
    path = tmp_path / "data.jsonl"
    rows = []
    for i in range(16):
        if kind == "messages":
            rows.append(
                {
                    "messages": [
                        {"role": "user", "content": f"question {i}"},
                        {"role": "assistant", "content": f"answer number {i}"},
                    ]
                }
            )
        else:
            rows.append({"text": f"sample text number {i} " * 3})
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    record = make_job(tmp_path, "data=jsonl", f"data.path={path}").run()
    assert record.status is Status.OK, record.traceback
    assert all(s.tokens <= s.padded_tokens for s in record.steps)
    assert record.steps[0].tokens > 0


@pytest.mark.parametrize(("cap", "expected"), [("64GiB", "fits"), ("100MiB", "over-cap")])
def test_cpu_cap_is_judged_on_peak_resident_memory(tmp_path, cap, expected):
    """On CPU the job's peak resident memory is its memory figure, judged against the cap after the job."""
    record = make_job(tmp_path, f"mem_cap={cap}").run()
    memory = record.memory
    assert memory.cap_bytes == {"64GiB": 64 * 2**30, "100MiB": 100 * 2**20}[cap]
    assert memory.peak_bytes == memory.peak_rss_bytes > 100 * 2**20
    assert summarize_job(record, 2, 0.95).fit is Fit(expected)


def test_a_hopeless_config_is_stopped_mid_step_once_two_steps_say_so(tmp_path):
    """Within the pruning window a step already over 2x the threshold ends the job at a micro-batch start, once an
    earlier step of the window was that slow too: with an impossible threshold, step 2 runs whole (one step decides
    nothing), step 3 stops at its first micro-batch, and steps 1-2 are kept."""
    record = make_job(tmp_path, "batch.split=1x4", stop=StopRule(prune_after=3, prune_threshold_s=1e-9)).run()
    assert record.status is Status.PRUNED, record.traceback
    assert record.stopped.startswith("pruned at step 3 (step 3 ran ")
    assert [s.step for s in record.steps] == [1, 2]
    # the same job without a threshold trains all its steps
    assert len(losses(make_job(tmp_path / "free", "batch.split=1x4").run())) == 8


class Delay(TrainerCallback):
    """Work added at the start of some steps: `extra[step]` seconds, `every` seconds for the others."""

    def __init__(self, every: float, extra: dict[int, float]) -> None:
        self.every, self.extra = every, extra

    def on_step_begin(self, args, state, control, **kwargs):
        time.sleep(self.every + self.extra.get(state.global_step + 1, 0.0))


class SlowedJob(Job):
    """A job whose steps take longer by a known amount: a stalled step, or a config truly slower."""

    def __init__(self, spec, workdir, every: float, extra: dict[int, float] | None = None) -> None:
        super().__init__(spec, workdir)
        self.delay = Delay(every, extra or {})

    def _setup_trainer(self) -> None:
        super()._setup_trainer()
        self.trainer.add_callback(self.delay)


@pytest.fixture
def one_thread():
    """Torch on one thread for a test whose steps must take a known time: with its default two threads spinning
    against other processes on a busy 2-core machine, the tiny model's own share of a step grew to 1-1.5 s."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.slow
def test_one_stalled_step_does_not_prune_a_fast_config_but_a_slower_config_is_pruned_early(
    tmp_path, one_thread, compose
):
    """The study prunes a trial whose steps 2-4 have a median over the threshold (2 s here). A fast config (0.5 s of
    work per step, plus the tiny model's own, some 0.05 s) with step 3 stalled by 5 s, over 2x the threshold (the old
    rule pruned on such a single step), trains to the end; the same config doing more than twice the work on every
    step (2.4 s) is pruned at the end of the window, step 4 of 5. The work is made of known delays, seconds from the
    threshold and from 2x it on either side, so the outcomes hold on a busy machine (at a 1 s threshold, a step of
    the fast config once took over 2 s on a 2-core machine running a browser and two studies beside the tests)."""
    spec = job_spec(validate(compose(*QUIET, "batch.split=4x1", "train.steps=5")))
    spec = dataclasses.replace(spec, stop=StopRule(prune_after=3, prune_threshold_s=2.0))
    for name in ("stalled", "slow"):
        (tmp_path / name).mkdir()
    stalled = SlowedJob(spec, tmp_path / "stalled", 0.5, {3: 5.0}).run()  # 0.5 s + the model's own: under 2.0
    assert stalled.status is Status.OK, stalled.stopped
    assert [s.step for s in stalled.steps] == [1, 2, 3, 4, 5]
    assert stalled.steps[2].step_time_s > IN_STEP_FACTOR * 2.0  # the stall was there, and alone decided nothing
    slow = SlowedJob(spec, tmp_path / "slow", 2.4).run()
    assert slow.status is Status.PRUNED and slow.stopped.startswith("pruned at step 4"), slow.stopped
    assert [s.step for s in slow.steps] == [1, 2, 3, 4]
