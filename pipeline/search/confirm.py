"""The confirmation round: the finalists of a study re-measured side by side, so that the answer between close
configs is not the noise of one process.

The finalists are the best config and the others whose interval overlaps its interval (at most
`optimize.confirm_k`). They run in alternating short jobs, A B C, then B C A, ..., each in a fresh process, and each
challenger is compared with the best as a paired ratio per round (its median over the best's, measured minutes
apart), so slow drift of the machine cancels out of the comparison. After every round from the third, the t-interval
of the mean log ratio at `measure.confidence` decides each comparison: faster, slower, or equal within
`optimize.tie_tolerance`. The round stops when every comparison is decided, or its device-second budget or its
rounds are spent.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from scipy.stats import t as student_t

MIN_ROUNDS = 3


class Decision(StrEnum):
    FASTER = "faster"  # the challenger is faster than the best, beyond the tolerance
    SLOWER = "slower"
    EQUAL = "equal"  # within the tolerance either way
    UNDECIDED = "undecided"


@dataclass(frozen=True)
class Comparison:
    challenger: str
    best: str
    ratios: tuple[float, ...]  # challenger median / best median, one per round
    speedup: float  # how much faster the challenger is: best time / challenger time (geometric mean)
    low: float  # interval of the speedup at the confidence
    high: float
    decision: Decision

    def sentence(self, tolerance: float) -> str:
        if self.decision is Decision.EQUAL:
            return f"{self.challenger} and {self.best}: tie within ±{100 * tolerance:g}% ({self._numbers()})"
        if self.decision is Decision.UNDECIDED:
            return f"{self.challenger} against {self.best}: undecided, {self._numbers()}"
        if self.speedup >= 1:
            return f"{self.challenger} is {self._numbers()} faster than {self.best}"
        return f"{self.best} is {1 / self.speedup:.2f}x [{1 / self.high:.2f}, {1 / self.low:.2f}] faster than " + (
            self.challenger
        )

    def _numbers(self) -> str:
        return f"{self.speedup:.2f}x [{self.low:.2f}, {self.high:.2f}]"

    def record(self) -> dict:
        """As the study keeps it (JSON)."""
        return {**dataclasses.asdict(self), "ratios": list(self.ratios)}

    @classmethod
    def of(cls, record: dict) -> Comparison:
        return cls(**{**record, "ratios": tuple(record["ratios"]), "decision": Decision(record["decision"])})


def compare(challenger: str, best: str, ratios: list[float], confidence: float, tolerance: float) -> Comparison:
    """The paired comparison of `challenger` with `best` from its per-round time ratios."""
    logs = [math.log(r) for r in ratios]
    mean = statistics.fmean(logs)
    if len(logs) < MIN_ROUNDS:
        return Comparison(challenger, best, tuple(ratios), math.exp(-mean), 0.0, math.inf, Decision.UNDECIDED)
    half = student_t.ppf((1 + confidence) / 2, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    low_log, high_log = mean - half, mean + half  # of time ratios: below 0 the challenger is faster
    if high_log < math.log(1 - tolerance):
        decision = Decision.FASTER
    elif low_log > math.log(1 + tolerance):
        decision = Decision.SLOWER
    elif low_log >= math.log(1 - tolerance) and high_log <= math.log(1 + tolerance):
        decision = Decision.EQUAL
    else:
        decision = Decision.UNDECIDED
    return Comparison(
        challenger, best, tuple(ratios), math.exp(-mean), math.exp(-high_log), math.exp(-low_log), decision
    )


@dataclass
class Round:
    """The state of a confirmation round between `finalists` (the best first)."""

    finalists: list[str]
    confidence: float
    tolerance: float
    medians: dict[str, list[float]] = field(default_factory=dict)  # per finalist, one median per round
    seconds: float = 0.0

    def order(self, number: int) -> list[str]:
        """Round `number`'s running order: the finalists rotated by one place each round."""
        shift = number % len(self.finalists)
        return self.finalists[shift:] + self.finalists[:shift]

    def comparisons(self) -> list[Comparison]:
        best = self.finalists[0]
        rounds = len(self.medians.get(best, []))
        out = []
        for challenger in self.finalists[1:]:
            pairs = list(zip(self.medians.get(challenger, [])[:rounds], self.medians[best], strict=False))
            out.append(compare(challenger, best, [c / b for c, b in pairs], self.confidence, self.tolerance))
        return out

    def decided(self) -> bool:
        return all(c.decision is not Decision.UNDECIDED for c in self.comparisons())

    def run(self, measure: Callable[[str, int], tuple[float | None, float]], rounds: int, budget_s: float) -> None:
        """`measure(finalist, round)` runs one short job and returns (its steady median or None, its seconds)."""
        for number in range(rounds):
            for finalist in self.order(number):
                median, seconds = measure(finalist, number)
                self.seconds += seconds
                if median is None:
                    return  # a finalist failed: the comparison stops with what it has
                self.medians.setdefault(finalist, []).append(median)
            if number + 1 >= MIN_ROUNDS and self.decided():
                return
            if self.seconds >= budget_s:
                return

    def winner(self) -> str:
        """The best, unless a challenger was found faster; then the fastest of those."""
        faster = [c for c in self.comparisons() if c.decision is Decision.FASTER]
        return max(faster, key=lambda c: c.speedup).challenger if faster else self.finalists[0]
