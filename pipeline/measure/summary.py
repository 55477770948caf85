"""A job's result turned into the figures people compare, and back from the metrics MLflow holds.

Every rate in a row comes from the same statistic as its step column: tokens/s, samples/s and MFU are the mean work
of a steady step over the median steady step time, so a stalled step cannot make the fastest median the slowest
throughput.
"""

from __future__ import annotations

import statistics

from pipeline.measure.stats import summarize
from pipeline.records import GIB, PHASES, SECONDS, JobResult, Step, fit_of
from pipeline.summaries import JobSummary


def steady_steps(result: JobResult, warmup_steps: int) -> list[Step]:
    """The steps a job's statistics are made of: after the warm-up, none that compiled or ran under the profiler,
    nor one its parent found stalled (`jobs.stall.mark`: stopped or waiting, not training)."""
    stalled = set(result.stalled_steps)
    return [s for s in result.steps if s.step > warmup_steps and s.steady_candidate and s.step not in stalled]


def summarize_job(result: JobResult, warmup_steps: int, confidence: float) -> JobSummary:
    """The steady steps (after `warmup_steps`, none that compiled or was profiled) summarised; memory in GiB; the
    fit against the cap."""
    steady = steady_steps(result, warmup_steps)
    memory = result.memory
    memory_gib = {}
    if memory is not None:
        for key in ("peak", "peak_reserved", "peak_allocated", "peak_rss", "model_load", "nvml_process", "cap"):
            value = getattr(memory, f"{key}_bytes")
            if value is not None:
                memory_gib[key] = value / GIB
        memory_gib["context"] = memory.context_bytes / GIB
        memory_gib.update({f"peak_rank{rank}": peak / GIB for rank, peak in enumerate(memory.rank_peak_bytes)})
    timings = result.timings
    seconds = {k: timings[f"{k}_s"] for k in SECONDS if f"{k}_s" in timings}
    common = dict(
        status=result.status,
        fit=fit_of(result.status, memory.peak_bytes if memory else None, memory.cap_bytes if memory else None),
        steps_done=len(result.steps),
        memory_gib=memory_gib,
        seconds=seconds,
        final_loss=result.steps[-1].loss if result.steps else None,
        stalled_steps=len(result.stalled_steps),
        stalled_max_s=max((s.step_time_s for s in result.steps if s.step in result.stalled_steps), default=None),
    )
    step_time = summarize([s.step_time_s for s in steady], confidence)
    if step_time is None:
        return JobSummary(**common)
    tokens = statistics.fmean(s.tokens for s in steady)  # every rank's (the meter sums them)
    peak_tflops = result.placement.peak_tflops if result.placement else None
    peak_tflops = peak_tflops * result.world_size if peak_tflops else None  # MFU over every rank's device
    return JobSummary(
        **common,
        step_time=step_time,
        tokens_per_step=tokens,
        padded_tokens_per_step=statistics.fmean(s.padded_tokens for s in steady),
        samples_per_step=statistics.fmean(s.samples for s in steady),
        model_flops_per_step=tokens * result.model_flops_per_token if result.model_flops_per_token else None,
        peak_flops=peak_tflops * 1e12 if peak_tflops else None,
        phases={p: statistics.median(s.phase(p) for s in steady) for p in PHASES},
        drift=drift([s.step_time_s for s in steady]),
        gpu_busy=result.gpu_busy,
        allreduce_s=statistics.median(s.allreduce_s for s in steady) if result.world_size > 1 else None,
    )


def drift(times: list[float]) -> float | None:
    """Median of the last third over the median of the first third: 1.0 on a quiet machine; None below 6 steps."""
    if len(times) < 6:
        return None
    third = len(times) // 3
    return statistics.median(times[-third:]) / statistics.median(times[:third])
