"""The study's answer: a table of every trial, and the best eligible config as a command line that rebuilds it, as
the SFTConfig arguments its job trained with, and as a measured ratio against the baseline; or, when nothing fits,
the smallest need. Computed first, then printed and logged once."""

from __future__ import annotations

import random
import shlex
import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from optuna.trial import TrialState

from pipeline import exits
from pipeline.config.identity import parse_override
from pipeline.records import GIB, RunKind, Status
from pipeline.reporting.table import (
    Criteria,
    comparison_rows,
    format_table,
    interval_text,
    markdown_table,
    num,
    step_header,
)
from pipeline.search import trials
from pipeline.search.confirm import Comparison
from pipeline.search.trials import TrialRecord
from pipeline.tracking import runs
from pipeline.tracking.store import Tracker

if TYPE_CHECKING:
    from pipeline.search.study import StudyDriver

BOOTSTRAP = 2000


@dataclass(frozen=True)
class Speedup:
    """The answer's tokens/s over the baseline's, with an interval and where it comes from: the paired rounds of
    the confirmation round when both were finalists (drift between processes cancels), else a bootstrap over the
    steady steps of one job each (step-to-step noise only)."""

    ratio: float
    low: float
    high: float
    baseline: TrialRecord
    source: str

    def text(self, confidence: float) -> str:
        return (
            f"{self.ratio:.2f}x the baseline's tokens/s [{self.low:.2f}, {self.high:.2f}] ({100 * confidence:g}%, "
            f"{self.source}; baseline {self.baseline.label}: {self.baseline.median:.4f} s/step)"
        )


def speedup(best: TrialRecord, baseline: TrialRecord, confidence: float, seed: int = 0) -> Speedup:
    rng = random.Random(seed)
    ratios = sorted(
        statistics.median(rng.choices(baseline.step_times, k=len(baseline.step_times)))
        / statistics.median(rng.choices(best.step_times, k=len(best.step_times)))
        for _ in range(BOOTSTRAP)
    )
    tail = int((1 - confidence) / 2 * BOOTSTRAP)
    return Speedup(baseline.median / best.median, ratios[tail], ratios[-tail - 1], baseline, "one job each")


def confirmed_speedup(best: TrialRecord, baseline: TrialRecord, confirmation: dict | None) -> Speedup | None:
    """The best's speedup over the baseline from the confirmation round's paired comparison of the two, if it has
    one (a comparison is always of a challenger with the round's first finalist, in either role here)."""
    for c in map(Comparison.of, (confirmation or {}).get("comparisons", [])):
        source = f"paired over {len(c.ratios)} confirmation rounds"
        if (c.challenger, c.best) == (best.label, baseline.label):
            return Speedup(c.speedup, c.low, c.high, baseline, source)
        if (c.challenger, c.best) == (baseline.label, best.label):
            return Speedup(1 / c.speedup, 1 / c.high, 1 / c.low, baseline, source)
    return None


@dataclass(frozen=True)
class Answer:
    study: str
    text: str  # what the console shows, and answer.md holds
    exit_code: int
    best: TrialRecord | None = None
    command: str | None = None  # `python -m pipeline.train ...` that rebuilds the best config
    sft_kwargs: dict = field(default_factory=dict)
    gpu_seconds: float = 0.0
    predictor_errors: tuple[float, ...] = ()
    decided: int = 0
    speedup: Speedup | None = None

    @property
    def step_time_median_s(self) -> float | None:
        return self.best.median if self.best else None


def format_trials(records: list[TrialRecord], confidence: float, baseline: TrialRecord | None) -> str:
    header = [
        "#",
        "config",
        "status",
        step_header(confidence),
        "peak GiB",
        "predicted GiB",
        "fits",
        "loss dev",
        "note",
    ]
    lines: list[list[object]] = [header]
    # measured in full first, by step time; then pruned, over the cap, skipped, failed
    for r in sorted(records, key=lambda r: (r.status is not Status.OK, r.median is None, r.median or 0.0)):
        if r.median is None or r.ci is None:
            step = "-"
        elif r.status is Status.OK:
            step = interval_text(r.median, r.ci, confidence)
        else:
            step = f"{r.median:.4f} (first steps)"  # a pruned trial's few steps: no interval to speak of
        fits = {True: "yes", False: "no", None: "-"}[r.feasible]
        if r.status is Status.SKIPPED:
            fits = "no (predicted)"
        note = "; ".join(n for n in ("baseline" if r.role == "baseline" else "", r.note[:60]) if n)
        deviation = trials.loss_deviation(r, baseline)
        lines.append(
            [
                r.number,
                r.label,
                r.status or r.state.name.lower(),
                step,
                num(r.peak_gib, ".3f"),
                num(r.predicted_gib, ".3f"),
                fits,
                num(deviation, ".1e"),
                note,
            ]
        )
    return markdown_table(lines)


def reproduce(command: list[str], best: TrialRecord) -> str:
    """The command line that rebuilds the best trial's config: the study's own overrides (its search settings
    aside), then the trial's values."""
    kept = [o for o in command if not parse_override(o)[0].startswith("optimize")]
    return "python -m pipeline.train " + shlex.join([*kept, *best.overrides])


def sft_call(kwargs: dict) -> str:
    return "SFTConfig(" + ", ".join(f"{k}={v!r}" for k, v in kwargs.items()) + ")"


