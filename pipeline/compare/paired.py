"""The paired comparison of two configs over rounds of fresh-process runs, and the words every report judges by.

A machine's speed drifts by 15-30% over minutes, and neighbouring processes drift together; each process also has
an offset of its own. So configs are measured in rounds, one fresh process each, the runs of a round neighbours in
time, and config A is compared with config B by the per-round log ratios log(t_B,r / t_A,r): the drift cancels inside
a round, and what is left (each process's own offset, the step noise of its median) is independent across rounds.
The interval is Student's t on their mean, at the requested confidence; the speed-up of A over B is exp(mean).

Judgement of A against B, from the interval [low, high] of A's speed-up:
- FASTER (low > 1) or SLOWER (high < 1);
- EQUAL otherwise: the interval holds 1, and m = max(high, 1 / low) - 1 is the margin it leaves open, either way (the
  time ratio's interval is the inverse). Its words: `equal ±m` only where m is within the tie tolerance
  (`optimize.tie_tolerance`, 5%), where the comparison is settled; wider, `not told apart (within ±m)`, and from
  +100% on the factor it leaves open, `not told apart (within 2.7x)`. No speed-up is given as a figure while its
  interval holds 1 (`Comparison.claimed`).
One run each (fewer than two rounds) is no comparison: a single process's interval covers its own steps only.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from scipy.stats import t as student_t

TIE_TOLERANCE = 0.05  # `optimize.tie_tolerance`'s default: a tie certified within it is `equal`


class Judgement(StrEnum):
    """What a comparison between processes says of a config; the one vocabulary of tables, reports and plots."""

    WINNER = "winner"  # faster than every other config compared with it, each at the confidence
    FASTER = "faster"
    SLOWER = "slower"
    EQUAL = "equal"  # the interval holds 1: `equal` within the tie tolerance, else `not told apart`


@dataclass(frozen=True)
class Comparison:
    """`config` against `reference`, over the rounds in which both ran."""

    config: str
    reference: str
    speedups: tuple[float, ...]  # per round: reference time / config time
    confidence: float
    speedup: float  # geometric mean: how many times faster `config` is
    low: float  # interval of the speed-up at `confidence` (0 and inf below two rounds)
    high: float
    judgement: Judgement | None  # None: fewer than two rounds
    tolerance: float = TIE_TOLERANCE  # a tie within it reads `equal`, a wider one `not told apart`

    @property
    def rounds(self) -> int:
        return len(self.speedups)

    @property
    def margin(self) -> float | None:
        """For EQUAL: the largest relative difference the interval leaves open, either way (the interval of the
        speed-up and that of the time ratio, its inverse, both lie within a factor 1 + margin of 1)."""
        if self.judgement is not Judgement.EQUAL:
            return None
        return max(self.high, 1.0 / self.low) - 1.0

    def settled(self, tolerance: float | None = None) -> bool:
        """Faster, slower, or equal within `tolerance` (the comparison's own by default): no more rounds needed."""
        if self.judgement is None:
            return False
        limit = self.tolerance if tolerance is None else tolerance
        return self.judgement is not Judgement.EQUAL or self.margin <= limit + 1e-12

    @property
    def equal(self) -> bool:
        """A tie within the tie tolerance: the one the word `equal` is for."""
        return self.judgement is Judgement.EQUAL and self.settled()

    @property
    def claimed(self) -> bool:
        """Its interval excludes 1: the only comparison whose speed-up is given as a figure."""
        return self.judgement in (Judgement.FASTER, Judgement.SLOWER)

    def tie_text(self) -> str:
        """A tie in the rank column's words: `equal ±3%`, or `not told apart (within ±71%)`, `(within 2.7x)`."""
        return f"equal {margin_text(self.margin)}" if self.equal else f"not told apart ({within(self.margin)})"

    def interval_text(self) -> str:
        return ratio_text(self.speedup, self.low, self.high)

    def sentence(self) -> str:
        """`4x1 bf16 is 1.75x [1.62, 1.90] faster than 4x1 fp16 (95%, paired over 6 rounds)`."""
        paired = f"({100 * self.confidence:g}%, paired over {self.rounds} rounds)"
        if self.judgement is None:
            return f"{self.config} against {self.reference}: one round only, no comparison"
        if self.judgement is Judgement.EQUAL:
            return f"{self.config} and {self.reference}: {equal_text(self.margin, self.tolerance)} {paired}"
        if self.judgement is Judgement.FASTER:
            return f"{self.config} is {self.interval_text()} faster than {self.reference} {paired}"
        inverse = ratio_text(1 / self.speedup, 1 / self.high, 1 / self.low)
        return f"{self.reference} is {inverse} faster than {self.config} {paired}"

    def to_json(self) -> dict:
        return {"config": self.config, "reference": self.reference, "speedups": list(self.speedups)}


WIDE = 1.0  # a margin from +100% on: a percentage says nothing, the factor left open is given instead


def bound(value: float) -> str:
    """A ratio's bound to two decimals, or to as many more as it takes not to read as 1 (`1.003`): an interval
    that excludes 1 never reads as holding it."""
    text = f"{value:.2f}"
    for digits in range(3, 7):
        if float(text) != 1.0 or value == 1.0:
            break
        text = f"{value:.{digits}f}"
    return text


def ratio_text(value: float, low: float, high: float) -> str:
    """`1.76x [1.52, 2.03]`, its bounds by `bound`."""
    return f"{value:.2f}x [{bound(low)}, {bound(high)}]"


def within(margin: float) -> str:
    """What a margin leaves open, either way: `within ±12%`, or `within 13.6x` from WIDE on."""
    return f"within {margin_text(margin).removeprefix('within ')}"


def margin_text(margin: float) -> str:
    """A margin rounded up to a whole percent (what is certified may not be rounded down): `±12%`; from WIDE on,
    the factor it leaves open either way: `within 13.6x`."""
    if margin >= WIDE:
        return f"within {math.ceil(10 * (1 + margin)) / 10:.1f}x"
    return f"±{math.ceil(100 * margin - 1e-9):.0f}%"


def equal_text(margin: float, tolerance: float) -> str:
    """`equal within ±3%` where the margin is within the tie tolerance; wider, `not told apart (within ±71% either
    way)` or `(within 13.6x either way)`."""
    if margin <= tolerance + 1e-12:
        return f"equal within {margin_text(margin)}"
    return f"not told apart ({within(margin)} either way)"


def compare_speedups(
    config: str, reference: str, speedups: list[float], confidence: float, tolerance: float = TIE_TOLERANCE
) -> Comparison:
    """The comparison from per-round speed-ups of `config` over `reference`."""
    logs = [math.log(s) for s in speedups]
    if len(logs) < 2:
        mean = logs[0] if logs else 0.0
        return Comparison(
            config, reference, tuple(speedups), confidence, math.exp(mean), 0.0, math.inf, None, tolerance
        )
    mean = statistics.fmean(logs)
    half = student_t.ppf((1 + confidence) / 2, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    low, high = math.exp(mean - half), math.exp(mean + half)
    judgement = Judgement.FASTER if low > 1 else Judgement.SLOWER if high < 1 else Judgement.EQUAL
    return Comparison(config, reference, tuple(speedups), confidence, math.exp(mean), low, high, judgement, tolerance)


def compare(
    config: str,
    reference: str,
    times: Mapping[str, Mapping[int, float]],
    confidence: float,
    tolerance: float = TIE_TOLERANCE,
) -> Comparison:
    """`config` against `reference` from each run's step time (`times[name][round]`: a sweep repeat's median, a
    confirmation run's trimmed mean), paired by round."""
    mine, theirs = times.get(config, {}), times.get(reference, {})
    common = sorted(set(mine) & set(theirs))
    return compare_speedups(config, reference, [theirs[r] / mine[r] for r in common], confidence, tolerance)
