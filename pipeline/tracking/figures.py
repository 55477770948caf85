"""What a finished job writes to its MLflow run besides its config: params derived from its result, per-step series,
its summary metrics as MLflow's UI shows them, and a description in the words the console uses.

MLflow prints a metric's value whole (`0.03739772099993388`), so every summary figure is logged rounded as the console
prints it: step times to four significant digits and at least four decimals (the tables' `.4f`), memory to four
significant digits and at least three decimals, drift and cv as the percent the console says (`drift +27.1%` is
`step_time_drift_pct` 27.1), everything else to four significant digits (whole numbers stay whole). The figure that
ranks configs, `step_time_trimmed_s`, keeps six significant digits (`ranked`: a confirmation round's pairs are taken
from the same rounded figure, so the console and the report compare the same numbers); the per-step series stay
whole. Metrics that say nothing happened are left out (`compile_s` 0: nothing compiled; `context_gib` 0: no CUDA
context), so that a run's page charts no empty ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pipeline.records import GIB, PHASES, JobResult, JobSpec
from pipeline.summaries import TOKENS_RATE, JobSummary

# logged first: MLflow's UI keeps the order a run's metrics were logged in where it lists them, and its compare page
# plots the first metric the runs share by default
LEADING_METRICS = ("step_time_median_s", "tokens_per_s", "peak_gib")
SHOWN_DECIMALS = {"step_time_median_s": 4, "tokens_per_s": 0}  # at least; `*_gib` at least 3
NOTHING_WHEN_ZERO = ("compile_s", "context_gib")
DESCRIPTION = "mlflow.note.content"  # the tag MLflow's run page shows, as Markdown, at the top of its overview

PROFILE_METRICS = (
    "launches_per_step",
    "kernels_per_step",
    "device_ms",
    "host_ms",
    "device_busy_fraction",
    "syncs_per_step",
    "casts_per_step",
    "ops_per_step",
)


def shown(value: float, decimals: int) -> float:
    """`value` to four significant digits, and to at least `decimals` decimals."""
    if value == 0 or not math.isfinite(value):
        return value
    return round(value, max(decimals, 3 - math.floor(math.log10(abs(value)))))


ROUND = "round_"  # a confirmation run's view figures: `round_step_time_median_s`, ...


def restored(metrics: dict[str, float]) -> dict[str, float]:
    """A run's metrics under the names every reader knows (a confirmation run's ROUND names undone)."""
    return {k.removeprefix(ROUND) if k.removeprefix(ROUND) in LEADING_METRICS else k: v for k, v in metrics.items()}


RANKED = "step_time_trimmed_s"  # what the pairs compare: six significant digits
PERCENT = ("step_time_drift_pct", "step_time_cv_pct")  # one decimal


def ranked(value: float) -> float:
    """A run's figure in paired comparisons, as it is logged: six significant digits."""
    if value == 0 or not math.isfinite(value):
        return value
    return round(value, 5 - math.floor(math.log10(abs(value))))


def rounded(key: str, value: float) -> float:
    """A summary metric as it is logged (the module's docstring says how)."""
    if key == RANKED:
        return ranked(value)
    if key in PERCENT:
        return round(value, 1)
    if key in SHOWN_DECIMALS:
        return shown(value, SHOWN_DECIMALS[key])
    if key.endswith("_gib"):
        return shown(value, 3)  # every memory figure alike: `peak_gib` stays the largest `peak_rank<r>_gib`
    if key.startswith("step_time") or key.endswith("_median_s"):  # step times and their phases
        return shown(value, 4)
    return shown(value, 0)


def metrics(summary: JobSummary, profile: dict | None = None, apart: bool = False) -> dict[str, float]:
    """The summary's metrics, the view's first, rounded where a person reads them; the profile's if one ran.
    `apart`: a confirmation run, whose view figures are logged under ROUND names (`round_step_time_median_s`): a few
    steps of a round, not a config's figures, so that the runs table's group of them shows no minimum to read as
    faster than the configs' own runs."""
    found = summary.metrics()
    out = {k: found[k] for k in LEADING_METRICS if k in found} | found
    out = {key: rounded(key, value) for key, value in out.items()}
    out = {k: v for k, v in out.items() if not (k in NOTHING_WHEN_ZERO and v == 0)}
    if apart:
        out = {(f"{ROUND}{k}" if k in LEADING_METRICS else k): v for k, v in out.items()}
    if profile:
        out.update({f"profile.{k}": profile[k] for k in PROFILE_METRICS if profile.get(k) is not None})
    return out


def derived_params(spec: JobSpec, result: JobResult) -> dict[str, object]:
    """What the config does not say directly: the parsed split, the device, the resolved dtype, versions."""
    params: dict[str, object | None] = {
        "micro_batch": spec.micro,
        "accumulation": spec.accumulation,
        "effective_batch": spec.config.batch.effective,
        "world_size": spec.config.world_size,
        "cap_source": spec.cap_source,
        "lora_params": result.lora_params,
        "base_matmul_params": result.base_matmul_params,
    }
    if result.placement:
        p = result.placement
        params.update(
            device=p.device, device_name=p.device_name, dtype_resolved=p.dtype, emulated_gpu=p.emulated or "none"
        )
    params.update({f"version.{k}": v for k, v in result.versions.items()})
    return {k: v for k, v in params.items() if v is not None}


NOT_RECORDED = "not recorded"


