"""Workers sharing one study: which configs are taken, who claimed one first, and what a killed worker left behind.

A worker writes its pid (`worker_pid`) on every trial and MLflow run it opens, and claims a config (its identity,
`config_id`) on the trial before measuring it. Another worker treats a config as taken when it is decided (COMPLETE
or PRUNED) or claimed by a live worker; if two claim one config in the same instant, the lower trial number keeps it. A trial or
run whose worker is gone is stale: the next worker to start marks it FAIL / FAILED.
"""

from __future__ import annotations

import os

import optuna
from optuna.trial import TrialState

from pipeline.jobs.watchdog import alive
from pipeline.search.trials import CONFIG_ID
from pipeline.tracking import runs
from pipeline.tracking.store import Tracker

DONE = (TrialState.COMPLETE, TrialState.PRUNED)


def _running(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))


def decided(study: optuna.Study) -> dict[str, optuna.trial.FrozenTrial]:
    """Decided trials by config identity."""
    return {
        t.user_attrs[CONFIG_ID]: t for t in study.get_trials(deepcopy=False, states=DONE) if CONFIG_ID in t.user_attrs
    }


def taken(study: optuna.Study, current: int) -> set[str]:
    """Configs decided, or being measured right now by another live worker."""
    ids = set(decided(study))
    for trial in _running(study):
        if trial.number != current and CONFIG_ID in trial.user_attrs and alive(trial.user_attrs.get("worker_pid")):
            ids.add(trial.user_attrs[CONFIG_ID])
    return ids


def claimed_earlier(study: optuna.Study, number: int, config_id: str) -> bool:
    return any(
        t.number < number and t.user_attrs.get(CONFIG_ID) == config_id and alive(t.user_attrs.get("worker_pid"))
        for t in _running(study)
    )


def fail_stale(study: optuna.Study, tracker: Tracker, study_name: str) -> int:
    """Mark FAIL the trials, and FAILED the MLflow runs, that a dead worker left RUNNING; return how many trials."""
    stale = 0
    for trial in _running(study):
        if not alive(trial.user_attrs.get("worker_pid")):
            study._storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
            stale += 1
    for run in tracker.search(f"tags.{runs.STUDY} = {runs.quoted(study_name)} and attributes.status = 'RUNNING'"):
        pid = run.data.tags.get("worker_pid")
        if pid and not alive(int(pid)):
            runs.fail(tracker, run.info.run_id, "worker killed")
    return stale


def release_own(study: optuna.Study) -> None:
    """This worker is stopping: its unfinished trials are not decided and may run again."""
    for trial in _running(study):
        if trial.user_attrs.get("worker_pid") == os.getpid():
            study._storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
