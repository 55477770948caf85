"""The confirmation round of a study: its finalists (the best, the closest challengers, the baseline) re-measured
in rounds of fresh processes, neighbours in time, until every comparison with the best is settled or the budget is
spent; then each comparison says faster, slower, or equal within the margin it certifies.

The plan comes from the noise the study's search has already seen. A comparison's variance per round is
2 (s_p^2 + s_m^2 / n): s_p a process's own offset, s_m^2 / n the step noise of a median over n steady steps
(s_m = 1.25 x the steps' coefficient of variation, the median's asymptotic efficiency). A round costs the finalists'
fixed costs (spawn, setup, compilation, warm-up steps) plus n steady steps each. The run length n is the one that
makes the interval narrowest per device-second (variance x cost smallest), between `min_steps` and `max_steps`,
with s_p = PROCESS_SPREAD; the rounds are as many as the budget buys. A comparison is looked at after every round
from the third (two rounds give a t-interval on one degree of freedom, twelve times its standard error wide); a
finalist whose comparison with the best is settled leaves the rounds, so the budget goes where it is undecided.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from scipy.stats import t as student_t

from pipeline.compare.paired import Comparison, Judgement, compare

PROCESS_SPREAD = 0.05  # prior sd of one process's own log offset: neighbouring processes on an H200 (BENCHMARKS.md)
MEDIAN_EFFICIENCY = 1.2533  # sd of a median over that of a mean, for normal step times: sqrt(pi / 2)
MIN_ROUNDS = 3
COST_MARGIN = 1.1  # a round is counted this much over its predicted cost


@dataclass(frozen=True)
class Finalist:
    """What the search measured of a finalist: its step time and noise, and what its job cost beyond its steps."""

    name: str
    step_s: float  # median steady step
    cv: float  # coefficient of variation of its steady steps
    fixed_s: float  # its job's wall time minus its steps: spawn, setup, compilation


@dataclass(frozen=True)
class Plan:
    steps: int  # steady steps per run
    run_s: dict[str, float]  # predicted device seconds of one run of each finalist
    budget_s: float

    @property
    def affordable_rounds(self) -> int:
        round_s = COST_MARGIN * sum(self.run_s.values())
        return int(self.budget_s // round_s) if round_s > 0 else 0


def plan(finalists: list[Finalist], budget_s: float, min_steps: int, max_steps: int, warmup: int = 0) -> Plan:
    """The run length whose rounds, as many as the budget buys, give the narrowest expected interval; every run
    also pays its start-up and `warmup` steps."""
    noise = max(MEDIAN_EFFICIENCY * f.cv for f in finalists)

    def round_s(n: int) -> float:
        return sum(f.fixed_s + (warmup + n) * f.step_s for f in finalists)

    def width(n: int) -> float:
        rounds = int(budget_s // (COST_MARGIN * round_s(n)))
        if rounds < MIN_ROUNDS:
            return math.inf
        return student_t.ppf(0.975, rounds - 1) * math.sqrt(2 * (PROCESS_SPREAD**2 + noise**2 / n) / rounds)

    lengths = range(min_steps, max(min_steps, max_steps) + 1)
    steps = min(lengths, key=lambda n: (width(n), n))
    return Plan(steps, {f.name: f.fixed_s + (warmup + steps) * f.step_s for f in finalists}, budget_s)


def fit(
    finalists: list[Finalist], budget_s: float, min_steps: int, max_steps: int, warmup: int = 0
) -> tuple[list[Finalist], Plan]:
    """Drop finalists from the end (the lowest priority) until MIN_ROUNDS rounds fit the budget; at least two stay
    (the budget may then run out before MIN_ROUNDS, and the comparisons say so)."""
    kept = list(finalists)
    while True:
        chosen = plan(kept, budget_s, min_steps, max_steps, warmup)
        # two finalists need MIN_ROUNDS rounds; each more one round beyond, so that it does not starve the others
        if chosen.affordable_rounds >= MIN_ROUNDS + len(kept) - 2 or len(kept) <= 2:
            return kept, chosen
        kept.pop()


Measure = Callable[[str, int, int], tuple[float | None, float]]  # (finalist, round, steady steps) -> (median, s)


@dataclass
class ConfirmationRound:
    """The rounds of `finalists` (the best first), their medians by finalist and round, and the seconds spent."""

    finalists: list[str]
    confidence: float
    tolerance: float
    medians: dict[str, dict[int, float]] = field(default_factory=dict)
    seconds: float = 0.0
    failed: list[str] = field(default_factory=list)

    @property
    def best(self) -> str:
        return self.finalists[0]

    def comparisons(self, reference: str | None = None) -> list[Comparison]:
        """Every other finalist that ran against `reference` (the best by default), paired by round."""
        reference = reference or self.best
        others = [f for f in self.finalists if f != reference and f in self.medians]
        return [compare(f, reference, self.medians, self.confidence) for f in others]

    def open(self) -> list[str]:
        """The finalists still measured: the best, and those whose comparison with it is not settled."""
        settled = {c.config for c in self.comparisons() if c.settled(self.tolerance)}
        return [f for f in self.finalists if f not in settled and f not in self.failed]

    def run(self, measure: Measure, chosen: Plan, max_rounds: int) -> None:
        """Rounds in rotated order (A B C, B C A, ...) until every comparison is settled, the best fails, the
        rounds reach `max_rounds`, or the next whole round would not fit the budget (a round cut short leaves its
        first runs without a pair). A round fits when its predicted cost, COST_MARGIN over the plan's, fits beside
        the plan's cost of the rounds so far, or beside what they really took where that was more. Mostly the plan
        decides, not the real seconds: how long a run takes goes with how slow it was, and a stopping rule that
        saw it would bias the comparison (seen in simulation: 93% coverage at 95%, against 95% so)."""
        planned = 0.0
        for number in range(max_rounds):
            active = self.open() if number >= MIN_ROUNDS else [f for f in self.finalists if f not in self.failed]
            if len(active) < 2 or self.best not in active:
                return
            predicted = COST_MARGIN * sum(chosen.run_s[name] for name in active)
            if max(planned, self.seconds) + predicted > chosen.budget_s:
                return
            planned += predicted
            shift = number % len(active)
            for name in active[shift:] + active[:shift]:
                median, seconds = measure(name, number, chosen.steps)
                self.seconds += seconds
                if median is None:
                    self.failed.append(name)
                else:
                    self.medians.setdefault(name, {})[number] = median

    def winner(self) -> str:
        """The best, unless a finalist was found faster than it: then the fastest of those."""
        faster = [c for c in self.comparisons() if c.judgement is Judgement.FASTER]
        return max(faster, key=lambda c: c.speedup).config if faster else self.best
