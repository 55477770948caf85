"""The study's samplers: Optuna's TPE and random, brute force (every valid config once), and `model`, which combines
what each knob gains.

`model` (`KnobModelSampler`) screens first: the probes' best guess (the centre), then each value of each knob that no
config has held yet, moved from the fastest config measured so far (adaptive one-factor-at-a-time: a knob that only
pays beside another, such as a compiled loss beside compiled layers, is tried on top of what already won; a value
that cannot run alone is moved with the fewest other keys that make it valid). A config faster by no more than
`tolerance` (the study's tie tolerance: one process's noise), or whose steps' interval overlaps the fastest's, does not
move the anchor away from one nearer the centre, so a change that bought nothing decided is not carried into every
later trial. Then it fits the knob model (`search._knob_model`) to every config measured so far and proposes the
untried config with the best optimistic step time (`optimism` standard deviations under the predicted mean) that the
memory predictor says fits. It is an Optuna sampler, so the study stays an Optuna study: its trials, storage, workers
and dashboard are as with TPE.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any, Protocol

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import FrozenTrial, TrialState

from pipeline.config.choices import Sampler
from pipeline.config.schema import OptimizeConfig
from pipeline.search import _knob_model as knob_model
from pipeline.search._screening import Params, Tried, anchor, key, next_screen, together
from pipeline.summaries import Interval

OPTIMISM = 1.0  # standard deviations under the predicted mean that a proposal is judged by
TOLERANCE = OptimizeConfig.tie_tolerance  # the study's default: a gain within it does not move the screening's anchor


class SearchView(Protocol):
    """What the model sampler needs of a study: its space (key -> Optuna choices), its valid points, whether the
    memory predictor says a point fits, the screening design's centre, and a trial's measured step time and the
    interval of its median."""

    space: dict[str, list[Any]]

    def points(self) -> list[Params]: ...

    def fits(self, params: Params) -> bool: ...

    def centre(self) -> Params | None: ...

    def seconds(self, trial: FrozenTrial) -> float | None: ...

    def spread(self, trial: FrozenTrial) -> Interval | None: ...


def propose(
    view: SearchView,
    observed: Sequence[tuple[Params, float]],
    taken: set[tuple],
    rng: random.Random,
    optimism: float = OPTIMISM,
    tolerance: float = TOLERANCE,
    spreads: Sequence[Interval | None] = (),
    tried: Sequence[Tried] | None = None,
) -> Params | None:
    """The next config: the screening design's next point, moved from the fastest config measured so far (`anchor`;
    `spreads` are the observations' intervals); then the winners tried together (`together`; `tried`: every config
    taken in order, those that measured nothing too; by default the observations); then the untried fitting point
    whose optimistic predicted step time is lowest (ties drawn); None when every point is taken."""
    points = view.points()
    untried = [p for p in points if key(p) not in taken]
    if not untried:
        return None
    centre = view.centre()
    model = knob_model.fit(knob_model.Encoding.of(view.space, centre), observed) if observed else None
    if centre is not None:
        start = anchor(centre, observed, tolerance, spreads)
        estimate = model.seconds if model is not None else (lambda p: 0.0)
        point = next_screen(centre, start, points, [dict(k) for k in taken], view.fits, estimate)
        if tried is None:
            tried = [Tried(p, t, spread) for (p, t), spread in zip(observed, _aligned(spreads, observed), strict=True)]
        point = point or together(centre, tried, tolerance, points, taken, view.fits)
        if point is not None:
            return point
    fitting = [p for p in untried if view.fits(p)]
    pool = fitting or untried  # nothing predicted to fit: the study skips it by prediction, at no device time
    if model is None:
        return rng.choice(pool)
    scored = [(model.optimistic(p, optimism), rng.random(), i) for i, p in enumerate(pool)]
    return pool[min(scored)[2]]


def _aligned(spreads: Sequence[Interval | None], observed: Sequence) -> list[Interval | None]:
    return list(spreads) + [None] * (len(observed) - len(spreads))


class ViewSampler(optuna.samplers.BaseSampler):
    """A sampler that proposes from the study's view (`SearchView`): `bind` gives it the view once the study is open
    (the view needs the study itself); unbound, or for a parameter outside the space, it samples at random."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.view: SearchView | None = None
        self._fallback = optuna.samplers.RandomSampler(seed=seed)

    def bind(self, view: SearchView) -> None:
        self.view = view

    def infer_relative_search_space(self, study, trial) -> dict[str, CategoricalDistribution]:
        if self.view is None:
            return {}
        return {name: CategoricalDistribution(choices) for name, choices in self.view.space.items()}

    def sample_relative(self, study, trial, search_space) -> dict[str, Any]:
        if not search_space or self.view is None:
            return {}
        return self.propose(study.get_trials(deepcopy=False), trial) or {}

    def propose(self, trials: Sequence[FrozenTrial], trial: FrozenTrial) -> Params | None:
        raise NotImplementedError

    def history(self, trials: Sequence[FrozenTrial]) -> tuple[list[Tried], set[tuple]]:
        """Every config taken (measured, decided, or being measured now), in the order taken, with its measured step
        seconds and their interval where it measured any; and their keys."""
        names = set(self.view.space)
        tried, taken = [], set()
        for trial in trials:
            params = {k: v for k, v in trial.params.items() if k in names}
            if set(params) != names or trial.state == TrialState.WAITING:
                continue
            taken.add(key(params))
            seconds = self.view.seconds(trial)
            if seconds is not None and math.isfinite(seconds) and seconds > 0:
                tried.append(Tried(params, seconds, self.view.spread(trial)))
            else:
                tried.append(Tried(params))
        return tried, taken

    def sample_independent(self, study, trial, param_name, param_distribution) -> Any:
        return self._fallback.sample_independent(study, trial, param_name, param_distribution)

    def reseed_rng(self) -> None:
        self._fallback.reseed_rng()


