"""Records built from known step times, for tests of what summarises and compares them, and the same recorded as
runs in a real MLflow store."""

from __future__ import annotations

import functools

from pipeline.measure.summary import summarize_job
from pipeline.records import JobMemory, JobResult, Placement, RunKind, Status, Step
from pipeline.summaries import RecordedJob


def result(times, loss_offset=0.0, peak=2**30, cap=None, tokens=100, busy=None) -> JobResult:
    """A finished CUDA job whose steps took `times` seconds (phases in fixed shares), losses 5.0 - 0.1 per step."""
    steps = tuple(
        Step(
            step=i + 1,
            step_time_s=t,
            forward_s=t / 4,
            backward_s=t / 2,
            optimizer_s=t / 8,
            data_s=t / 16,
            other_s=t / 16,
            micro_batches=1,
            tokens=tokens,
            padded_tokens=128,
            samples=4,
            peak_bytes=peak,
            loss=5.0 - 0.1 * i + loss_offset,
        )
        for i, t in enumerate(times)
    )
    placement = Placement("cuda", "gpu", 80.0, None, "bf16", 100.0, True)
    return JobResult(
        status=Status.OK,
        steps=steps,
        memory=JobMemory(peak_bytes=peak, cap_bytes=cap),
        placement=placement,
        model_flops_per_token=1e9,
        gpu_busy=busy,
    )


def recorded(name, config_id, times, repeat=0, offset=0.0, busy=None, kind=RunKind.JOB) -> RecordedJob:
    """A sweep's job as MLflow gives it back: its repeat is its paired round."""
    run = result(times, offset, busy=busy)
    return RecordedJob(
        run_id=f"{name}#{repeat}",
        name=name,
        config_id=config_id,
        repeat=repeat,
        kind=kind,
        summary=summarize_job(run, 0, 0.95),
        losses=tuple(s.loss for s in run.steps),
        round=repeat if kind is RunKind.JOB else None,
    )


@functools.cache
def _spec(overrides: tuple[str, ...], name: str):
    from pipeline.config.validate import validate
    from pipeline.jobs.task import job_spec
    from tests.helpers.configs import composed

    return job_spec(validate(composed(*overrides)), name)


def record_run(tracker, parent, overrides, name, times, repeat=0, kind=RunKind.JOB, tags=None) -> str:
    """A finished job of the config `overrides` (named `name`) whose steps took `times`, recorded under `parent`
    in a real MLflow store as a job records itself; its run id."""
    from pipeline.tracking import runs

    spec = _spec(tuple(overrides), name)
    run_id = runs.start_job(tracker, spec, kind, parent, repeat, tags)
    run = result(times)
    summary = summarize_job(run, 0, 0.95)
    runs.end_job(tracker, run_id, spec, run, summary, set(range(1, len(times) + 1)), {})
    return run_id
