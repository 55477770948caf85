"""Workers sharing one study, on one machine or many: who owns a trial, which configs are taken, who claimed one
first, who calibrates, and what a dead worker left behind.

A worker writes its owner (`host:pid:start`) on every trial it asks for and beats a heartbeat on it while it works,
and claims a config (its identity, `config_id`) on the trial before measuring it. A trial is RUNNING from the
instant it is asked for, before its worker has written its owner: such a trial is young, not stale, until it has
been RUNNING for `liveness.GRACE_S` without an owner (the asking worker died in that instant). Another worker treats a
config as taken when it is decided (COMPLETE or PRUNED) or claimed by a live worker; if two claim one config in the
same instant, the lower trial number keeps it, and so it does when claims made at once would overrun the budget
(`within_budget`). A worker on this host is alive while its process is; one on another host while its heartbeat is
fresh (`liveness.GRACE_S`), so a live remote worker is never declared dead. A trial whose
worker is gone is stale: the next worker to look marks it FAIL. A worker whose own trial was closed that way (a live
worker taken for dead, its heartbeat late on a busy machine) skips it (`closed_elsewhere`): the config stays open.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from datetime import datetime

import optuna
from optuna.exceptions import DuplicatedStudyError, UpdateFinishedTrialError
from optuna.trial import FrozenTrial, TrialState

from pipeline import whole
from pipeline.adapters import optuna_storage
from pipeline.liveness import GRACE_S, HEARTBEAT_S, Owner
from pipeline.search._trials import CONFIG_ID, OWNER, is_decided

HEARTBEAT = "heartbeat"


def live(attrs: dict) -> bool:
    """Whether the worker named in a trial's (or lock study's) attributes is alive."""
    owner = Owner.parse(attrs.get(OWNER, ""))
    return owner is not None and owner.alive(attrs.get(HEARTBEAT))


def _trial_live(trial: FrozenTrial) -> bool:
    """Whether a RUNNING trial's worker is alive: by its owner, or, before the owner is written, by its age."""
    if OWNER in trial.user_attrs:
        return live(trial.user_attrs)
    started = trial.datetime_start
    return started is not None and (datetime.now() - started).total_seconds() < GRACE_S


def closed_elsewhere(study: optuna.Study, trial: optuna.Trial) -> bool:
    """Whether this worker's trial was finished by another worker (which took this one for dead)."""
    return optuna_storage.stored_state(study, trial).is_finished()


def _running(study: optuna.Study) -> list[FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))


def decided_configs(study: optuna.Study) -> dict[str, FrozenTrial]:
    """Decided trials by config identity (measured, ruled out, or failed as a job), the first of each."""
    found: dict[str, FrozenTrial] = {}
    for t in study.get_trials(deepcopy=False):
        if is_decided(t) and CONFIG_ID in t.user_attrs:
            found.setdefault(t.user_attrs[CONFIG_ID], t)
    return found


def taken(study: optuna.Study, current: int) -> set[str]:
    """Configs decided, or being measured right now by another live worker."""
    ids = set(decided_configs(study))
    for trial in _running(study):
        if trial.number != current and CONFIG_ID in trial.user_attrs and live(trial.user_attrs):
            ids.add(trial.user_attrs[CONFIG_ID])
    return ids


def claimed_earlier(study: optuna.Study, number: int, config_id: str) -> bool:
    return any(
        t.number < number and t.user_attrs.get(CONFIG_ID) == config_id and live(t.user_attrs) for t in _running(study)
    )


def claimed(study: optuna.Study) -> set[str]:
    """Configs claimed by live workers' RUNNING trials (being measured, or about to be)."""
    return {t.user_attrs[CONFIG_ID] for t in _running(study) if CONFIG_ID in t.user_attrs and live(t.user_attrs)}


def within_budget(
    study: optuna.Study, number: int, config_id: str, space: set[str], budget: int, poll_s: float = 0.1
) -> bool:
    """Whether trial `number`'s claim of `config_id` (written already) fits a budget of `budget` configs of `space`:
    the configs decided and those claimed on live trials asked before it leave room for it. The storage numbers the
    trials one by one, so every worker judges the same order and of several claims made at once the earliest win;
    a claim is never judged against a later trial's. An earlier live trial whose claim is not written yet is waited
    for (it is about to claim, or to close as the repeat of a decided config), so none is judged without it."""
    if config_id not in space:
        return True  # the baseline beside the space: no trial of the budget
    while True:
        earlier = [t for t in _running(study) if t.number < number and _trial_live(t)]
        if all(CONFIG_ID in t.user_attrs for t in earlier):
            held = set(decided_configs(study)) | {t.user_attrs[CONFIG_ID] for t in earlier}
            return len((held & space) - {config_id}) < budget
        time.sleep(poll_s)


