"""What measuring does beside the steps stays out of their time: `measure.pin_cpu` (the training thread pinned, when
the warm-up ends, to the CPU fastest at host work then, after a probe of every CPU) and `measure.profile` (the trace
written after the profiled steps). Real TRL training on the tiny model, in-process."""

from __future__ import annotations

import os
import time

import pytest

import pipeline.measure.host
from pipeline.config.validate import validate
from pipeline.jobs.child import Job
from pipeline.jobs.task import job_spec
from pipeline.measure.cpu_speed import cpu_speeds, ranked
from pipeline.records import Status
from pipeline.tracking.figures import host_text
from tests.helpers.configs import composed

QUIET = ["train.progress_bar=false", "train.steps=6", "measure.warmup_steps=2"]


def test_cpus_rank_by_both_works_together_with_ties_to_the_lower_number():
    speeds = {
        3: {"python": 10.0, "dispatch": 5.0},
        1: {"python": 6.0, "dispatch": 9.0},
        2: {"python": 4.0, "dispatch": 4.0},
        0: {"python": 20.0, "dispatch": 1.0},
    }
    assert ranked(speeds) == [2, 1, 3, 0]


def test_the_probe_times_every_allowed_cpu_and_leaves_the_threads_cpus_as_they_were():
    before = os.sched_getaffinity(0)
    speeds = cpu_speeds(sorted(before), rounds=2, python_n=2_000, dispatch_n=50)
    assert set(speeds) == before
    assert all(t["python"] > 0 and t["dispatch"] > 0 for t in speeds.values())
    assert os.sched_getaffinity(0) == before


def test_a_pinned_jobs_steady_steps_run_on_the_cpu_it_chose_and_its_probe_is_no_steps_time(tmp_path, monkeypatch):
    """The thread is on the pinned CPU at the first steady step (where the host watch reads it), every allowed CPU was
    probed, and a probe made to take 1.5 s shows in no step: the step clock restarts after it."""
    real = pipeline.measure.host.cpu_speeds

    def slow_probe(cpus):
        time.sleep(1.5)
        return real(cpus, rounds=1, python_n=2_000, dispatch_n=50)

    monkeypatch.setattr(pipeline.measure.host, "cpu_speeds", slow_probe)
    allowed = os.sched_getaffinity(0)
    workdir = tmp_path / "job"
    workdir.mkdir()
    try:
        result = Job(job_spec(validate(composed(*QUIET, "measure.pin_cpu=true"))), workdir).run()
    finally:
        os.sched_setaffinity(0, allowed)  # the job ran in this thread
    assert result.status is Status.OK, result.traceback
    pinned = result.host["pinned"]
    assert {int(c) for c in pinned["probe_ms"]} == allowed
    assert pinned["cpu"] == min(pinned["probe_ms"], key=lambda c: (pinned["probe_ms"][c], int(c)))
    assert result.host["cpus"][0] == pinned["cpu"] and result.host["allowed"] == len(allowed)
    assert [s.step for s in result.steps if s.step_time_s > 1.5] == []
    assert f"pinned to cpu {pinned['cpu']}, the fastest of {len(allowed)} at host work" in host_text(result.host)


@pytest.mark.slow
def test_a_job_allowed_one_cpu_says_it_had_nothing_to_pin_and_ranks_sharing_a_host_are_not_pinned(tmp_path):
    """Ranks on one host probe at once (each slows the others' probe) and could choose one CPU for two: neither is
    pinned, and the host tag says why."""
    allowed = os.sched_getaffinity(0)
    one = min(allowed)
    os.sched_setaffinity(0, {one})
    try:
        workdir = tmp_path / "job"
        workdir.mkdir()
        result = Job(job_spec(validate(composed(*QUIET, "measure.pin_cpu=true"))), workdir).run()
    finally:
        os.sched_setaffinity(0, allowed)
    assert result.status is Status.OK, result.traceback
    assert "pinned" not in result.host and result.host["unpinned"] == "one CPU allowed"
    assert host_text(result.host).endswith("; not pinned (one CPU allowed)")
    shared = pipeline.measure.host.HostWatch(2, pin=object(), ranks=2)
    assert shared.pin is None and shared.summary() is None and shared.unpinned == "2 ranks share this host"


@pytest.mark.slow
def test_a_profiled_jobs_trace_is_written_outside_every_steady_step(tmp_path, monkeypatch):
    """`measure.profile=true` records the steps after the warm-up and writes its trace when the last ends: writing
    it (made to take 1.5 s here) fell in the next step's time, which counted as steady. The step clock restarts
    after it; the profiled steps are marked and the summary names where they began."""
    import torch.profiler

    real = torch.profiler.profile.export_chrome_trace

    def slow_export(self, path):
        time.sleep(1.5)
        return real(self, path)

    monkeypatch.setattr(torch.profiler.profile, "export_chrome_trace", slow_export)
    workdir = tmp_path / "job"
    workdir.mkdir()
    overrides = ["train.progress_bar=false", "train.steps=10", "measure.warmup_steps=2", "measure.profile=true"]
    result = Job(job_spec(validate(composed(*overrides))), workdir).run()
    assert result.status is Status.OK, result.traceback
    assert [s.step for s in result.steps if s.profiled] == [3, 4, 5, 6]
    assert [s.step for s in result.steps if s.step_time_s > 1.5] == []
    assert (workdir / "profile" / "trace.json").is_file()
