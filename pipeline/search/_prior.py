"""The study's prior over its candidates: which to measure first, from what the probes measured, so that a budget
smaller than the space still decides the configs most likely to be the fastest that fits.

The probes time a micro-batch at the smallest and largest micro-batch (and at the other checkpointing setting where
that is searched), so each candidate has an estimated step time (`Calibration.step_estimate`: larger micro-batches
and no checkpointing are faster where the probes say so), and the memory predictor says whether it fits. Fitting
candidates come first, fastest estimate first; knobs the probes do not see (dtype, compilation, padding) keep the
space's order among equals. The first trials are queued in this order; the sampler proposes the rest. The answer
names the undecided candidates that the prior expects to be faster than the answer (`Coverage`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pipeline import knobs
from pipeline.config.validate import parse_split
from pipeline.search import _trials as trials
from pipeline.search._calibration import Calibration
from pipeline.search._opening import StudyContext
from pipeline.search._space import Candidate


def estimate(calibration: Calibration, candidate: Candidate) -> float:
    """The candidate's step time as the probes suggest it (inf where they say nothing)."""
    split = parse_split(candidate.split)
    checkpointing = knobs.recomputes(candidate.config)
    found = calibration.step_estimate(split.micro, split.accumulation, checkpointing)
    return math.inf if found is None else found


def fits(ctx: StudyContext, candidate: Candidate, margin: float | None = None) -> bool:
    """Whether the predictor puts the candidate's peak under the cap, within the study's skip margin (the predictor's
    error so far, `trials.skip_margin`, where not given) and what a process of it may keep unused where processes
    were seen to keep none under a cap (`StudyContext.slack_bytes`, `trials.skipped`)."""
    margin = trials.skip_margin(ctx.study, ctx.cfg.optimize.skip_margin) if margin is None else margin
    predicted = ctx.predictor.predict(ctx.knobs(candidate))
    return not trials.skipped(predicted, ctx.cap, margin, ctx.slack_bytes(candidate))


def ordered(ctx: StudyContext, calibration: Calibration, pool: list[Candidate]) -> list[Candidate]:
    """`pool` in the prior's order: fitting first, then by estimated step time, then by the space's order."""
    index = {c.config_id: i for i, c in enumerate(ctx.valid)}
    margin = trials.skip_margin(ctx.study, ctx.cfg.optimize.skip_margin)
    return sorted(pool, key=lambda c: (not fits(ctx, c, margin), estimate(calibration, c), index.get(c.config_id, 0)))


def first_trials(ctx: StudyContext, calibration: Calibration, exclude: set[str]) -> list[Candidate]:
    """The candidates to queue after the baseline: the prior's first half of the budget when the budget is smaller
    than the space (the sampler proposes the rest), else the prior's first, so that slow configs are pruned soon."""
    budget = min(ctx.cfg.optimize.trials, len(ctx.valid))
    count = math.ceil(budget / 2) if budget < len(ctx.valid) else 1
    pool = [c for c in ctx.valid if c.config_id not in exclude]
    return ordered(ctx, calibration, pool)[:count]


@dataclass(frozen=True)
class Coverage:
    """How much of the space the study decided, and the undecided configs the prior expects to be faster than the
    answer (by the same estimate, so that the comparison is like for like)."""

    decided: int
    total: int
    faster_undecided: tuple[str, ...] = ()
    budget: int | None = None  # configs the study decides at most (`optimize.trials`)

    def line(self, stopped: bool = False) -> str:
        """`stopped`: the study was interrupted; where it had decided fewer configs than its budget, the same command
        decides more, with no larger budget."""
        text = f"decided {self.decided} of the space's {self.total} configs"
        if self.decided >= self.total:
            return text
        if self.faster_undecided:
            names = ", ".join(self.faster_undecided[:4]) + (" ..." if len(self.faster_undecided) > 4 else "")
            short = stopped and self.budget is not None and self.decided < self.budget
            more = (
                "the study stopped short of its budget: the same command goes on" if short else "raise optimize.trials"
            )
            return f"{text}; not decided, and expected faster by the probes: {names} ({more})"
        return f"{text}; none of the undecided is expected faster by the probes"


def coverage(ctx: StudyContext, decided_ids: set[str], answer_id: str | None) -> Coverage:
    """The study's coverage of its space, given the configs decided and the answer's."""
    total, done = len(ctx.valid), len(decided_ids & set(ctx.by_id))
    answer = ctx.candidate(answer_id)
    if answer is None or done >= total:
        return Coverage(done, total)
    calibration = ctx.calibration
    bar = estimate(calibration, answer)
    margin = trials.skip_margin(ctx.study, ctx.cfg.optimize.skip_margin)
    faster = [
        c.label
        for c in ordered(ctx, calibration, [c for c in ctx.valid if c.config_id not in decided_ids])
        if fits(ctx, c, margin) and estimate(calibration, c) < bar
    ]
    return Coverage(done, total, tuple(faster), min(ctx.cfg.optimize.trials, total))
