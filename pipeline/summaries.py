"""The summaries of measured jobs: a statistic with its interval, one job's summary (its MLflow metrics, read and
written), and a job as MLflow holds it, for the reports and the sweep's table."""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.records import PHASES, SECONDS, Fit, RunKind, Status

# what every table, card and run page calls the throughput: the records' own tokens per second, padding left out
# (the meter counts a micro-batch's attention mask, or a padding-free row up to its last record), so that a padded
# layout's work is not counted as its speed
TOKENS_RATE = "real tokens/s"


@dataclass(frozen=True)
class Interval:
    low: float
    high: float
    level: float  # probability that the interval covers the true median

    def overlaps(self, other: Interval) -> bool:
        return self.low <= other.high and other.low <= self.high


@dataclass(frozen=True)
class Summary:
    n: int
    median: float
    mean: float
    trimmed: float  # 20%-trimmed mean (`measure.stats.trimmed_mean`): a confirmation run's figure
    p10: float
    p90: float
    cv: float
    ci: Interval


@dataclass(frozen=True)
class JobSummary:
    status: Status
    fit: Fit
    steps_done: int = 0
    step_time: Summary | None = None  # over the steady steps
    tokens_per_step: float | None = None  # real tokens, mean over the steady steps
    padded_tokens_per_step: float | None = None
    samples_per_step: float | None = None
    model_flops_per_step: float | None = None
    peak_flops: float | None = None  # of the real device, for MFU
    phases: dict[str, float] = field(default_factory=dict)  # median seconds per step
    memory_gib: dict[str, float] = field(default_factory=dict)  # peak, peak_reserved, model_load, context, cap, ...
    seconds: dict[str, float] = field(default_factory=dict)  # runtime, wall, spawn, setup, compile
    final_loss: float | None = None
    drift: float | None = None  # median of the last third of steady steps over the first third's
    gpu_busy: float | None = None  # share of the steady steps during which the GPU ran a kernel (NVML)
    allreduce_s: float | None = None  # median per steady step of DDP's gradient all-reduce (several ranks only)
    stalled_steps: int = 0  # steady steps left out as stalls (`jobs.stall`)
    stalled_max_s: float | None = None  # the longest of them

    @property
    def median(self) -> float | None:
        return self.step_time.median if self.step_time else None

    @property
    def peak_gib(self) -> float | None:
        return self.memory_gib.get("peak")

    @property
    def wall_s(self) -> float:
        """The job's device time: from its fork to its end (0 for a job that never started)."""
        return self.seconds.get("wall", 0.0)

    def per_second(self, per_step: float | None, step_s: float | None = None) -> float | None:
        """A per-step amount over the median step time (or `step_s`, e.g. a pooled median)."""
        step_s = step_s if step_s is not None else self.median
        return per_step / step_s if per_step is not None and step_s else None

    def mfu(self, step_s: float | None = None) -> float | None:
        """Model FLOP/s over the device's peak (None on CPU, which has no peak figure)."""
        flops_per_s = self.per_second(self.model_flops_per_step, step_s)
        return flops_per_s / self.peak_flops if flops_per_s and self.peak_flops else None

    def metrics(self) -> dict[str, float]:
        """MLflow metric names and values (absent figures left out)."""
        out: dict[str, float | None] = {"steps_done": self.steps_done}
        if self.step_time:
            s = self.step_time
            out.update(
                steady_steps=s.n,
                step_time_median_s=s.median,
                step_time_mean_s=s.mean,
                step_time_trimmed_s=s.trimmed,
                step_time_p10_s=s.p10,
                step_time_p90_s=s.p90,
                step_time_cv_pct=100 * s.cv,
                step_time_ci_low_s=s.ci.low,
                step_time_ci_high_s=s.ci.high,
                step_time_ci_level=s.ci.level,
                tokens_per_step=self.tokens_per_step,
                padded_tokens_per_step=self.padded_tokens_per_step,
                samples_per_step=self.samples_per_step,
                model_flops_per_step=self.model_flops_per_step,
                peak_flops=self.peak_flops,
                tokens_per_s=self.per_second(self.tokens_per_step),
                padded_tokens_per_s=self.per_second(self.padded_tokens_per_step),
                samples_per_s=self.per_second(self.samples_per_step),
                mfu=self.mfu(),
            )
        out.update({f"{phase}_median_s": value for phase, value in self.phases.items()})
        out.update({f"{key}_gib": value for key, value in self.memory_gib.items()})
        out.update({f"{key}_s": value for key, value in self.seconds.items()})
        drift = None if self.drift is None else 100 * (self.drift - 1)  # as the console says it: `drift +15%`
        out.update(final_loss=self.final_loss, step_time_drift_pct=drift, gpu_busy=self.gpu_busy)
        out.update(allreduce_median_s=self.allreduce_s)
        if self.stalled_steps:
            out.update(stalled_steps=self.stalled_steps, stalled_max_s=self.stalled_max_s)
        return {k: float(v) for k, v in out.items() if v is not None}

    @classmethod
    def from_metrics(cls, status: Status, fit_: Fit, metrics: dict[str, float]) -> JobSummary:
        """The inverse of `metrics`, for runs read back from MLflow."""
        step_time = None
        if "step_time_median_s" in metrics:
            step_time = Summary(
                n=int(metrics["steady_steps"]),
                median=metrics["step_time_median_s"],
                mean=metrics["step_time_mean_s"],
                trimmed=metrics.get("step_time_trimmed_s", metrics["step_time_mean_s"]),
                p10=metrics["step_time_p10_s"],
                p90=metrics["step_time_p90_s"],
                cv=metrics["step_time_cv_pct"] / 100 if "step_time_cv_pct" in metrics else metrics["step_time_cv"],
                ci=Interval(
                    metrics["step_time_ci_low_s"], metrics["step_time_ci_high_s"], metrics["step_time_ci_level"]
                ),
            )
        memory = {k[: -len("_gib")]: v for k, v in metrics.items() if k.endswith("_gib")}
        seconds = {k: metrics[f"{k}_s"] for k in SECONDS if f"{k}_s" in metrics}
        return cls(
            status=status,
            fit=fit_,
            steps_done=int(metrics.get("steps_done", 0)),
            step_time=step_time,
            tokens_per_step=metrics.get("tokens_per_step"),
            padded_tokens_per_step=metrics.get("padded_tokens_per_step"),
            samples_per_step=metrics.get("samples_per_step"),
            model_flops_per_step=metrics.get("model_flops_per_step"),
            peak_flops=metrics.get("peak_flops"),
            phases={p: metrics[f"{p}_median_s"] for p in PHASES if f"{p}_median_s" in metrics},
            memory_gib=memory,
            seconds=seconds,
            final_loss=metrics.get("final_loss"),
            drift=_drift(metrics),
            gpu_busy=metrics.get("gpu_busy"),
            allreduce_s=metrics.get("allreduce_median_s"),
            stalled_steps=int(metrics.get("stalled_steps", 0)),
            stalled_max_s=metrics.get("stalled_max_s"),
        )


def _drift(metrics: dict[str, float]) -> float | None:
    """The drift ratio from its percent (`step_time_drift_pct`), or from the ratio stores before it kept."""
    if "step_time_drift_pct" in metrics:
        return 1 + metrics["step_time_drift_pct"] / 100
    return metrics.get("step_time_drift")


@dataclass(frozen=True)
class RecordedJob:
    """A job as MLflow holds it: what the reports and the sweep's table are made of."""

    run_id: str
    name: str  # display name, without the repeat
    config_id: str
    repeat: int
    kind: RunKind
    summary: JobSummary
    losses: tuple[float, ...] = ()
    predicted_gib: float | None = None  # a study's prediction of its peak
    note: str = ""  # why it stopped or failed, in a few words
    round: int | None = None  # its paired round (a sweep's repeat, a confirmation round); None: measured alone

    @property
    def status(self) -> Status:
        return self.summary.status
