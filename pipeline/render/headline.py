"""The one line that says what a comparison found: the fastest config (that fits, under a cap), or the study's
answer, and how sure the paired rounds are of it; or the lowest median where nothing is ranked; or why nothing fits.
The report's headline, a sweep's last lines, and the first line of a sweep's or study's run description in MLflow.
Beside it, a sweep's claim (`sweep_gain`): its answer's speed-up over its baseline, or why none is claimed."""

from __future__ import annotations

import math
from dataclasses import dataclass

from pipeline.compare.paired import Judgement, bound, equal_text, margin_text, within
from pipeline.records import Status
from pipeline.render.rows import ANSWER, MORE_RUNS_RANK, Row, order, unranked


def fastest_line(rows: list[Row], cap_gib: float | None) -> str:
    """The fastest config (that fits, under a cap) and how sure the ranking is, or why nothing fits."""
    what = "Fastest that fits" if cap_gib else "Fastest"
    reference = next((r for r in rows if r.judgement is not None and r.comparison is None), None)
    if reference is not None:
        what = "The study's answer" if reference.role == ANSWER else what
        line = f"{what}: **{reference.name}**, {reference.median:.4f} s/step"
        compared = [r for r in order(rows) if r.comparison is not None]  # in the table's order
        if reference.judgement is Judgement.WINNER:
            return line + f" (faster than {', '.join(r.name for r in compared)}: paired rounds)"
        tied = [r for r in compared if r.judgement is Judgement.EQUAL]
        close = [f"{r.name} ({margin_text(r.comparison.margin)})" for r in tied if r.comparison.equal]
        apart = [f"{r.name} ({within(r.comparison.margin)} either way)" for r in tied if not r.comparison.equal]
        said = ([f"equal with {', '.join(close)}"] if close else []) + (
            [f"not told apart from {', '.join(apart)}"] if apart else []
        )
        return line + f"; {'; '.join(said)} (paired rounds)"
    timed = [r for r in rows if r.median is not None and r.fit.feasible and r.status == str(Status.OK)]
    if timed:
        best = min(timed, key=lambda r: r.median)
        return f"Lowest median: **{best.name}**, {best.median:.4f} s/step ({unranked(rows)}: not ranked)"
    failed = [r for r in rows if r.status == str(Status.FAILED)]
    ran = [r for r in rows if r.status != str(Status.FAILED)]  # a failed job's peak is no need: it stopped elsewhere
    needs = [(r.peak_gib, "measured") for r in ran if r.peak_gib] + [
        (r.predicted_gib, "predicted") for r in ran if r.predicted_gib and not r.peak_gib
    ]
    if not needs and failed:
        note = next((j.note[:200] for r in failed for j in r.measured if j.note), "")
        return f"**Nothing finished**: {len(failed)} of {len(rows)} configs failed" + (f" ({note})" if note else "")
    if not needs:
        return "Nothing finished: no config has a step time or a peak to show."
    need, how = min(needs)
    cap = f" under the cap of {cap_gib:.2f} GiB" if cap_gib else ""
    return f"**Nothing fits{cap}**: the smallest need is {need:.2f} GiB ({how}); raise mem_cap or widen the space."


@dataclass(frozen=True)
class Gain:
    """A sweep's answer against its baseline (its first config: the first value of every swept key), or against the
    runner-up where the baseline is the answer: the speed-up with its paired interval where that excludes 1, else
    why none is claimed."""

    against: str | None = None
    speedup: float | None = None
    low: float | None = None
    high: float | None = None
    confidence: float = 0.95
    why: str = "nothing is ranked"

    def line(self, best: str) -> str:
        """`tiny 8x1: 3.33x the tokens/s of tiny 1x8 [1.37, 8.08] (95%, paired)`, or `no speed-up is claimed: ...`."""
        if self.speedup is None:
            return f"no speed-up is claimed: {self.why}"
        return (
            f"{best}: {self.speedup:.2f}x the tokens/s of {self.against} [{bound(self.low)}, {bound(self.high)}] "
            f"({100 * self.confidence:g}%, paired)"
        )


def sweep_gain(best: Row, baseline: Row | None, rows: list[Row]) -> Gain:
    """The best row's speed-up over the baseline with its interval, from their paired rounds. Where the baseline is
    the best itself (a speed-up of 1.00x over itself says nothing), it is over the nearest config the rounds compared
    with it: the runner-up. A figure only where the interval excludes 1."""
    if best.judgement is None:
        why = unranked(rows)
        more = " (rank with repeats=3 or more)" if why in MORE_RUNS_RANK else ""
        return Gain(why=f"{why}: nothing is ranked{more}")
    if baseline is None:
        return Gain(why="the sweep's first config has no step time to compare with")
    if baseline is best:
        compared = [r for r in rows if r is not best and r.comparison is not None and r.comparison.speedup]
        baseline = max(compared, key=lambda r: r.comparison.speedup, default=None)
        if baseline is None:
            return Gain(why="no other config was paired with it")
    c = baseline.comparison  # the baseline against the best (the reference of the ranking)
    if c is None or c.judgement is None:
        return Gain(baseline.name, why=f"{baseline.name} was not paired with {best.name} in two rounds or more")
    if not c.claimed:  # the interval holds 1: no figure says anything
        said = equal_text(c.margin, c.tolerance)
        how = (
            f"found {best.name} and {baseline.name} {said}"
            if c.equal
            else (f"could not tell {best.name} from {baseline.name} ({said.removeprefix('not told apart (')}")
        )
        return Gain(baseline.name, confidence=c.confidence, why=f"{c.rounds} paired rounds {how}")
    high = 1 / c.low if c.low else math.inf
    return Gain(baseline.name, 1 / c.speedup, 1 / c.high if c.high else 0.0, high, c.confidence, "")
