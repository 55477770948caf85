"""The study's answer: a table of every trial, the confirmation round's comparisons, and the best eligible config as
a command line that rebuilds it, as the SFTConfig arguments its job trained with, and as a speed-up over the
baseline paired across neighbouring processes; over world sizes, the devices it uses and its paired speed-up against
the best on one (`answer.scaling`); or, when nothing fits, the smallest need. Computed first from what
the study holds (`Decided`), then printed and logged once."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from optuna.trial import TrialState

from pipeline import exits
from pipeline.answer import slow, speedup
from pipeline.answer.code import BOOKKEEPING, Exported, export_answer
from pipeline.answer.gains import Gains, knob_gains
from pipeline.answer.scaling import Scaling, world_lines
from pipeline.answer.slack import AnswerSlack, slack_line
from pipeline.answer.speedup import Claim, Speedup
from pipeline.answer.table import (
    compact_names,
    compact_trials,
    confirmation_lines,
    format_trials,
    shortened,
)
from pipeline.config.identity import parse_override
from pipeline.records import GIB, Status
from pipeline.render.text import WIDTH
from pipeline.search import Coverage, Decided, LeftOut, TrialRecord, left_out_lines


@dataclass(frozen=True)
class StudyFacts:
    """What the study knows beside its trials, for its answer: who it is, how it was run, what it left out."""

    name: str
    command: list[str]
    cap_bytes: int
    confidence: float
    baseline: bool = True  # optimize.baseline
    confirm_off: bool = False  # optimize.confirm=never
    stopped: bool = False  # interrupted: where nothing fits yet, that is no verdict
    coverage: Coverage | None = None
    left_out: tuple[LeftOut, ...] = ()
    run: str = ""  # the run the answer must fit, in words (`search._longest`)
    busy_threshold: float = 0.5  # measure.busy_threshold: a GPU busy less is said idle (`answer.slow`)
    slack: AnswerSlack | None = None  # what a process of the answer may keep unused over its peak (`answer.slack`)


@dataclass(frozen=True)
class StudyAnswer:
    study: str
    text: str  # in full: what answer.md holds, and the console with wide=true
    exit_code: int
    compact: str = ""  # what the console shows by default: the same in 120 columns
    best: TrialRecord | None = None
    command: str | None = None  # `python -m pipeline.train ...` that rebuilds the best config
    sft_kwargs: dict = field(default_factory=dict)
    gpu_seconds: float = 0.0
    predictor_errors: tuple[float, ...] = ()
    decided: int = 0
    speedup: Speedup | None = None
    claim: Claim | None = None  # the speed-up line, or why none
    baseline: TrialRecord | None = None  # the baseline, where it was measured
    scaling: Scaling | None = None  # on several devices: against the best on one, paired
    script: Exported | None = None  # the best config as a plain TRL script
    gains: Gains = field(default_factory=Gains)  # what each knob the answer moved from the baseline bought


def answer_overrides(command: list[str], best: TrialRecord) -> list[str]:
    """The overrides that rebuild the best trial's config: the study's own (its search settings aside), then the
    trial's values."""
    kept = [o for o in command if not parse_override(o)[0].startswith("optimize")]
    return [*(o for o in kept if parse_override(o)[0] not in BOOKKEEPING), *best.overrides]


def reproduce(command: list[str], best: TrialRecord) -> str:
    """The command line that rebuilds the best trial's config."""
    return "python -m pipeline.train " + shlex.join(answer_overrides(command, best))


def sft_call(kwargs: dict, width: int = WIDTH - 2) -> str:
    """The answer's SFTConfig as a call, wrapped at its arguments to the console's width (each later line indented
    under the first argument), so that no line of the answer wraps in a terminal."""
    arguments = [f"{k}={v!r}" for k, v in kwargs.items()]
    lines, line = [], "SFTConfig("
    for number, argument in enumerate(arguments):
        piece = argument + (")" if number == len(arguments) - 1 else ",")
        if len(line) + 1 + len(piece) > width and line.strip() not in ("", "SFTConfig("):
            lines.append(line)
            line = " " * 10 + piece
        else:
            line += ("" if line.endswith("(") else " ") + piece
    lines.append(line if arguments else "SFTConfig()")
    return "\n  ".join(lines)


def claim_of(decided: Decided, best: TrialRecord, setting: StudyFacts) -> Claim:
    return speedup.claim(
        best,
        decided.baseline,
        decided.baseline_tried,
        decided.confirmation,
        enabled=setting.baseline,
        confirm_off=setting.confirm_off,
        fits={r.label for r in decided.eligible},
        cap_gib=setting.cap_bytes / GIB,
    )


def fit_line(best: TrialRecord, setting: StudyFacts) -> str:
    """What the answer's fit was judged on: `fits: peak 18.98 GiB of 20.00 GiB on the run's longest micro-batch
    (8,112 tokens; step 500 of one pass over 2,000 records)`."""
    head = f"fits: peak {best.peak_gib:.2f} GiB of {setting.cap_bytes / GIB:.2f} GiB"
    longest, run = best.longest, setting.run or "the run"
    if not longest:
        return head
    if not longest.first:
        return f"{head}; every micro-batch of {run} alike ({longest.tokens:,} tokens)"
    return f"{head} on the run's longest micro-batch ({longest.tokens:,} tokens; step {longest.step:,} of {run})"


