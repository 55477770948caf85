"""optuna-dashboard's JSON of a trial (`optuna_dashboard._serializer.serialize_frozen_trial`), as its own API
answers it: the study pages (`answer.study_pages`) answer best trials in the same form. The package exposes no
public serializer."""

from __future__ import annotations

from typing import Any

from optuna.trial import FrozenTrial
from optuna_dashboard._serializer import serialize_frozen_trial


def serialize_trial(study_id: int, trial: FrozenTrial, study_system_attrs: dict[str, Any]) -> dict[str, Any]:
    """A trial as the dashboard's API serialises it."""
    return serialize_frozen_trial(study_id, trial, study_system_attrs)
