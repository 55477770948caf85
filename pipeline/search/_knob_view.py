"""The model sampler's view of a running study (`search._sampler.SearchView`): the space's points, whether the memory
predictor says one fits, the screening design's centre (the probes' best guess: the prior's first), and the step
time a trial's own job measured."""

from __future__ import annotations

from typing import Any

from optuna.trial import FrozenTrial

from pipeline.search import _prior as prior
from pipeline.search import _trials as trials
from pipeline.search._calibration import ATTR as CALIBRATION
from pipeline.search._opening import StudyContext
from pipeline.search._space import choice_of
from pipeline.summaries import Interval


class StudyView:
    def __init__(self, ctx: StudyContext) -> None:
        self.ctx = ctx
        self.space = {key: [choice_of(v) for v in values] for key, values in ctx.space.items()}
        self._by_key = {tuple(sorted(c.params.items())): c for c in ctx.valid}
        self._centre: dict[str, Any] | None = None
        self._margin_at: tuple[int, float] | None = None  # (the trials decided when it was read, the margin)

    def points(self) -> list[dict[str, Any]]:
        return [c.params for c in self.ctx.valid]

    def fits(self, params: dict[str, Any]) -> bool:
        candidate = self._by_key.get(tuple(sorted(params.items())))
        return candidate is not None and prior.fits(self.ctx, candidate, self._margin())

    def _margin(self) -> float:
        """The study's skip margin (`trials.skip_margin`), read again once another trial is decided."""
        count = len(self.ctx.study.get_trials(deepcopy=False, states=trials.DONE))
        if self._margin_at is None or self._margin_at[0] != count:
            self._margin_at = (count, trials.skip_margin(self.ctx.study, self.ctx.cfg.optimize.skip_margin))
        return self._margin_at[1]

    def centre(self) -> dict[str, Any] | None:
        """The prior's first candidate, once the calibration is there (every worker derives the same)."""
        if self._centre is None and CALIBRATION in self.ctx.study.user_attrs:
            ordered = prior.ordered(self.ctx, self.ctx.calibration, self.ctx.valid)
            self._centre = ordered[0].params if ordered else None
        return self._centre

    def seconds(self, trial: FrozenTrial) -> float | None:
        return trials.measured_seconds(trials.TrialRecord.of(trial))

    def spread(self, trial: FrozenTrial) -> Interval | None:
        return trials.measured_spread(trials.TrialRecord.of(trial))
