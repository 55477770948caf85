"""Optuna's storage behind a study, reached through `Study._storage` and `Trial._trial_id` / `FrozenTrial._trial_id`
(Optuna 5 keeps no public handle on either). The study's workers write through it what the public `Study` and
`Trial` cannot: a trial's state as the storage holds it now, a trial of another (dead) worker marked FAIL, a system
attribute, a heartbeat written from a thread, and the lock studies made in the same storage; and it reads a trial's
constraints where Optuna's samplers keep them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import optuna
from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial, TrialState


def storage_of(study: optuna.Study) -> BaseStorage:
    """The study's own storage object (`study._storage`): a lock study made in it shares its engine and connection
    pool, where one opened by URL on every look would pile up connections until PostgreSQL refused more."""
    return study._storage


def stored_state(study: optuna.Study, trial: optuna.Trial) -> TrialState:
    """The trial's state as the storage holds it now (`_storage.get_trial(_trial_id)`): another worker may have
    finished it, which the `Trial` object, holding no state, cannot say."""
    return study._storage.get_trial(trial._trial_id).state


def fail_trial(study: optuna.Study, trial: optuna.Trial | FrozenTrial) -> None:
    """Mark a RUNNING trial FAIL (`_storage.set_trial_state_values`), also one another worker left: `Study.tell`
    takes only a trial this process may tell and refuses one another worker holds. Raises Optuna's
    `UpdateFinishedTrialError` where the trial is finished already (another worker got there first)."""
    study._storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)


def set_system_attr(study: optuna.Study, trial: optuna.Trial, name: str, value: Any) -> None:
    """A trial's system attribute (`_storage.set_trial_system_attr`): where Optuna 5 keeps a constraint
    (`constraints`), as optuna-dashboard reads it; `Trial.set_system_attr` is gone from the public API."""
    study._storage.set_trial_system_attr(trial._trial_id, name, value)


def user_attr_writer(study: optuna.Study, trial: optuna.Trial) -> Callable[[str, Any], None]:
    """A writer of the trial's user attributes straight to the storage (`_storage.set_trial_user_attr`), for a
    thread beating its heartbeat while the trial runs: it holds the storage and the trial's id, not the `Trial`."""
    storage, trial_id = study._storage, trial._trial_id
    return lambda key, value: storage.set_trial_user_attr(trial_id, key, value)


def constraints(trial: FrozenTrial) -> list[float]:
    """A trial's constraint values as Optuna's samplers keep them in its system attributes, in either form: Optuna 5's
    `constraints:<name>`, or the older list under `constraints` (`optuna.samplers._base._CONSTRAINTS_KEY`)."""
    named = [v for k, v in trial.system_attrs.items() if k.startswith("constraints:")]
    return named or list(trial.system_attrs.get("constraints", []))
