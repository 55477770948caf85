"""The CUDA paths, on a real GPU (`pytest -m gpu`; skipped where there is none): the allocator cap, the CUDA-event
phases, NVML's view of the process. bench/gpu_tests.sh runs them on the GPU machine."""

from __future__ import annotations

import statistics

import pytest

from pipeline.config.validate import validate
from pipeline.jobs import runner
from pipeline.jobs.task import job_spec
from pipeline.measure.summary import summarize_job
from pipeline.records import GIB, Fit, Status
from tests.helpers.configs import composed

pytestmark = pytest.mark.gpu

# a Qwen3-shaped model big enough for the device to be busy (about 0.4 B parameters), 512-token sequences
SETUP = [
    "model=qwen3-0.6b",
    "train.max_length=512",
    "train.padding=max_length",
    "train.steps=12",
    "measure.warmup_steps=4",
    "train.progress_bar=false",
]


def run_job(tmp_path, *overrides: str):
    """One job in its own process, as the tool runs it: a cap set in a process stays for the process's life."""
    spec = job_spec(validate(composed(*SETUP, *overrides)))
    return spec, runner.run_job("subprocess", spec, tmp_path / "job")


def test_the_allocator_cap_stops_a_job_at_the_cap(tmp_path):
    """4x1 without checkpointing needs several GiB: under a 2 GiB cap the caching allocator refuses before the
    device does, so the job ends `oom` with its peak under the cap, and the same job uncapped needs more."""
    spec, capped = run_job(tmp_path / "capped", "mem_cap=2GiB", "batch.split=4x1")
    assert capped.status is Status.OOM, capped.error
    assert capped.memory.peak_bytes <= 2 * GIB
    _, free = run_job(tmp_path / "free", "batch.split=4x1", "train.steps=6", "measure.warmup_steps=2")
    assert free.status is Status.OK and free.memory.peak_bytes > 2 * GIB
    assert summarize_job(capped, 4, 0.95).fit is Fit.OOM


def test_cuda_event_phases_account_for_the_wall_step(tmp_path):
    """Forward, backward, optimizer (CUDA events) and data (host) cover the step: what is left (`other`) is a few
    percent of it, and no phase is negative."""
    _, result = run_job(tmp_path, "batch.split=2x2")
    assert result.status is Status.OK, result.error
    steady = [s for s in result.steps if s.step > 4]
    for step in steady:
        assert min(step.forward_s, step.backward_s, step.optimizer_s, step.data_s) >= 0
    left = statistics.median(s.other_s / s.step_time_s for s in steady)
    assert -0.05 < left < 0.05, [(s.step_time_s, s.other_s) for s in steady]


def test_nvml_sees_the_process_with_its_context(tmp_path):
    _, result = run_job(tmp_path, "batch.split=4x1", "train.steps=6", "measure.warmup_steps=2")
    memory = result.memory
    assert result.status is Status.OK, result.error
    assert memory.context_bytes > 100 * 2**20  # a CUDA context is hundreds of MiB
    assert memory.nvml_process_bytes is not None
    # NVML charges the process its reserved memory plus the context, as the cap assumes (within 10%)
    assert memory.nvml_process_bytes == pytest.approx(memory.peak_reserved_bytes + memory.context_bytes, rel=0.10)
