"""Steady-state statistics of step times, and the ranking of configs that says "tie" when it cannot tell.

Step times are skewed and have outliers (a stray GC pause, a clock change), so the centre is the median, and its
confidence interval is the distribution-free one from order statistics: with n samples the interval between the
j-th and k-th smallest values covers the true median with probability >= confidence, j and k taken from the
Binomial(n, 1/2) distribution. Two configs rank only when their intervals do not overlap.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass

from scipy.stats import binom


@dataclass(frozen=True)
class Summary:
    n: int
    median: float
    mean: float
    p10: float
    p90: float
    cv: float
    ci_low: float
    ci_high: float

    def as_dict(self, prefix: str, unit: str = "s") -> dict[str, float]:
        return {f"{prefix}_{k}_{unit}" if k not in ("n", "cv") else f"{prefix}_{k}": v for k, v in asdict(self).items()}


def quantile(sorted_values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if len(sorted_values) == 1:
        return sorted_values[0]
    pos = q * (len(sorted_values) - 1)
    low = math.floor(pos)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (pos - low)


def median_ci(sorted_values: list[float], confidence: float = 0.95) -> tuple[float, float]:
    """Order-statistic interval [x_(r), x_(n-r+1)] (1-based) for the median, r as large as keeps its coverage
    1 - 2 P(B <= r-1) >= confidence; the whole range when n is too small to reach `confidence`."""
    n = len(sorted_values)
    tail = (1.0 - confidence) / 2
    m = -1
    while m + 1 < n and binom.cdf(m + 1, n, 0.5) <= tail:
        m += 1
    r = max(1, m + 1)
    return sorted_values[r - 1], sorted_values[n - r]


def summarize(values: list[float], confidence: float = 0.95) -> Summary | None:
    if not values:
        return None
    ordered = sorted(values)
    mean = statistics.fmean(ordered)
    stdev = statistics.stdev(ordered) if len(ordered) > 1 else 0.0
    low, high = median_ci(ordered, confidence)
    return Summary(
        n=len(ordered),
        median=statistics.median(ordered),
        mean=mean,
        p10=quantile(ordered, 0.10),
        p90=quantile(ordered, 0.90),
        cv=stdev / mean if mean else 0.0,
        ci_low=low,
        ci_high=high,
    )


def steady(values: list[float], warmup: int) -> list[float]:
    return list(values[warmup:])


def rank(intervals: dict[str, tuple[float, float, float]]) -> dict[str, str]:
    """{config: (median, ci_low, ci_high)} -> {config: 'winner' | 'tie' | 'slower'}, lower is better.

    The fastest median wins only when its interval lies wholly below every other config's; configs whose intervals
    overlap the fastest one's are tied with it; the rest are 'slower'."""
    if not intervals:
        return {}
    best = min(intervals, key=lambda name: intervals[name][0])
    _, _, best_high = intervals[best]
    tied = [n for n, (_, low, _) in intervals.items() if n != best and low <= best_high]
    verdicts = {n: ("tie" if n in tied else "slower") for n in intervals}
    verdicts[best] = "tie" if tied else "winner"
    return verdicts


def max_relative_deviation(losses: list[float], reference: list[float]) -> float | None:
    """Largest |loss - reference| / |reference| over the steps both have."""
    pairs = [(a, b) for a, b in zip(losses, reference, strict=False) if b]
    if not pairs:
        return None
    return max(abs(a - b) / abs(b) for a, b in pairs)
