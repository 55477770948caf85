"""The answer's speed-up over the baseline, from the confirmation round's pairs, or the one reason there is none.

Never silent, and never a figure that says nothing: a comparison of fewer than two rounds, or one whose interval
leaves a factor of two or more open either way, is said in words (how many rounds, and what they left open), not
printed as `0.20x [0.00, 14974842.41]`.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.compare.paired import WIDE, Comparison, Judgement, compare, margin_text
from pipeline.records import Status
from pipeline.search.confirmation import ConfirmationRecord
from pipeline.search.trials import TrialRecord


@dataclass(frozen=True)
class Speedup:
    """The answer's tokens/s over the baseline's: their paired comparison in the confirmation round (the same
    tokens per step, so the step-time ratio)."""

    comparison: Comparison
    baseline: TrialRecord

    def text(self) -> str:
        c = self.comparison
        where = " (outside the space)" if self.baseline.outside else ""
        return (
            f"{c.speedup:.2f}x the baseline's tokens/s [{c.low:.2f}, {c.high:.2f}] ({100 * c.confidence:g}%, paired "
            f"over {c.rounds} rounds with the baseline; baseline {self.baseline.label}{where}: "
            f"{self.baseline.median:.4f} s/step in the search)"
        )


@dataclass(frozen=True)
class Claim:
    """What the answer says of its speed-up: the figure, or why there is none."""

    speedup: Speedup | None = None
    why: str | None = None

    def line(self) -> str:
        return self.speedup.text() if self.speedup else f"no speed-up over the baseline is claimed: {self.why}"


def _baseline_problem(tried: list[TrialRecord]) -> str:
    """Why the baseline's trials gave no measurement."""
    last = tried[-1]
    if last.status is Status.OOM:
        return f"the baseline ({last.label}) ran out of memory on this device, even without the cap"
    if last.status is Status.FAILED:
        return f"the baseline ({last.label}) failed: {last.note[:160]}"
    return f"the baseline ({last.label}) did not finish ({last.status or last.state.name.lower()})"


def claim(
    best: TrialRecord,
    baseline: TrialRecord | None,
    tried: list[TrialRecord],
    record: ConfirmationRecord | None,
    *,
    enabled: bool,
    confirm_off: bool,
) -> Claim:
    """The speed-up of `best` over `baseline` from the round's pairs, or why none: the baseline is off, failed, or
    is the answer; the round is off, stopped before it, or left them untold apart. `tried`: every ended trial of
    the baseline."""
    if not enabled:
        return Claim(why="optimize.baseline=false: no baseline was measured")
    if baseline is None:
        return Claim(why=_baseline_problem(tried) if tried else "the study stopped before its baseline was measured")
    if baseline.label == best.label:
        return Claim(why="the baseline itself (the command line's config) is the fastest that fits")
    if record is None:
        if confirm_off:
            return Claim(why="the confirmation round is off (optimize.confirm=never)")
        return Claim(why="the study stopped before its confirmation round (the same command runs it)")
    stopped = "" if record.finished else " (the study stopped during its round; the same command runs it again)"
    times = record.state.times
    missing = [r.label for r in (best, baseline) if r.label not in times]
    if missing:
        return Claim(why=f"the confirmation round measured no run of {' and '.join(missing)}{stopped}")
    comparison = compare(best.label, baseline.label, times, record.state.confidence)
    if comparison.judgement is None:
        return Claim(why=f"the confirmation round paired them in {comparison.rounds} round only{stopped}")
    if comparison.judgement is Judgement.EQUAL and comparison.margin >= WIDE:
        return Claim(
            why=f"{comparison.rounds} paired rounds could not tell them apart ({margin_text(comparison.margin)} "
            f"either way){stopped}"
        )
    return Claim(speedup=Speedup(comparison, baseline))