def fail_stale(study: optuna.Study) -> list[str]:
    """Mark FAIL the trials a dead worker left RUNNING; return their owners, one per trial (another worker may
    have failed one first)."""
    owners = []
    for trial in _running(study):
        if not _trial_live(trial):
            with contextlib.suppress(UpdateFinishedTrialError):
                optuna_storage.fail_trial(study, trial)
                owners.append(trial.user_attrs.get(OWNER, ""))
    return owners


def release_own(study: optuna.Study) -> None:
    """This worker is stopping: its unfinished trials are not decided and may run again."""
    me = str(Owner.current())
    for trial in _running(study):
        if trial.user_attrs.get(OWNER) == me:
            optuna_storage.fail_trial(study, trial)


def own(trial: optuna.Trial) -> None:
    trial.set_user_attr(OWNER, str(Owner.current()))
    trial.set_user_attr(HEARTBEAT, time.time())


def ask_owned(study: optuna.Study) -> optuna.Trial:
    """A new trial with this worker's owner written, a Ctrl-C held until both are done: the trial is RUNNING from
    the instant the storage creates it, and the sampler then runs inside `ask`; cut there, the trial had no owner,
    so neither this worker's `release_own` nor the next command (until `GRACE_S` lapsed) could tell it was dead."""
    with whole.call():
        trial = study.ask()
        with contextlib.suppress(UpdateFinishedTrialError):  # closed by another worker in that instant (taken for
            own(trial)  # dead while ownerless): the caller's next write to it says so (`closed_elsewhere`)
    return trial


@contextlib.contextmanager
def beating(set_attr, interval_s: float = HEARTBEAT_S) -> Iterator[None]:
    """Refresh a heartbeat attribute (`set_attr(HEARTBEAT, now)`) every `interval_s` while the block runs."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(interval_s):
            with contextlib.suppress(Exception):  # a storage hiccup: the next beat tries again
                set_attr(HEARTBEAT, time.time())

    thread = threading.Thread(target=beat, name="trial-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def trial_heartbeat(study: optuna.Study, trial: optuna.Trial):
    """The heartbeat of one trial, beaten from a thread (it writes through the storage, not the Trial object)."""
    return beating(optuna_storage.user_attr_writer(study, trial))


@contextlib.contextmanager
def claim(study: optuna.Study, what: str, poll_s: float = 2.0) -> Iterator[bool]:
    """Exactly one worker does `what` for a study (its calibration, its confirmation round), and stores the result
    as the study's user attribute `what`. The one that creates the lock study `<name>:<what>` does it (creating a
    study of a taken name fails in the storage itself, on any RDB): it gets True and beats a heartbeat on the lock
    meanwhile. The others wait until the attribute is stored (False), or until the worker doing it is gone, when the
    lock is removed and taken again. A lock may vanish between a failed create and the look at it (its holder
    finished), and a holder may finish between the first look at the attribute and the create: both look again.
    The lock goes through the study's own storage: a storage opened by URL on every look is an engine and a pool of
    connections each, which a waiter polling every `poll_s` piled up until PostgreSQL refused more clients."""
    storage = optuna_storage.storage_of(study)
    lock_name = f"{study.study_name}:{what}"
    ownerless = _Ownerless()
    while what not in study.user_attrs:
        try:
            lock = optuna.create_study(study_name=lock_name, storage=storage)
        except DuplicatedStudyError:
            try:
                attrs = optuna.load_study(study_name=lock_name, storage=storage).user_attrs
            except KeyError:  # removed by its holder since the create failed: look at the attribute again
                continue
            if ownerless.lapsed(attrs) or (OWNER in attrs and not live(attrs)):
                with contextlib.suppress(KeyError):
                    optuna.delete_study(study_name=lock_name, storage=storage)
            time.sleep(poll_s)
            continue
        if what in study.user_attrs:  # its holder stored it and removed the lock after this worker's first look
            with contextlib.suppress(KeyError):
                optuna.delete_study(study_name=lock_name, storage=storage)
            break
        try:  # the lock is removed however this ends, even where naming its owner failed
            lock.set_user_attr(OWNER, str(Owner.current()))
            lock.set_user_attr(HEARTBEAT, time.time())
            with beating(lock.set_user_attr):
                yield True
        finally:
            with contextlib.suppress(KeyError):
                optuna.delete_study(study_name=lock_name, storage=storage)  # done, or failed: no one waits on it
        return
    yield False


class _Ownerless:
    """A lock seen without an owner: its creator is about to write one, or died in that instant. A lock study has
    no start time of its own, so the waiter counts from when it first saw it ownerless."""

    def __init__(self) -> None:
        self.since: float | None = None

    def lapsed(self, attrs: dict) -> bool:
        if OWNER in attrs:
            self.since = None
            return False
        now = time.monotonic()
        self.since = now if self.since is None else self.since
        return now - self.since > GRACE_S
