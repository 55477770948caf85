"""What a study holds, by any worker, once its trials are read back: its trials, its baseline, the eligible
configs, its calibration and its confirmation round (finished, or what a stopped one had measured)."""

from __future__ import annotations

from dataclasses import dataclass, field

import optuna
from optuna.trial import TrialState

from pipeline.search import _trials as trials
from pipeline.search._calibration import ATTR as CALIBRATION
from pipeline.search._calibration import Calibration, seconds_so_far
from pipeline.search._confirmation import ATTR as CONFIRMATION
from pipeline.search._confirmation import PARTIAL as CONFIRMATION_SO_FAR
from pipeline.search._confirmation import ConfirmationRecord
from pipeline.search._trials import TrialRecord


@dataclass(frozen=True)
class Decided:
    """What a study holds, by any worker: its trials, its baseline, its calibration and confirmation round."""

    records: list[TrialRecord]
    baseline: TrialRecord | None  # the baseline measured in full
    eligible: list[TrialRecord]
    calibration: Calibration | None
    confirmation: ConfirmationRecord | None
    baseline_tried: list[TrialRecord] = field(default_factory=list)  # every ended trial of the baseline
    probes_s: float = 0.0  # the probes' device seconds while the calibration is not stored whole

    @classmethod
    def of(cls, study: optuna.Study, max_loss_dev: float) -> Decided:
        records = [r for r in trials.records(study) if r.label is not None and r.state != TrialState.RUNNING]
        attrs = study.user_attrs
        return cls(
            records,
            trials.baseline(study),
            trials.eligible(study, max_loss_dev),
            Calibration.of(attrs[CALIBRATION]) if CALIBRATION in attrs else None,
            _confirmation(attrs),
            trials.baseline_trials(study),
            0.0 if CALIBRATION in attrs else seconds_so_far(attrs),
        )

    @property
    def best(self) -> TrialRecord | None:
        """The fastest eligible trial in the search, or the confirmation round's winner where it found another; a
        finalist that failed in the round (out of memory under the cap in another process) is not the answer, and
        where the search's best failed there, the answer is the fastest in the search of those left."""
        failed = set(self.confirmation.state.failed) if self.confirmation is not None else set()
        left = [r for r in self.eligible if r.label not in failed]
        if not left:
            return None
        if self.confirmation is not None:
            winner = self.confirmation.state.winner(among={r.label for r in left})
            return next((r for r in left if r.label == winner), None) or min(left, key=lambda r: r.median)
        return min(left, key=lambda r: r.median)

    @property
    def gpu_seconds(self) -> float:
        seconds = sum(r.gpu_seconds for r in self.records)  # a trial interrupted too: not decided, but it ran
        seconds += self.calibration.gpu_seconds if self.calibration else self.probes_s
        return seconds + (self.confirmation.state.seconds if self.confirmation else 0.0)


def _confirmation(attrs: dict) -> ConfirmationRecord | None:
    """The finished round's record, or what a round the study stopped during had measured, or None."""
    for key in (CONFIRMATION, CONFIRMATION_SO_FAR):
        if key in attrs:
            return ConfirmationRecord.of(attrs[key])
    return None
