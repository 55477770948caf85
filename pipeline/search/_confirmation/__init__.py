"""A study's confirmation round, all of it in this folder: here its finalists, settings and record (the one writer
and the one reader of what the study stores); `plan` the rounds' statistics (their length, number, stopping rule,
and the leader); `jobs` the round run as jobs on the study. Its finalists are re-measured in paired rounds of fresh
processes, once per study by whichever worker gets there first.

Finalists, in priority order: the best eligible trial; the baseline, so that the answer's speed-up over it comes
from pairs; the best eligible trial of every other world size the study searched, so that the answer's speed-up
against one device (or what more devices would give) comes from pairs too; then the eligible trials whose search
median is within `confirm_within` of the best's (every eligible trial with `confirm=always`), at most `confirm_k`
besides the baseline. The budget is `confirm_share` of the
study's device time, the round's own included, or `confirm_floor_s` where that is more (a study of a few seconds a
trial would otherwise buy three short rounds, too few to decide a gap of 1.2x on a noisy CPU), and at most
`confirm_budget_s` where set; when it cannot buy three
rounds of them all, the lowest-priority finalists are left out, and the answer says so. The answer's claim against
the baseline is bought whatever the share: at least MIN_ROUNDS paired rounds of the best and the baseline at the
shortest runs (`minimum_claim_s`), the share then governing only the other finalists.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pipeline.search._confirmation.plan import COST_MARGIN, MIN_ROUNDS, ConfirmationRound, Finalist, fit
from pipeline.search._trials import TrialRecord

MIN_STEPS = 3  # steady steps of a confirmation run at least: a median of fewer is one step's noise
ATTR = "confirmation"  # the study's user attribute that holds the record of the finished round
PARTIAL = "confirmation_partial"  # the record so far, after every round: what an interrupted round had measured


@dataclass(frozen=True)
class RoundSettings:
    """`optimize.confirm*` and what the round judges by."""

    mode: str  # auto | always | never
    k: int  # finalists at most, the best included, the baseline not counted
    within: float
    share: float
    budget_s: float | None
    max_steps: int
    max_rounds: int
    tolerance: float
    confidence: float
    floor_s: float = 0.0  # device seconds the round may spend whatever the share (the cap, budget_s, still holds)

    @classmethod
    def of(cls, cfg) -> RoundSettings:
        o = cfg.optimize
        return cls(
            o.confirm,
            o.confirm_k,
            o.confirm_within,
            o.confirm_share,
            o.confirm_budget_s,
            o.confirm_steps,
            o.confirm_rounds,
            o.tie_tolerance,
            cfg.measure.confidence,
            o.confirm_floor_s,
        )

    def budget(self, spent_s: float) -> float:
        """The round's device seconds: `share` of the study's whole time, given what the study spent before it, or
        the floor where that is more (a small study's share buys too few rounds to decide); at most `budget_s`."""
        budget = max(self.share / (1 - self.share) * spent_s, self.floor_s)
        return budget if self.budget_s is None else min(budget, self.budget_s)

    def governs(self, spent_s: float, budget_s: float) -> str:
        """What set the round's budget, in the words of its settings."""
        share_s = self.share / (1 - self.share) * spent_s
        if budget_s > self.budget(spent_s):
            return "what the answer's claim needs"
        if self.budget_s is not None and self.budget_s < max(share_s, self.floor_s):
            return "at most optimize.confirm_budget_s"
        if self.floor_s > share_s:
            return f"the floor, optimize.confirm_floor_s; the share, {100 * self.share:g}%, buys {share_s:.0f} s"
        return f"{100 * self.share:g}% of the study's device time"


@dataclass(frozen=True)
class ConfirmationRecord:
    """The round as the study keeps it: every worker's answer reads it."""

    state: ConfirmationRound
    warmup: int  # steps of each run left out (its transient, as the trials showed it)
    steps: int  # steady steps of each run, as planned (a round may have run shorter ones: `state.steps`)
    budget_s: float
    baseline: str | None  # the baseline's label, when it took part
    left_out: tuple[str, ...] = ()  # finalists the budget could not take
    finished: bool = True  # False: the study stopped during the round (the same command goes on with it)

    @property
    def rounds(self) -> int:
        return max((len(m) for m in self.state.times.values()), default=0)

    @property
    def runs(self) -> int:
        """Runs measured (or failed) so far."""
        return sum(len(m) for m in self.state.times.values()) + len(self.state.failed)

    def steps_text(self) -> str:
        """The steady steps of the rounds' runs: `5`, or `4-5` where rounds were shortened to fit the budget."""
        run = sorted(set(self.state.steps.values())) or [self.steps]
        return f"{run[0]}" if run[0] == run[-1] else f"{run[0]}-{run[-1]}"

    def to_attr(self) -> dict:
        s = self.state
        return {
            "finalists": s.finalists,
            "confidence": s.confidence,
            "tolerance": s.tolerance,
            "times": {name: {str(r): v for r, v in rounds.items()} for name, rounds in s.times.items()},
            "round_steps": {str(r): n for r, n in s.steps.items()},
            "round_members": {str(r): names for r, names in s.members.items()},
            "seconds": s.seconds,
            "failed": s.failed,
            "warmup": self.warmup,
            "steps": self.steps,
            "budget_s": self.budget_s,
            "baseline": self.baseline,
            "left_out": list(self.left_out),
            "finished": self.finished,
        }

    @classmethod
    def of(cls, attr: dict) -> ConfirmationRecord:
        stored = attr["times"] if "times" in attr else attr["medians"]  # "medians": studies of earlier versions
        times = {name: {int(r): v for r, v in rounds.items()} for name, rounds in stored.items()}
        steps = {int(r): n for r, n in attr.get("round_steps", {}).items()}
        members = {int(r): list(names) for r, names in attr.get("round_members", {}).items()}
        state = ConfirmationRound(
            list(attr["finalists"]),
            attr["confidence"],
            attr["tolerance"],
            times,
            attr["seconds"],
            list(attr["failed"]),
            steps,
            members,
        )
        return cls(
            state,
            attr["warmup"],
            attr["steps"],
            attr["budget_s"],
            attr["baseline"],
            tuple(attr["left_out"]),
            attr.get("finished", True),
        )


def choose(
    eligible: list[TrialRecord],
    baseline: TrialRecord | None,
    settings: RoundSettings,
    estimates: Mapping[str, float] | None = None,
) -> list[TrialRecord]:
    """The finalists in priority order (best, baseline, the best of each other world size, the fastest measured,
    closest challengers); empty when there is nothing to compare or the round is off. The best of each world size is
    there so that what more devices give is a paired comparison too. `estimates` (step seconds by label, the knob
    model's) rank and select where they hold a config, its search median where not: a challenger is close by either."""
    if not eligible or settings.mode == "never":
        return []
    estimates = estimates or {}

    def estimate(r: TrialRecord) -> float:
        return estimates.get(r.label, r.median)

    ranked = sorted(eligible, key=estimate)
    best = ranked[0]
    chosen = [best]
    if baseline is not None and baseline.label != best.label:
        chosen.append(baseline)
    sizes: dict[int, TrialRecord] = {}
    for r in ranked:
        sizes.setdefault(r.world_size, r)
    others = [r for size, r in sizes.items() if size != best.world_size]
    bar = 1 + settings.within
    close = [
        r
        for r in ranked[1:]
        if settings.mode == "always" or r.median <= best.median * bar or estimate(r) <= estimate(best) * bar
    ]
    measured = min(r.median for r in eligible)  # the fastest measured, where the estimates rank another first
    fastest = [r for r in close if r.median == measured < best.median]
    taken, extra = {r.label for r in chosen}, []
    for r in others + fastest + close:
        if r.label not in taken:
            taken.add(r.label)
            extra.append(r)
    chosen += extra[: settings.k - 1]
    return chosen if len(chosen) > 1 else []


WARM_COMPILE = 0.3  # a later process of a compiled config compiles at most this share of what its trial compiled


def finalist(record: TrialRecord, warm: bool = False) -> Finalist:
    """What the search measured of a finalist: step time and noise, and what a run of it will cost beyond its steps:
    its trial's start-up, less, where its compilation is in this worker's cache (`warm`), what a later process reads
    back from it (a fresh process of a compiled config compiled 0.11-0.28 of its first's time, BENCHMARKS.md; a round
    planned with the trial's cold compilation bought a fraction of the rounds its budget pays for)."""
    steps = record.step_times
    cv = statistics.stdev(steps) / statistics.fmean(steps) if len(steps) > 1 else 0.0
    fixed = max(0.0, record.gpu_seconds - sum(steps) - sum(record.warmup_times))
    fixed -= (1 - WARM_COMPILE) * min(record.compile_s, fixed) if warm else 0.0
    return Finalist(record.label, record.median, cv, fixed)


TRANSIENT = 1.25  # an early step this much slower than every steady step is still warming up


def transient(record: TrialRecord) -> int:
    """The steps a fresh process of this config needs before its steps are steady, as its trial showed: up to and
    including the last early step that compiled or ran well over every steady one (at least the first, which carries
    one-off costs). A compiled config's CUDA graphs are recorded in the steps after it compiled: counted by number,
    those steps stay out of the round's figures."""
    limit = TRANSIENT * max(record.step_times, default=0.0)
    left_out = set(record.warmup_left_out)
    numbers = (n for n in range(1, len(record.warmup_times) + len(left_out) + 1) if n not in left_out)
    slow = [n for n, seconds in zip(numbers, record.warmup_times, strict=False) if seconds > limit]
    return max([1, *left_out, *slow])


Run = Callable[[TrialRecord, int, int, int], tuple[float | None, float]]  # (finalist, round, warm-up, steps)


def minimum_claim_s(pair: list[Finalist], warmup: int) -> float:
    """Device seconds of MIN_ROUNDS rounds of the best and the baseline at MIN_STEPS steady steps each (with the
    margin the rounds are planned with, and a little more so that the plan's own sum never falls short of it)."""
    run_s = sum(f.fixed_s + (warmup + MIN_STEPS) * f.step_s for f in pair)
    return MIN_ROUNDS * COST_MARGIN * run_s * 1.001 + 1.0


def _going_on(
    stopped: ConfirmationRecord | None, names: list[str], warmup: int, settings: RoundSettings
) -> ConfirmationRound | None:
    """The state of a stopped round that this one goes on from (said), or None where there is none, or where it
    planned other finalists or another warm-up (its runs would pair with nothing planned now: it runs again)."""
    if stopped is None:
        return None
    where = f"after {stopped.runs} run(s) in {stopped.rounds} round(s)" if stopped.runs else "in its first run"
    said = f"[study] confirmation round: the last one stopped {where}"
    if stopped.state.finalists != names or stopped.warmup != warmup:
        print(f"{said}; it planned other finalists or another warm-up, so it runs again", flush=True)
        return None
    print(f"{said}; it goes on from there", flush=True)
    return dataclasses.replace(stopped.state, confidence=settings.confidence, tolerance=settings.tolerance)


def run_round(
    chosen: list[TrialRecord],
    baseline: str | None,
    settings: RoundSettings,
    spent_s: float,
    run: Run,
    save: Callable[[ConfirmationRecord], None] = lambda record: None,
    stopped: ConfirmationRecord | None = None,
    warm: Callable[[TrialRecord], bool] = lambda record: False,
) -> ConfirmationRecord:
    """Plan the round from what the search measured, run it, and return its record; `save` gets the record so far
    (unfinished) after every run, so a study stopped during the round keeps what it measured. `stopped`: the record
    of this round that a stop left unfinished; where it planned the same finalists and warm-up, the round goes on
    from it, and no run it kept is measured again. Every run of the round has the same warm-up: the longest
    transient any finalist's trial showed. `warm`: whether a finalist's compilation is in the cache its runs use."""
    budget = settings.budget(spent_s)
    warmup = max(transient(r) for r in chosen)
    facts = [finalist(r, warm(r)) for r in chosen]
    claimed = baseline is not None and len(chosen) > 1 and chosen[1].label == baseline
    if claimed:
        claim = minimum_claim_s(facts[:2], warmup)
        if claim > budget:  # the share buys less than the answer's claim: the claim alone, beyond the share
            facts, budget = facts[:2], claim
    kept, plan = fit(facts, budget, MIN_STEPS, max(MIN_STEPS, settings.max_steps), warmup)
    names = [f.name for f in kept]
    by_label = {r.label: r for r in chosen}
    state = _going_on(stopped, names, warmup, settings) or ConfirmationRound(
        names, settings.confidence, settings.tolerance
    )
    left_out = tuple(r.label for r in chosen if r.label not in names)
    record = ConfirmationRecord(
        state, warmup, plan.steps, budget, baseline if baseline in names else None, left_out, finished=False
    )
    if plan.affordable_rounds < 2 and not claimed:
        print(f"[study] confirmation round: not run, {budget:.0f} s buy fewer than two rounds", flush=True)
        return dataclasses.replace(record, finished=True)  # one round pairs nothing
    least = f"at least {MIN_ROUNDS} rounds " + ("of the answer and the baseline" if claimed else "if it allows")
    print(
        f"[study] confirmation round: {', '.join(names)}; runs of {warmup} + {plan.steps} steps, budget {budget:.0f} s "
        f"({settings.governs(spent_s, budget)}), {least}",
        flush=True,
    )
    save(record)  # begun: a study stopped in its first run says so, and goes on with the same plan
    measure = lambda name, number, steps: run(by_label[name], number, warmup, steps)  # noqa: E731
    pair = (chosen[0].label, baseline) if claimed else ()
    state.run(measure, plan, settings.max_rounds, after_run=lambda: save(record), claim=pair)
    return dataclasses.replace(record, finished=True)
