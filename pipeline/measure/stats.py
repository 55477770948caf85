"""Steady-state statistics of one job's step times: the median and its interval, with the coverage it really has.

Step times are skewed and have outliers (a stray GC pause, a clock change), so the centre is the median, and its
interval is the distribution-free one from order statistics: for n independent samples of a continuous distribution,
[x_(r), x_(n-r+1)] covers the true median with probability exactly 1 - 2 P(B <= r-1), B ~ Binomial(n, 1/2). The
largest r whose coverage still reaches the requested confidence is chosen. Too few samples cannot reach it (two
values cover the median half the time, three 75%, five 94%): the interval is then the whole range, and its `level`
says what it really covers. Nothing is ever labelled with a confidence it does not have. These intervals cover one process's
steps; comparisons between configs, which cross processes, are `pipeline.compare`'s.
"""

from __future__ import annotations

import functools
import math
import statistics

from scipy.stats import binom

from pipeline.summaries import Interval, Summary


def quantile(sorted_values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if len(sorted_values) == 1:
        return sorted_values[0]
    pos = q * (len(sorted_values) - 1)
    low = math.floor(pos)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (pos - low)


@functools.cache
def order_coverage(n: int, r: int) -> float:
    """Probability that [x_(r), x_(n-r+1)] of n samples covers the median."""
    return 1.0 - 2.0 * float(binom.cdf(r - 1, n, 0.5))


@functools.cache
def _order_rank(n: int, confidence: float) -> int:
    r = 1
    while r + 1 <= (n + 1) // 2 and order_coverage(n, r + 1) >= confidence:
        r += 1
    return r


def median_ci(sorted_values: list[float], confidence: float = 0.95) -> Interval:
    """The narrowest order-statistic interval whose coverage reaches `confidence`; the whole range, with its real
    (lower) coverage, when n is too small to reach it."""
    n = len(sorted_values)
    r = _order_rank(n, confidence)
    return Interval(sorted_values[r - 1], sorted_values[n - r], order_coverage(n, r))


TRIM = 0.2  # share of the steps left out at each end by `trimmed_mean`


def trimmed_mean(values: list[float], share: float = TRIM) -> float:
    """The mean of the values left once floor(share x n) are dropped at each end: nearly as efficient as the mean
    on normal noise (the median loses a third), and one stalled step among five or more does not move it."""
    ordered = sorted(values)
    cut = int(share * len(ordered))
    return statistics.fmean(ordered[cut : len(ordered) - cut])


def summarize(values: list[float], confidence: float = 0.95) -> Summary | None:
    if not values:
        return None
    ordered = sorted(values)
    mean = statistics.fmean(ordered)
    stdev = statistics.stdev(ordered) if len(ordered) > 1 else 0.0
    return Summary(
        n=len(ordered),
        median=statistics.median(ordered),
        mean=mean,
        trimmed=trimmed_mean(ordered),
        p10=quantile(ordered, 0.10),
        p90=quantile(ordered, 0.90),
        cv=stdev / mean if mean else 0.0,
        ci=median_ci(ordered, confidence),
    )


def max_relative_deviation(losses: list[float], reference: list[float]) -> float | None:
    """Largest |loss - reference| / |reference| over the steps both have."""
    pairs = [(a, b) for a, b in zip(losses, reference, strict=False) if b]
    if not pairs:
        return None
    return max(abs(a - b) / abs(b) for a, b in pairs)
