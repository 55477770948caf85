"""The answer's speed-up over the baseline, from the confirmation round's pairs, or the one reason there is none.

Never silent, and never a figure that says nothing: a speed-up is given as a figure only when its interval excludes
1 (`Comparison.claimed`); otherwise one line says why not (how many rounds, and the tie they certify or leave open),
never `1.01x [0.89, 1.15]`. A baseline that does not fit under the cap was measured without it, for its speed: the
claim says so, since nobody can run it on that device as it is, and adds the answer against the configs that fit.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from pipeline.compare.paired import Comparison, bound, compare, equal_text
from pipeline.records import Status
from pipeline.search import ConfirmationRecord, TrialRecord


@dataclass(frozen=True)
class Speedup:
    """The answer's tokens/s over the baseline's: their paired comparison in the confirmation round (the same
    tokens per step, so the step-time ratio)."""

    comparison: Comparison
    baseline: TrialRecord

    def text(self, named: bool = True) -> str:
        """The figure with its interval and the baseline (by its label where `named`: the compact lines name it
        once, in the trials' table)."""
        c = self.comparison
        where = " (outside the space)" if self.baseline.outside else ""
        label = f" {self.baseline.label}" if named else ""
        return (
            f"{c.speedup:.2f}x the baseline's tokens/s [{bound(c.low)}, {bound(c.high)}] ({100 * c.confidence:g}%, paired "
            f"over {c.rounds} rounds with the baseline; baseline{label}{where}: "
            f"{self.baseline.median:.4f} s/step in the search)"
        )


@dataclass(frozen=True)
class Claim:
    """What the answer says of its speed-up: the figure, or why there is none; and, where the baseline does not fit
    under the cap, that it does not, and the answer against the configs that do."""

    speedup: Speedup | None = None
    why: str | None = None
    over_cap: str | None = None  # the baseline does not fit: `the baseline (...) does not fit under the cap (...)`
    fitting: str | None = None  # then: the answer against the nearest config that fits, paired

    def line(self, named: bool = True) -> str:
        said = self.speedup.text(named) if self.speedup else f"no speed-up over the baseline is claimed: {self.why}"
        if self.over_cap:
            said += f"; {self.over_cap}"
        return said

    def lines(self, named: bool = True) -> list[str]:
        """The claim, and where the baseline does not fit, the answer against what does."""
        return [self.line(named), *([self.fitting] if self.fitting else [])]


def _baseline_problem(tried: list[TrialRecord]) -> str:
    """Why the baseline's trials gave no measurement."""
    last = tried[-1]
    if last.status is Status.OOM:
        return f"the baseline ({last.label}) ran out of memory on this device, even without the cap"
    if last.status is Status.FAILED:
        return f"the baseline ({last.label}) failed: {last.note[:160]}"
    return f"the baseline ({last.label}) did not finish ({last.status or last.state.name.lower()})"


def untold(comparison: Comparison) -> str:
    """Why a comparison whose interval holds 1 gives no figure: `3 paired rounds could not tell them apart (within
    ±15% either way)`, or `... found them equal within ±4%`."""
    said = equal_text(comparison.margin, comparison.tolerance)
    if comparison.equal:
        return f"{comparison.rounds} paired rounds found them {said}"
    return f"{comparison.rounds} paired rounds could not tell them apart ({said.removeprefix('not told apart (')}"


def over_cap_lines(
    best: TrialRecord, baseline: TrialRecord, record: ConfirmationRecord | None, fits: Collection[str], cap_gib: float
) -> tuple[str, str]:
    """A baseline over the cap: that it does not fit, and the answer against the nearest config that does (the one
    the answer beats least in the round's pairs: what a user of that device could run instead)."""
    peak = f"{baseline.peak_gib:.2f} GiB" if baseline.peak_gib else "its peak"
    said = (
        f"the baseline ({baseline.label}) does not fit under the cap ({peak} of {cap_gib:.2f} GiB): it was measured "
        "without the cap and cannot run as it is on this device"
    )
    times = record.state.times if record else {}
    others = [f for f in times if f in fits and f != best.label]
    paired = [compare(best.label, f, times, record.state.confidence, record.state.tolerance) for f in others]
    paired = [c for c in paired if c.judgement is not None]
    if not paired:
        return said, "  against what fits: no other config that fits was paired with the answer"
    nearest = min(paired, key=lambda c: c.speedup)
    if nearest.claimed:
        return said, (
            f"  against what fits: {nearest.speedup:.2f}x the tokens/s of {nearest.reference} [{bound(nearest.low)}, "
            f"{bound(nearest.high)}] ({100 * nearest.confidence:g}%, paired over {nearest.rounds} rounds), the nearest "
            "config that fits"
        )
    return said, f"  against what fits: no speed-up over {nearest.reference} is claimed: {untold(nearest)}"


def claim(
    best: TrialRecord,
    baseline: TrialRecord | None,
    tried: list[TrialRecord],
    record: ConfirmationRecord | None,
    *,
    enabled: bool,
    confirm_off: bool,
    fits: Collection[str] = (),
    cap_gib: float | None = None,
) -> Claim:
    """The speed-up of `best` over `baseline` from the round's pairs, or why none: the baseline is off, failed, or
    is the answer; the round is off, stopped before it, or left them untold apart. `tried`: every ended trial of
    the baseline; `fits`: the labels of the configs eligible as the answer (under the cap); `cap_gib`: the cap."""
    if not enabled:
        return Claim(why="optimize.baseline=false: no baseline was measured")
    if baseline is None:
        return Claim(why=_baseline_problem(tried) if tried else "the study stopped before its baseline was measured")
    if baseline.label == best.label:
        return Claim(why="the baseline itself (the command line's config) is the fastest that fits")
    over, fitting = (None, None)
    if baseline.feasible is False and cap_gib is not None:
        over, fitting = over_cap_lines(best, baseline, record, fits, cap_gib)
    found = _paired(best, baseline, record, confirm_off)
    if isinstance(found, str):
        return Claim(why=found, over_cap=over, fitting=fitting)
    return Claim(speedup=Speedup(found, baseline), over_cap=over, fitting=fitting)


def _paired(
    best: TrialRecord, baseline: TrialRecord, record: ConfirmationRecord | None, confirm_off: bool
) -> Comparison | str:
    """The answer against the baseline in the round's pairs, where its interval excludes 1; else why not."""
    if record is None:
        if confirm_off:
            return "the confirmation round is off (optimize.confirm=never)"
        return "the study stopped before its confirmation round (the same command runs it)"
    stopped = "" if record.finished else " (the study stopped during its round; the same command goes on with it)"
    times = record.state.times
    missing = [r.label for r in (best, baseline) if r.label not in times]
    if missing:
        return f"the confirmation round measured no run of {' and '.join(missing)}{stopped}"
    comparison = compare(best.label, baseline.label, times, record.state.confidence, record.state.tolerance)
    if comparison.judgement is None:
        return f"the confirmation round paired them in {comparison.rounds} round only{stopped}"
    if not comparison.claimed:
        return f"{untold(comparison)}{stopped}"
    return comparison