def confirmation_lines(confirmation: dict, tolerance: float) -> list[str]:
    lines = [
        f"confirmation round ({len(confirmation['medians'][confirmation['finalists'][0]])} rounds, "
        f"{confirmation['seconds']:.0f} s): {', '.join(confirmation['finalists'])}"
    ]
    for c in map(Comparison.of, confirmation["comparisons"]):
        lines.append(f"  {c.sentence(tolerance)} ({len(c.ratios)} paired rounds)")
    return lines


def decide(driver: StudyDriver) -> Answer:
    """Everything the study has decided, by any worker, turned into its answer."""
    study, confidence, o = driver.study, driver.cfg.measure.confidence, driver.o
    records = [r for r in trials.records(study) if r.label is not None and r.state != TrialState.RUNNING]
    shown = [r for r in records if r.state != TrialState.FAIL or r.status is not None]
    errors = tuple(abs(r.predictor_error) for r in records if r.predictor_error is not None)
    confirmation = study.user_attrs.get("confirmation")
    gpu_seconds = sum(r.gpu_seconds for r in records) + (study.user_attrs.get("calibration") or {}).get(
        "gpu_seconds", 0.0
    )
    gpu_seconds += confirmation["seconds"] if confirmation else 0.0
    baseline = trials.baseline(study)
    lines = ["", format_trials(shown, confidence, baseline), ""]
    parent = driver.tracker.search(
        f"tags.{runs.KIND} = 'study' and tags.{runs.STUDY} = {runs.quoted(driver.name)}", limit=1
    )
    measured = runs.read_jobs(driver.tracker, parent[0].info.run_id, (RunKind.TRIAL,)) if parent else []
    criteria = Criteria.of(driver.cfg.measure)
    ranked = comparison_rows([j for j in measured if j.status is Status.OK and j.summary.median], criteria)
    if ranked:
        lines += ["measured trials (rank among those that fit):", format_table(ranked, criteria), ""]
    if confirmation:
        lines += [*confirmation_lines(confirmation, o.tie_tolerance), ""]
    best = trials.best(study, o.max_loss_dev)
    if best is not None and confirmation and confirmation["winner"] != best.label:
        best = next(r for r in records if r.label == confirmation["winner"])
    cap_gib = driver.cap / GIB
    command, gain = None, None
    if best is not None:
        command = reproduce(driver.command, best)
        lines += [
            f"best feasible: {best.label}  ({best.median:.4f} s/step, peak {best.peak_gib:.2f} GiB of "
            f"{cap_gib:.2f} GiB)",
            f"  {command}",
            f"  {sft_call(best.sft_kwargs)}",
        ]
        if baseline is not None and baseline.label == best.label:
            lines.append("  the baseline itself (the command line's config) is the fastest that fits")
        elif baseline is not None:
            gain = confirmed_speedup(best, baseline, confirmation)
            if gain is None and baseline.step_times and best.step_times:
                gain = speedup(best, baseline, confidence)
            if gain is not None:
                lines.append(f"  {gain.text(confidence)}")
        code = exits.OK
    else:
        needs = [r.predicted_gib for r in records if r.predicted_gib is not None]
        needs += [r.peak_gib for r in records if r.peak_gib]
        message = f"nothing fits under {cap_gib:.2f} GiB"
        if needs:
            message += f": the smallest need is {min(needs):.2f} GiB; raise mem_cap or widen optimize.space"
        failed = [r for r in records if r.status is Status.FAILED]
        code = exits.NOTHING_FITS if any(r.decided for r in records) and not failed else exits.FAILED
        if failed:
            message += f"; {len(failed)} trial(s) failed: {failed[0].note[:200]}"
        lines.append(message)
    if errors:
        lines.append(
            f"memory predictor error: mean {100 * sum(errors) / len(errors):.1f}%, max {100 * max(errors):.1f}% of "
            f"measured peak over {len(errors)} trials"
        )
    lines.append(f"device time used by jobs (probes and confirmation included): {gpu_seconds:.0f} s")
    return Answer(
        study=driver.name,
        text="\n".join(lines),
        exit_code=code,
        best=best,
        command=command,
        sft_kwargs=best.sft_kwargs if best else {},
        gpu_seconds=gpu_seconds,
        predictor_errors=errors,
        decided=sum(1 for r in records if r.decided),
        speedup=gain,
    )


def log_answer(tracker: Tracker, parent: str, answer: Answer, status: str) -> None:
    """The answer on the study's MLflow run: answer.md, summary metrics, the reproduce command as a tag."""
    tracker.artifact_text(parent, "answer.md", answer.text + "\n")
    metrics = {"trials_decided": answer.decided, "gpu_seconds": answer.gpu_seconds}
    if answer.best is not None:
        metrics.update(best_step_time_median_s=answer.best.median, best_peak_gib=answer.best.peak_gib)
        tracker.tags(parent, {"answer": answer.command, "best_config_id": answer.best.config_id})
    if answer.speedup is not None:
        s = answer.speedup
        metrics.update(speedup_vs_baseline=s.ratio, speedup_low=s.low, speedup_high=s.high)
    if answer.predictor_errors:
        errors = answer.predictor_errors
        metrics.update(predictor_error_max=max(errors), predictor_error_mean=sum(errors) / len(errors))
    tracker.metrics(parent, metrics)
    tracker.tags(parent, {runs.STATUS: "done" if status == "FINISHED" else "interrupted"})
    tracker.end(parent, status)
