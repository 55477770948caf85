"""Lines through measured peaks: for fixed knobs a job's peak memory is linear in the tokens of the micro-batch it is
measured on (`search._predictor` places each micro-batch at its token equivalents), so a setting measured at two token
counts is the line through them, and one measured once is that point with another setting's growth per token.

A line is carried to another setting by the difference of their memory terms, in bytes as the formula counts them:
the fixed bytes, and per token the layers' activations and the measured figures (the logits a loss keeps, CUDA
graphs' input copies). The calibration's scale is not applied to the difference: it is fitted to a whole peak, and
holds what the formula misses (the allocator's slack beside the longest micro-batch among them), which the line has
measured as it is; what a knob changes is the bytes it keeps.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Terms:
    """What a setting's formula counts of a micro-batch, in bytes: the fixed bytes, the layers' activations per token
    (as the formula counts them, before the calibration's scale) and the measured figures per token (`held`)."""

    static: float
    activations: float
    held: float


@dataclass(frozen=True)
class Line:
    """peak = intercept + slope x tokens, for one setting; `points`: the distinct token counts measured on it (one: a
    point with a borrowed slope), `center` their mean, `low` and `high` their range."""

    intercept: float
    slope: float
    points: int
    center: float = 0.0
    low: float = 0.0
    high: float = 0.0

    @classmethod
    def through(cls, points: list[tuple[float, float]]) -> Line | None:
        """The least-squares line through (tokens, peak) points, None under two token counts; its slope never
        negative (memory never shrinks with a larger micro-batch, and a CPU's resident memory is noisy)."""
        xs = {round(x, 6) for x, _ in points}
        if len(xs) < 2:
            return None
        slope, _ = statistics.linear_regression([x for x, _ in points], [p for _, p in points])
        slope = max(slope, 0.0)
        center = statistics.fmean(x for x, _ in points)
        low, high = min(x for x, _ in points), max(x for x, _ in points)
        return cls(statistics.fmean(p for _, p in points) - slope * center, slope, len(xs), center, low, high)

    @classmethod
    def point(cls, points: list[tuple[float, float]], slope: float) -> Line:
        """A setting measured at one token count (its peaks' mean there), with the slope of another."""
        x, peak = points[0][0], statistics.fmean(p for _, p in points)
        return cls(peak - slope * x, slope, 1, x, x, x)

    def at(self, x: float) -> float:
        return self.intercept + self.slope * x

    def carried(self, source: Terms, target: Terms) -> Line:
        """This line, measured in the setting of `source`, in the setting of `target`. Where it was measured (its
        center) the difference of their terms is added, in bytes as the formula counts them: a knob changes what it
        keeps, while the allocator's slack and what the formula misses, which the line measured, stay. Its growth per
        token keeps its measured figures' difference, and scales the rest with the activations (the slack beside a
        larger micro-batch grows with what the layers keep)."""
        moved = target.static - source.static + (target.activations - source.activations) * self.center
        moved += (target.held - source.held) * self.center
        grown = max(self.slope - source.held, 0.0) * target.activations / source.activations + target.held
        center = self.at(self.center) + moved
        return dataclasses.replace(self, intercept=center - grown * self.center, slope=grown)

    def beyond(self, x: float) -> float:
        """How much of its value at `x` rests on a growth it did not measure there: the growth from its measured range
        to `x` (for a point, on a slope it borrowed)."""
        return self.slope * max(self.low - x, x - self.high, 0.0)