def _best_lines(
    decided: Decided, best: TrialRecord, setting: StudyFacts, claim: Claim, script: str, compact: bool
) -> list[str]:
    """The answer: its config (compact, where its label is long: what differs from the baseline), fit, command,
    script, SFTConfig and claim."""
    figures = (
        f"({best.median:.4f} s/step in the search, peak {best.peak_gib:.2f} GiB of {setting.cap_bytes / GIB:.2f} GiB)"
    )
    said = f"best feasible: {best.label}  {figures}"
    if compact and len(said) > WIDTH and decided.baseline is not None and best.label != decided.baseline.label:
        said = (
            f"best feasible: the baseline with {compact_names(decided.records).get(best.label, best.label)}  {figures}"
        )
    return [
        said,
        f"  {fit_line(best, setting)}",
        *(f"  {line}" for line in [slack_line(best, setting.cap_bytes, setting.slack)] if line),
        f"  {reproduce(setting.command, best)}",
        f"  script: {script}",
        f"  {sft_call(best.sft_kwargs)}",
        *(f"  {line.strip()}" for line in claim.lines(named=not compact)),
    ]


def _space_lines(setting: StudyFacts) -> list[str]:
    lines = [setting.coverage.line(setting.stopped)] if setting.coverage else []
    return lines + left_out_lines(list(setting.left_out))


_STOPPED_EARLY = "no config fits yet: the study stopped before it decided one (the same command goes on)"


def _nothing_fits(decided: Decided, cap_gib: float) -> tuple[list[str], int]:
    records = decided.records
    failed = [r for r in records if r.status is Status.FAILED]
    ran = [r for r in records if r.status is not Status.FAILED]  # a failed job's peak is no need
    needs = [r.predicted_gib for r in ran if r.predicted_gib is not None]
    needs += [r.peak_gib for r in ran if r.peak_gib]
    said = f": {failed[0].note[:200]}" if failed and failed[0].note else ""
    if failed and not needs:
        return [f"nothing finished: {len(failed)} trial(s) failed{said}"], exits.FAILED
    message = f"nothing fits under {cap_gib:.2f} GiB"
    if needs:
        message += f": the smallest need is {min(needs):.2f} GiB; raise mem_cap or widen optimize.space"
    code = exits.NOTHING_FITS if any(r.decided for r in records) and not failed else exits.FAILED
    if failed:
        message += f"; {len(failed)} trial(s) failed{said}"
    return [message], code


def _failure_line(decided: Decided) -> list[str]:
    failed = [r for r in decided.records if r.decided and r.status is Status.FAILED]
    if not failed:
        return []
    return [
        "failed as jobs (each decided once, not run again): " + "; ".join(f"{r.label}: {r.note[:120]}" for r in failed)
    ]


def _head(
    decided: Decided, setting: StudyFacts, claim: Claim | None, script: str, gains: Gains, compact: bool
) -> list[str]:
    """The trials' table, the round's lines and the answer's, what each knob bought and where its step goes: in
    full, or in 120 columns (`compact`)."""
    shown = [r for r in decided.records if r.state != TrialState.FAIL or r.status is not None]
    table = compact_trials if compact else format_trials
    lines = ["", table(shown, setting.confidence, decided.baseline, setting.busy_threshold), ""]
    best, round_ = decided.best, decided.confirmation
    if round_ is not None and best is not None:
        names = shortened(shown) if compact else {}
        names = {**names, round_.baseline: "the baseline"} if names and round_.baseline else names
        lines += [*confirmation_lines(round_, best.label, decided.gpu_seconds, names), ""]
    if best is not None and claim is not None:
        lines += _best_lines(decided, best, setting, claim, script, compact)
        lines += gains.lines()
        named = not (compact and shortened(shown))
        lines += slow.lines(best, decided.baseline, decided.records, setting.busy_threshold, named)
    return lines


def decide(decided: Decided, setting: StudyFacts) -> StudyAnswer:
    """Everything the study has decided, by any worker, turned into its answer."""
    errors = tuple(abs(r.predictor_error) for r in decided.records if r.predictor_error is not None)
    lines: list[str] = []
    best, cap_gib, seconds = decided.best, setting.cap_bytes / GIB, decided.gpu_seconds
    scaling, claim, script, gains, shown = None, None, None, Gains(), ""
    if best is not None:
        claim = claim_of(decided, best, setting)
        script, shown = export_answer(answer_overrides(setting.command, best), best.sft_kwargs)
        unrun = None if decided.confirmation else "no confirmation round has run"
        gains = knob_gains(decided.records, best, decided.baseline, claim.speedup, unrun)
        device = decided.calibration.device if decided.calibration else None
        more, scaling = world_lines(best, decided.eligible, decided.confirmation, device, decided.records)
        lines += more
        code = exits.OK
    else:
        more, code = ([_STOPPED_EARLY], exits.OK) if setting.stopped else _nothing_fits(decided, cap_gib)
        lines += more
    lines += _space_lines(setting) + _failure_line(decided)
    if errors:
        mean = 100 * sum(errors) / len(errors)
        lines.append(
            f"memory predictor error: mean {mean:.1f}%, max {100 * max(errors):.1f}% of measured peak over "
            f"{len(errors)} trials"
        )
    lines.append(f"device time used by jobs (probes and confirmation included): {seconds:.0f} s")
    return StudyAnswer(
        study=setting.name,
        text="\n".join([*_head(decided, setting, claim, shown, gains, False), *lines]),
        compact="\n".join([*_head(decided, setting, claim, shown, gains, True), *lines]),
        exit_code=code,
        best=best,
        command=reproduce(setting.command, best) if best else None,
        sft_kwargs=best.sft_kwargs if best else {},
        gpu_seconds=seconds,
        predictor_errors=errors,
        decided=sum(1 for r in decided.records if r.decided),
        speedup=claim.speedup if claim else None,
        claim=claim,
        baseline=decided.baseline,
        scaling=scaling,
        script=script,
        gains=gains,
    )