@dataclass(frozen=True)
class RunDevice:
    """What a job's run says of its device, read back from the params `derived_params` wrote: a run without a
    placement (a job that failed before it placed its model) has none of them, each then NOT_RECORDED; a store
    written before the driver was a version says none either; world size 1 where it is missing."""

    type: str = NOT_RECORDED  # cuda or cpu
    name: str = NOT_RECORDED
    driver: str = NOT_RECORDED
    count: int = 1

    @classmethod
    def from_params(cls, params: dict[str, str]) -> RunDevice:
        return cls(
            params.get("device", NOT_RECORDED),
            params.get("device_name", NOT_RECORDED),
            params.get("version.driver", NOT_RECORDED),
            int(params.get("world_size", 1)),
        )

    @property
    def recorded(self) -> bool:
        return self.name not in (NOT_RECORDED, "")


def series(result: JobResult, steady: set[int]) -> dict[str, list[tuple[int, float]]]:
    """Per-step series for MLflow's charts: loss, step time and its phases, peak memory so far. `step_time_s` holds
    the `steady` steps (those the statistics use), `step_time_warmup_s` the others (the warm-up, steps that compiled
    or ran under the profiler), so that the first steps' seconds do not flatten the steady ones on one axis;
    `step_compile_s` only when something compiled."""
    keys = ["loss", "grad_norm", "learning_rate", *(f"{p}_s" for p in PHASES)]
    out = {key: [(s.step, getattr(s, key)) for s in result.steps if getattr(s, key) is not None] for key in keys}
    out["step_time_s"] = [(s.step, s.step_time_s) for s in result.steps if s.step in steady]
    out["step_time_warmup_s"] = [(s.step, s.step_time_s) for s in result.steps if s.step not in steady]
    out["step_peak_gib"] = [(s.step, s.peak_bytes / GIB) for s in result.steps]
    if result.world_size > 1:
        out["allreduce_s"] = [(s.step, s.allreduce_s) for s in result.steps]
    if any(s.compile_s for s in result.steps):
        out["step_compile_s"] = [(s.step, s.compile_s) for s in result.steps]  # `compile_s` is the job's total
    return out


def stall_note(result: JobResult) -> str:
    """What the run says of its stalled steps (`jobs.stall.mark`): `step 7 took 41.2 s, over the stall limit of
    2 s: left out of the steady steps`."""
    times = [s.step_time_s for s in result.steps if s.step in result.stalled_steps]
    which = ", ".join(str(n) for n in result.stalled_steps)
    took = f"took {times[0]:.1f} s" if len(times) == 1 else f"took up to {max(times):.1f} s"
    return (
        f"step{'s' if len(times) > 1 else ''} {which} {took}, over the stall limit of {result.stall_limit_s:g} s: "
        "left out of the steady steps"
    )


def description(name: str, summary: JobSummary, more: list[str] | tuple[str, ...] = ()) -> str:
    """The run's page's first lines, as the console says them: `**tiny 2x2 #1**: ok, step 0.1888 s (median of 25
    steady steps, 96% interval [0.1491, 0.2839]) · 2,712 real tokens/s · peak 0.467 GiB`, then `drift +15%` (the last
    third of the steady steps against the first: the metric `step_time_drift_pct`, 15.0), `cv 194%`, and
    the lines `more` adds (the rank, the time ratio)."""
    head = f"**{name}**: {summary.status}"
    s = summary.step_time
    if s is not None:
        head += (
            f", step {s.median:.4f} s (median of {s.n} steady steps, {100 * s.ci.level:.0f}% interval "
            f"[{s.ci.low:.4f}, {s.ci.high:.4f}])"
        )
    rate = summary.per_second(summary.tokens_per_step)
    head += f" · {rate:,.0f} {TOKENS_RATE}" if rate else ""
    head += f" · peak {summary.peak_gib:.3f} GiB" if summary.peak_gib is not None else ""
    lines = [head]
    if s is not None:
        drift = (
            []
            if summary.drift is None
            else [f"drift {100 * (summary.drift - 1):+.0f}% (the last third of steady steps against the first)"]
        )
        stalled = [stalled_words(summary)] if summary.stalled_steps else []
        lines.append(", ".join([*drift, f"cv {100 * s.cv:.0f}%", *stalled]))
    return "\n\n".join([*lines, *more])


def host_text(host: dict | None) -> str | None:
    """What a run's `host` tag says of where its training thread ran: `cpu 5 (node 0), then cpu 7 (node 1); 16
    allowed, load 1.2`, and where it was pinned (`measure.pin_cpu`)."""
    if not host:
        return None
    places = [
        f"cpu {c}" + (f" (node {n})" if n is not None else "") for c, n in zip(host["cpus"], host["nodes"], strict=True)
    ]
    threads = f", {host['threads']} torch threads" if host.get("threads") else ""
    pinned = host.get("pinned")
    pin = (
        f"; pinned to cpu {pinned['cpu']}, the fastest of {host['allowed']} at host work "
        f"(the slowest {pinned['slowest_over_fastest']}x its time)"
        if pinned
        else f"; not pinned ({host['unpinned']})"
        if host.get("unpinned")
        else ""
    )
    return f"{', then '.join(places)}; {host['allowed']} allowed{threads}, load {host['load_1m']}{pin}"


def stalled_words(summary: JobSummary) -> str:
    """`1 stalled step left out (41 s)`: the few words a run's page and the table's notes say of its stalls."""
    count = summary.stalled_steps
    up_to = "up to " if count > 1 else ""
    longest = f" ({up_to}{summary.stalled_max_s:.0f} s)" if summary.stalled_max_s is not None else ""
    return f"{count} stalled step{'s' if count > 1 else ''} left out{longest}"