class KnobModelSampler(ViewSampler):
    """`propose` (the screening, then the knob model's proposals) as an Optuna sampler."""

    def __init__(self, seed: int = 0, optimism: float = OPTIMISM, tolerance: float = TOLERANCE) -> None:
        super().__init__(seed)
        self.optimism, self.tolerance = optimism, tolerance

    def propose(self, trials: Sequence[FrozenTrial], trial: FrozenTrial) -> Params | None:
        tried, taken = self.history(trials)
        measured = [t for t in tried if t.seconds is not None]
        observed, spreads = [(t.params, t.seconds) for t in measured], [t.spread for t in measured]
        rng = random.Random(self.seed * 1_000_003 + trial.number)
        return propose(self.view, observed, taken, rng, self.optimism, self.tolerance, spreads, tried)


class BruteForce(ViewSampler):
    """Every valid config of the space once, in the space's order: the first that no trial has taken. (Optuna's
    BruteForceSampler walks the product of the keys' values, invalid combinations included, and fails once a trial
    without them, the baseline outside the space, is in the study.)"""

    def propose(self, trials: Sequence[FrozenTrial], trial: FrozenTrial) -> Params | None:
        _, taken = self.history(trials)
        return next((p for p in self.view.points() if key(p) not in taken), None)


def make_sampler(name: str, seed: int, tolerance: float = TOLERANCE) -> optuna.samplers.BaseSampler:
    """The study's sampler by name; `tolerance` is the study's tie tolerance, which the model sampler's screening
    reads as noise."""
    if name == Sampler.MODEL:
        return KnobModelSampler(seed, tolerance=tolerance)
    if name == Sampler.RANDOM:
        return optuna.samplers.RandomSampler(seed=seed)
    if name == Sampler.BRUTEFORCE:
        return BruteForce(seed=seed)
    if name == Sampler.GP:
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=4)
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=4)
