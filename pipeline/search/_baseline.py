"""The study's baseline: the command line's config as it runs, measured in full so that the answer's speed-up is a
measured ratio against what the user would have run.

It is the base config with what it resolves at run time filled in (a dtype of `auto` is the one the probes ran
in), compared with the space by identity: where it is a point of the space, its trial is that point's (queued with
its params, so the sampler learns from it); where it is not (a dtype the space leaves out, a padding it does not
search), it is measured beside the space, labelled so, and counts against no budget. Only `optimize.baseline=false`
removes it. It is never skipped by prediction nor stopped for being slow, and it runs uncapped: a baseline over the
cap is still measured for its speed (and is no answer), unless the device itself cannot hold it.
"""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf
from optuna.trial import TrialState

from pipeline import knobs
from pipeline.config.errors import ConfigError
from pipeline.config.knobs import compute_dtype
from pipeline.search import _trials as trials
from pipeline.search._opening import StudyContext
from pipeline.search._space import Candidate, make_candidate
from pipeline.search._trials import Role


def resolved_values(ctx: StudyContext) -> tuple[tuple[str, Any], ...]:
    """The base config's value of every searched key, as it runs: a searched dtype given as `auto` is the one it
    resolves to (an unsearched one stays `auto`, as in every candidate)."""
    values = []
    precision = knobs.role(knobs.KnobRole.DTYPE).key
    for key in ctx.space:
        value = OmegaConf.select(ctx.cfg, key)
        values.append((key, _dtype(ctx, value) if key == precision else value))
    return tuple(values)


def _dtype(ctx: StudyContext, value: str) -> str:
    if not knobs.role(knobs.KnobRole.DTYPE).is_auto(value):
        return value
    return ctx.placement_dtype or compute_dtype(ctx.cfg.train, ctx.cfg.gpu) or value


def candidate(ctx: StudyContext) -> Candidate | None:
    """The baseline's candidate: the space's point of the same identity, or one beside the space; None when
    `optimize.baseline=false`, or when its resolved values make no valid config (it then has none)."""
    if not ctx.cfg.optimize.baseline:
        return None
    values = resolved_values(ctx)
    try:
        made = make_candidate(ctx.cfg, values)
    except ConfigError:
        return None
    found = ctx.by_id.get(made.config_id)
    if found is not None:
        return found
    ctx.extra[made.config_id] = made
    return made


def in_space(ctx: StudyContext, base: Candidate) -> bool:
    return base.config_id in ctx.by_id


def queue(ctx: StudyContext, base: Candidate | None, again: bool = False) -> None:
    """Queue the baseline as the study's first trial (once: the calibrating worker does it, unless `again`): with its
    params where it is a point of the space, else as a trial of its own that `is_outside` tells the loop to measure."""
    if base is None:
        return
    if in_space(ctx, base):
        ctx.study.enqueue_trial(base.params, user_attrs={trials.ROLE: Role.BASELINE}, skip_if_exists=not again)
    else:
        ctx.study.enqueue_trial({}, user_attrs={trials.ROLE: Role.BASELINE, trials.OUTSIDE: True})


def requeue(ctx: StudyContext, base: Candidate | None) -> None:
    """A baseline trial the study was stopped during (failed, not decided) is queued again with its role, so the
    resumed study still measures its baseline in full (Optuna's `skip_if_exists` would see the failed one). One
    waiting, or being measured by a live worker (a dead one's were failed before), is left to that one."""
    if base is None:
        return
    marked = trials.baseline_trials(ctx.study)
    waiting = any(t.user_attrs.get(trials.ROLE) == Role.BASELINE for t in ctx.study.get_trials(states=_PENDING))
    if marked and not waiting and not any(r.decided for r in marked):
        queue(ctx, base, again=True)


def is_outside(trial) -> bool:
    """Whether an asked trial is the baseline measured beside the space."""
    return bool(trial.user_attrs.get(trials.OUTSIDE))


_PENDING = (TrialState.WAITING, TrialState.RUNNING)
