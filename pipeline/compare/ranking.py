"""Ranks of configs from paired rounds: the fastest, and every other config judged against it with the paired
statistic (`compare.paired`). A config measured in fewer than two rounds is not ranked: one process says nothing
about another."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass

from pipeline.compare.paired import TIE_TOLERANCE, Comparison, Judgement, compare


@dataclass(frozen=True)
class Ranking:
    reference: str  # the fastest: no other config is faster than it at the confidence
    comparisons: dict[str, Comparison]  # every other ranked config against the reference

    def judgement(self, config: str) -> Judgement | None:
        """The reference is the winner when every other config is slower, else equal with those it ties."""
        if config == self.reference:
            slower = all(c.judgement is Judgement.SLOWER for c in self.comparisons.values())
            return Judgement.WINNER if slower else Judgement.EQUAL
        comparison = self.comparisons.get(config)
        return comparison.judgement if comparison else None

    def ties(self) -> list[str]:
        return [name for name, c in self.comparisons.items() if c.judgement is Judgement.EQUAL]


def rank(
    times: Mapping[str, Mapping[int, float]],
    confidence: float,
    prefer: str | None = None,
    tolerance: float = TIE_TOLERANCE,
) -> Ranking | None:
    """`times[config][round]`: each run's figure, of the configs that compete (those that fit). None when fewer than
    two configs have two rounds or more. The reference starts at `prefer` where it was ranked (a study's answer: the
    report then judges from where the study did), else at the lowest mean; either way it moves to a config found
    faster than it. A tie reads `equal` within `tolerance`."""
    ranked = {name: rounds for name, rounds in times.items() if len(rounds) >= 2}
    if len(ranked) < 2:
        return None
    reference = prefer if prefer in ranked else None
    reference = reference or min(ranked, key=lambda name: statistics.fmean(math.log(v) for v in ranked[name].values()))
    for _ in ranked:  # a paired comparison may find a config faster than the one with the lowest mean: move to it
        comparisons = {n: compare(n, reference, ranked, confidence, tolerance) for n in ranked if n != reference}
        faster = [c for c in comparisons.values() if c.judgement is Judgement.FASTER]
        if not faster:
            break
        reference = max(faster, key=lambda c: c.speedup).config
    return Ranking(reference, comparisons)
