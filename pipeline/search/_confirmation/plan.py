"""The confirmation round of a study: its finalists (the best, the closest challengers, the baseline) re-measured
in rounds of fresh processes, neighbours in time, until every comparison with the best is settled or the budget is
spent; then each comparison says faster, slower, or equal within the margin it certifies.

The plan comes from the noise the study's search has already seen. A comparison's variance per round is
2 (s_p^2 + s_m^2 / n): s_p a process's own offset, s_m^2 / n the step noise of a run's figure over n steady steps
(s_m = RUN_NOISE x the steps' coefficient of variation). A run's figure is the 20%-trimmed mean of its steady steps
(`measure.stats.trimmed_mean`): its runs are short (a few steps), where a median throws away a third of what the
steps say (in simulation it decided 3 points less often) and a plain mean is moved by one stalled step. A round
costs the finalists' fixed costs (spawn, setup, compilation, warm-up steps) plus n steady steps each. The run
length n is the one that makes the interval narrowest per device-second (variance x cost smallest), between
`min_steps` and `max_steps`, with s_p = PROCESS_SPREAD; the rounds are as many as the budget buys. A comparison is
looked at after every round from the third (two rounds give a t-interval on one degree of freedom, twelve times its
standard error wide); a finalist whose comparison with the best is settled leaves the rounds, so the budget goes
where it is undecided.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from scipy.stats import t as student_t

from pipeline.compare.paired import Comparison, compare
from pipeline.compare.ranking import rank

PROCESS_SPREAD = 0.05  # prior sd of one process's own log offset: neighbouring processes on an H200 (BENCHMARKS.md)
RUN_NOISE = 1.05  # sd of a run's figure (the 20%-trimmed mean of its steps) over the steps' sd / sqrt(n), normal
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
    """The planned run length, and what a run of each finalist costs: its fixed part (start-up and warm-up steps)
    plus its steady steps."""

    steps: int  # steady steps per run
    fixed_s: dict[str, float]  # per finalist: device seconds of a run beyond its steady steps
    step_s: dict[str, float]  # per finalist: seconds of one steady step
    budget_s: float
    min_steps: int = 1

    def cost(self, names: list[str], steps: int | None = None) -> float:
        """Predicted device seconds of one run of each of `names`, of `steps` steady steps (the plan's by default)."""
        steps = self.steps if steps is None else steps
        return sum(self.fixed_s[name] + steps * self.step_s[name] for name in names)

    @property
    def affordable_rounds(self) -> int:
        round_s = COST_MARGIN * self.cost(list(self.fixed_s))
        return int(self.budget_s // round_s) if round_s > 0 else 0


def plan(finalists: list[Finalist], budget_s: float, min_steps: int, max_steps: int, warmup: int = 0) -> Plan:
    """The run length whose rounds, as many as the budget buys, give the narrowest expected interval; every run
    also pays its start-up and `warmup` steps."""
    noise = max(RUN_NOISE * f.cv for f in finalists)
    fixed = {f.name: f.fixed_s + warmup * f.step_s for f in finalists}
    step = {f.name: f.step_s for f in finalists}

    def width(n: int) -> float:
        rounds = Plan(n, fixed, step, budget_s, min_steps).affordable_rounds
        if rounds < MIN_ROUNDS:
            return math.inf
        return student_t.ppf(0.975, rounds - 1) * math.sqrt(2 * (PROCESS_SPREAD**2 + noise**2 / n) / rounds)

    lengths = range(min_steps, max(min_steps, max_steps) + 1)
    steps = min(lengths, key=lambda n: (width(n), n))
    return Plan(steps, fixed, step, budget_s, min_steps)


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


Measure = Callable[[str, int, int], tuple[float | None, float]]  # (finalist, round, steady steps) -> (figure, s)


@dataclass
class ConfirmationRound:
    """The rounds of `finalists` (the best first): each run's figure (the trimmed mean of its steady steps) by
    finalist and round, the steady steps of each round, and the seconds spent."""

    finalists: list[str]
    confidence: float
    tolerance: float
    times: dict[str, dict[int, float]] = field(default_factory=dict)
    seconds: float = 0.0
    failed: list[str] = field(default_factory=list)
    steps: dict[int, int] = field(default_factory=dict)  # steady steps of each round's runs
    members: dict[int, list[str]] = field(default_factory=dict)  # the finalists each round runs, in its order

    @property
    def best(self) -> str:
        return self.finalists[0]

    def comparisons(self, reference: str | None = None) -> list[Comparison]:
        """Every other finalist that ran against `reference` (the best by default), paired by round."""
        reference = reference or self.best
        others = [f for f in self.finalists if f != reference and f in self.times]
        return [compare(f, reference, self.times, self.confidence, self.tolerance) for f in others]

    def open(self) -> list[str]:
        """The finalists still measured: the best, the leader (the rounds' fastest guess, which the answer becomes
        where nothing tells it from the best), and those whose comparison with either is not settled. A finalist
        settled against the best alone leaves too soon where the leader moves: the baseline's pairs with the new
        leader, the answer's claim, would stay as few as the best needed."""
        lead = self.leader(self.times)
        unsettled = {c.config for c in self.comparisons() if not c.settled()}
        if lead != self.best:
            unsettled |= {c.config for c in self.comparisons(lead) if not c.settled()}
        kept = unsettled | {self.best, lead}
        return [f for f in self.finalists if f in kept and f not in self.failed]

    def run(
        self,
        measure: Measure,
        chosen: Plan,
        max_rounds: int,
        after_run: Callable[[], None] = lambda: None,
        claim: tuple[str, ...] = (),
    ) -> None:
        """Rounds in rotated order (A B C, B C A, ...) until every comparison is settled, the best fails, the
        rounds reach `max_rounds`, or the next whole round would not fit the budget (a round cut short pairs
        nothing). `after_run` follows every run, so that a round a stopped study began goes on, with a state read
        back, where it stopped: its rounds begun end as they were planned, with the runs they lack alone. The first
        MIN_ROUNDS rounds are secured by shortening the runs (to `min_steps` at most) where the rounds so far cost
        more than planned: a run's length changes the noise of its figure, not its centre. Later
        rounds run when the plan's cost says they fit, not the seconds the runs took: a stop that read how long a
        run took would read how slow it was, and bias the comparison. `claim`: the two finalists (the answer and
        its baseline) whose first MIN_ROUNDS rounds run whatever the budget, alone and at the shortest runs where
        the rounds would not fit."""
        planned = predicted_so_far = 0.0
        steps = chosen.steps
        for number in range(max_rounds):
            early = number < MIN_ROUNDS
            active = [f for f in self.finalists if f not in self.failed] if early else self.open()
            if number in self.members:  # begun before the study stopped: it ends as it was planned
                active = [f for f in self.members[number] if f not in self.failed]
                steps, fits = self.steps[number], True
            elif len(active) < 2 or self.best not in active:
                return
            elif early:
                # the cost rate the rounds so far showed (the plan's margin before any ran), never below the plan
                rate = max(1.0, self.seconds / predicted_so_far) if predicted_so_far else COST_MARGIN
                steps = self._secured_steps(chosen, active, MIN_ROUNDS - number, rate)
                fits = self.seconds + rate * chosen.cost(active, steps) <= chosen.budget_s
                if not fits and claim and all(name in active for name in claim):
                    active, steps, fits = [f for f in active if f in claim], chosen.min_steps, True
            else:
                fits = max(planned, self.seconds) + COST_MARGIN * chosen.cost(active, steps) <= chosen.budget_s
            if not fits:
                return
            planned += COST_MARGIN * chosen.cost(active, steps)
            predicted_so_far += chosen.cost(active, steps)
            self.steps[number], self.members[number] = steps, active
            self._round(measure, active, number, steps, after_run)

    def _secured_steps(self, chosen: Plan, active: list[str], left: int, rate: float) -> int:
        """The longest run, up to the plan's, with which `left` more rounds fit the budget at `rate` times their
        predicted cost; `min_steps` when none does."""
        room = chosen.budget_s - self.seconds
        fitting = [n for n in range(chosen.min_steps, chosen.steps + 1) if left * rate * chosen.cost(active, n) <= room]
        return max(fitting, default=chosen.min_steps)

    def _round(self, measure: Measure, active: list[str], number: int, steps: int, after_run) -> None:
        """Round `number`'s runs in its rotated order, but those it has already (a round begun before a stop)."""
        shift = number % len(active)
        for name in active[shift:] + active[:shift]:
            if number in self.times.get(name, {}):
                continue
            figure, seconds = measure(name, number, steps)
            self.seconds += seconds
            if figure is None:
                self.failed.append(name)
            else:
                self.times.setdefault(name, {})[number] = figure
            after_run()

    def winner(self, among: Collection[str] | None = None) -> str | None:
        """The best, unless a finalist was found faster than it in pairs: then where a ranking that starts at the
        best ends (`compare.ranking.rank`: a finalist faster than that one moves it on), among the finalists of
        `among` (those that fit: a baseline over the cap is measured for its speed, never the answer). Every table
        of the study's runs ranks them so, from the same rounds. A finalist whose run failed in the round (out of
        memory under the cap: a fit is a process's draw where the allocator's slack decides it) is never the winner;
        None where the best failed (its pairs are then what every other is measured against)."""
        if self.best in self.failed:
            return None
        pool = {
            f: t
            for f, t in self.times.items()
            if f not in self.failed and (f == self.best or among is None or f in among)
        }
        if len(pool.get(self.best, {})) < 2:
            return self.best  # the best has no pairs: nothing was found faster than it
        ranking = rank(pool, self.confidence, prefer=self.leader(pool), tolerance=self.tolerance)
        return ranking.reference if ranking else self.best

    def leader(self, pool: dict[str, dict[int, float]]) -> str:
        """The finalist the rounds put fastest against the best, by the paired point estimate (the best itself where
        none beats it): where the rounds cannot tell two apart, they are still the better guess than the search's
        one run of each."""
        paired = [compare(f, self.best, pool, self.confidence) for f in pool if f != self.best and len(pool[f]) >= 2]
        ahead = [c for c in paired if c.rounds >= 2 and c.speedup > 1.0]
        return max(ahead, key=lambda c: c.speedup).config if ahead else self.best
