"""The study's answer: a table of every trial, and the best feasible config as a command line that rebuilds it and
as the SFTConfig arguments its job trained with; or, when nothing fits, the smallest need. Computed first, then
printed and logged once."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from optuna.trial import TrialState

from pipeline import exits
from pipeline.config.identity import parse_override
from pipeline.measure.stats import Rank
from pipeline.records import GIB, RunKind, Status
from pipeline.reporting.table import comparison_rows, format_table, interval_text, markdown_table, num
from pipeline.search import trials
from pipeline.search.trials import TrialRecord
from pipeline.tracking import runs
from pipeline.tracking.store import Tracker

if TYPE_CHECKING:
    from pipeline.search.study import StudyDriver


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

    @property
    def step_time_median_s(self) -> float | None:
        return self.best.median if self.best else None


def format_trials(records: list[TrialRecord], confidence: float) -> str:
    header = [
        "#",
        "config",
        "status",
        f"step s (median [{100 * confidence:g}% CI])",
        "peak GiB",
        "predicted GiB",
        "fits",
        "note",
    ]
    lines: list[list[object]] = [header]
    for r in sorted(records, key=lambda r: (r.median is None, r.median or 0.0)):
        if r.median is None or r.ci is None:
            step = "-"
        elif r.status is Status.OK:
            step = interval_text(r.median, r.ci, confidence)
        else:
            step = f"{r.median:.4f} (first steps)"  # a pruned trial's few steps: no interval to speak of
        fits = {True: "yes", False: "no", None: "-"}[r.feasible]
        if r.status is Status.SKIPPED:
            fits = "no (predicted)"
        lines.append(
            [
                r.number,
                r.label,
                r.status or r.state.name.lower(),
                step,
                num(r.peak_gib, ".3f"),
                num(r.predicted_gib, ".3f"),
                fits,
                r.note[:60],
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


def decide(driver: StudyDriver) -> Answer:
    """Everything the study has decided, by any worker, turned into its answer."""
    study, confidence = driver.study, driver.cfg.measure.confidence
    records = [r for r in trials.records(driver.study) if r.label is not None and r.state != TrialState.RUNNING]
    shown = [r for r in records if r.state != TrialState.FAIL or r.status is not None]
    errors = tuple(abs(r.predictor_error) for r in records if r.predictor_error is not None)
    calibration = study.user_attrs.get("calibration") or {}
    gpu_seconds = sum(r.gpu_seconds for r in records) + calibration.get("gpu_seconds", 0.0)
    parent = driver.tracker.search(
        f"tags.{runs.KIND} = 'study' and tags.{runs.STUDY} = {runs.quoted(driver.name)}", limit=1
    )
    measured = [j for j in runs.read_jobs(driver.tracker, parent[0].info.run_id, (RunKind.TRIAL,))] if parent else []
    ranked = comparison_rows([j for j in measured if j.status is Status.OK and j.summary.median], confidence)
    lines = ["", format_trials(shown, confidence), ""]
    if ranked:
        lines += [
            "measured trials (rank among those that fit; loss deviation from the first trial):",
            format_table(ranked, confidence),
            "",
        ]
    best = trials.best(study)
    cap_gib = driver.cap / GIB
    command = None
    if best is not None:
        ties = [r.name for r in ranked if r.rank is Rank.TIE and r.name != best.label]
        command = reproduce(driver.command, best)
        lines += [
            f"best feasible: {best.label}  ({best.median:.4f} s/step, peak {best.peak_gib:.2f} GiB of "
            f"{cap_gib:.2f} GiB)",
            *([f"  tied with (overlapping intervals): {', '.join(ties)}"] if ties else []),
            f"  {command}",
            f"  {sft_call(best.sft_kwargs)}",
        ]
        code = exits.OK
    else:
        needs = [r.predicted_gib for r in records if r.predicted_gib is not None]
        needs += [r.peak_gib for r in records if r.peak_gib]
        message = f"nothing fits under {cap_gib:.2f} GiB"
        if needs:
            message += f": the smallest need is {min(needs):.2f} GiB; raise mem_cap or widen optimize.space"
        failed = [r for r in records if r.status is Status.FAILED]
        decided_any = any(r.decided for r in records)
        code = exits.NOTHING_FITS if decided_any and not failed else exits.FAILED
        if failed:
            message += f"; {len(failed)} trial(s) failed: {failed[0].note[:200]}"
        lines.append(message)
    if errors:
        lines.append(
            f"memory predictor error: mean {100 * sum(errors) / len(errors):.1f}%, max {100 * max(errors):.1f}% of "
            f"measured peak over {len(errors)} trials"
        )
    lines.append(f"device time used by jobs (probes included): {gpu_seconds:.0f} s")
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
    )


def log_answer(tracker: Tracker, parent: str, answer: Answer, status: str) -> None:
    """The answer on the study's MLflow run: answer.md, summary metrics, the reproduce command as a tag."""
    tracker.artifact_text(parent, "answer.md", answer.text + "\n")
    metrics = {"trials_decided": answer.decided, "gpu_seconds": answer.gpu_seconds}
    if answer.best is not None:
        metrics.update(best_step_time_median_s=answer.best.median, best_peak_gib=answer.best.peak_gib)
        tracker.tags(parent, {"answer": answer.command, "best_config_id": answer.best.config_id})
    if answer.predictor_errors:
        errors = answer.predictor_errors
        metrics.update(predictor_error_max=max(errors), predictor_error_mean=sum(errors) / len(errors))
    tracker.metrics(parent, metrics)
    tracker.tags(parent, {runs.STATUS: "done" if status == "FINISHED" else "interrupted"})
    tracker.end(parent, status)
