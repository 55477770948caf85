"""Workers sharing one study: the interleavings that once ended a survivor's study, forced on a real Optuna storage
(and, for the driver, a real study of tiny CPU jobs), not waited for with a sleep.

The race seen on a 2-core machine: worker B asks the sampler for a trial (RUNNING from that instant, no owner written
yet), worker A looks for stale trials in that instant, takes the ownerless trial for a dead worker's and marks it FAIL,
and B's next write to its own trial raised `UpdateFinishedTrialError`, which ended B's study.
"""

from __future__ import annotations

import signal
import threading
from concurrent.futures import ThreadPoolExecutor

import optuna
import pytest
from optuna.trial import TrialState
from tqdm import tqdm

from pipeline.answer.conclusion import answered
from pipeline.config.validate import validate
from pipeline.jobs import task
from pipeline.liveness import Owner
from pipeline.records import RunKind
from pipeline.search import _baseline as baseline
from pipeline.search import _workers as workers
from pipeline.search import study
from pipeline.search._trials import CONFIG_ID
from pipeline.search.study import StudyDriver


def _two_handles(tmp_path) -> tuple[optuna.Study, optuna.Study]:
    """One study opened by two workers, each through its own handle on the same sqlite storage."""
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    mine = optuna.create_study(study_name="shared", storage=storage)
    return mine, optuna.load_study(study_name="shared", storage=storage)


def test_a_trial_asked_for_but_not_yet_owned_is_not_a_dead_workers(tmp_path):
    mine, other = _two_handles(tmp_path)
    trial = mine.ask()  # RUNNING, its owner not written yet: the instant the race fell in
    assert workers.fail_stale(other) == []
    assert other.trials[0].state is TrialState.RUNNING
    workers.own(trial)  # the asking worker goes on: its trial is still its own
    assert mine.trials[0].user_attrs["owner"]


def test_a_trial_left_ownerless_past_the_grace_is_stale(tmp_path, monkeypatch):
    """The other side of the rule: a worker that died between asking and owning leaves a trial that does end."""
    mine, other = _two_handles(tmp_path)
    mine.ask()
    monkeypatch.setattr(workers, "GRACE_S", 0.0)  # as if the grace had passed since it was asked for
    assert workers.fail_stale(other) == [""]
    assert other.trials[0].state is TrialState.FAIL


@pytest.fixture
def tiny_study(tmp_path, compose):
    """A study of the tiny model's two splits, its round off, on this test's own store."""
    overrides = [
        "mem_cap=4GiB",
        "batch.effective=2",
        "batch.split=1x2",
        "optimize.trials=2",
        "optimize.confirm=never",
        "train.steps=4",
        "measure.warmup_steps=1",
        "optimize.probe_steps=2",
    ]
    driver = StudyDriver(cfg := compose(*overrides), overrides, validate(cfg).cap_bytes)
    other = optuna.load_study(study_name=driver.name, storage=driver.storage)
    return driver, other


def _close_as_another_worker(other: optuna.Study, trial) -> None:
    """What a worker that took this one for gone does to its trial (`workers.fail_stale`)."""
    other._storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)


def _every_config_decided_once(driver: StudyDriver) -> list[str]:
    """The config ids of the decided trials (not the repeats of one), each config's once."""
    decided = driver.study.get_trials(states=(TrialState.COMPLETE, TrialState.PRUNED))
    ids = [t.user_attrs["config_id"] for t in decided if "label" in t.user_attrs]
    assert sorted(ids) == sorted(c.config_id for c in driver.valid), [(t.number, t.state) for t in decided]
    return ids


@pytest.mark.slow  # two workers on one study: several processes
def test_a_trial_closed_by_another_worker_before_it_is_owned_is_skipped_and_the_study_finishes(
    tiny_study, monkeypatch, capsys
):
    driver, other = tiny_study
    real_own, closed = workers.own, []

    def own(trial):
        if not closed:  # the first trial: closed between the ask and the owner's write
            closed.append(trial.number)
            _close_as_another_worker(other, trial)
        real_own(trial)

    monkeypatch.setattr(workers, "own", own)
    answer = answered(driver)
    out = capsys.readouterr().out
    assert f"[study] trial {closed[0]} was closed by another worker" in out, out[-3000:]
    assert answer.exit_code == 0 and answer.best is not None, out[-3000:]
    assert driver.study.trials[closed[0]].state is TrialState.FAIL
    _every_config_decided_once(driver)


@pytest.mark.slow
def test_a_trial_closed_by_another_worker_while_its_job_ran_is_skipped_and_measured_again(
    tiny_study, monkeypatch, capsys
):
    driver, other = tiny_study
    real_run, closed = task.run, []

    def run(cfg, **kwargs):
        outcome = real_run(cfg, **kwargs)
        if kwargs.get("kind") is RunKind.TRIAL and not closed:  # the first trial's job has ended: now it is closed
            running = driver.study.get_trials(states=(TrialState.RUNNING,))
            closed.append(running[0].number)
            _close_as_another_worker(other, running[0])
        return outcome

    monkeypatch.setattr(task, "run", run)
    answer = answered(driver)
    out = capsys.readouterr().out
    assert f"[study] trial {closed[0]} was closed by another worker" in out, out[-3000:]
    assert answer.exit_code == 0 and answer.best is not None, out[-3000:]
    lost = driver.study.trials[closed[0]]
    assert lost.state is TrialState.FAIL
    assert lost.user_attrs["config_id"] in _every_config_decided_once(driver)  # measured again


def _lock_study(storage: str, name: str) -> optuna.Study:
    return optuna.create_study(study_name=name, storage=storage)


def test_a_lock_removed_by_its_holder_between_a_waiters_two_looks_is_looked_at_again(tmp_path, monkeypatch):
    """The race of two workers calibrating one study on PostgreSQL: the waiter's create failed on the holder's lock,
    the holder stored its result and removed the lock, and the waiter's look at the lock raised KeyError."""
    mine, _ = _two_handles(tmp_path)
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    _lock_study(storage, "shared:calibration")  # the holder's, held
    real_load = optuna.load_study

    def load_after_the_holder_finished(**kwargs):
        mine.set_user_attr("calibration", {"by": "the holder"})
        optuna.delete_study(study_name="shared:calibration", storage=storage)
        return real_load(**kwargs)  # the lock is gone: KeyError

    monkeypatch.setattr(optuna, "load_study", load_after_the_holder_finished)
    with workers.claim(mine, "calibration", poll_s=0.0) as claimed:
        assert claimed is False  # the holder's result stands: this worker does not calibrate again
    assert mine.user_attrs["calibration"] == {"by": "the holder"}


def test_a_holder_that_finished_between_a_waiters_look_and_its_create_is_not_done_again(tmp_path, monkeypatch):
    mine, _ = _two_handles(tmp_path)
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    real_create = optuna.create_study

    def create_after_the_holder_finished(**kwargs):
        mine.set_user_attr("calibration", {"by": "the holder"})  # stored, and its lock removed, just now
        return real_create(**kwargs)

    monkeypatch.setattr(optuna, "create_study", create_after_the_holder_finished)
    with workers.claim(mine, "calibration", poll_s=0.0) as claimed:
        assert claimed is False
    assert optuna.get_all_study_names(storage) == ["shared"]  # the lock this worker created is removed again


def test_a_lock_whose_creator_died_before_naming_itself_is_taken_after_the_grace(tmp_path, monkeypatch):
    mine, _ = _two_handles(tmp_path)
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    _lock_study(storage, "shared:calibration")  # created, and no owner was ever written on it
    monkeypatch.setattr(workers, "GRACE_S", 0.0)
    with workers.claim(mine, "calibration", poll_s=0.0) as claimed:
        assert claimed is True
        mine.set_user_attr("calibration", {"by": "this worker"})
    assert optuna.get_all_study_names(storage) == ["shared"]


def test_a_baseline_a_dead_worker_was_measuring_is_queued_again_with_its_role(tiny_study):
    """A worker killed while it measured the baseline: the survivor fails its trial once it is stale, and the
    baseline goes back in the queue with its role (else the sampler proposed its config as a plain trial, and the
    study answered with no baseline to claim a speed-up over)."""
    driver, other = tiny_study
    driver.ctx.placement_dtype = "fp32"  # what the calibration finds on the CPU: its probes are not what is tested
    driver.base = baseline.candidate(driver.ctx)
    baseline.queue(driver.ctx, driver.base)
    lost = other.ask()  # the other worker takes the queued baseline...
    lost.set_user_attr("owner", f"{Owner.current().host}:{2**22 + 7}:1.00")  # ...and dies (no such process here)
    lost.set_user_attr("config_id", driver.base.config_id)
    driver._fail_stale()
    assert other.trials[lost.number].state is TrialState.FAIL
    waiting = driver.study.get_trials(states=(TrialState.WAITING,))
    assert [t.user_attrs.get("role") for t in waiting] == ["baseline"], [t.user_attrs for t in waiting]
    driver._fail_stale()  # nothing new has died: nothing more is queued
    assert len(driver.study.get_trials(states=(TrialState.WAITING,))) == 1


SPACE = {f"config-{i}" for i in range(6)}


def test_claims_made_at_once_never_overrun_the_budget(tmp_path):
    """Three workers, each with its own handle on one sqlite storage, two configs of a budget of three decided. All
    three ask for a trial before any of them claims (each had seen room for one more), then each claims a config of
    its own, in whatever order the threads run: the earliest trial keeps the budget's last place and the others give
    theirs up, so three configs are decided or measured, never five."""
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    first = optuna.create_study(study_name="shared", storage=storage)
    for config in ("config-0", "config-1"):
        trial = first.ask()
        trial.set_user_attr(CONFIG_ID, config)
        first.tell(trial, 1.0)
    asked = threading.Barrier(3)

    def worker(config: str) -> tuple[int, bool]:
        handle = optuna.load_study(study_name="shared", storage=storage)
        trial = handle.ask()
        workers.own(trial)
        asked.wait()  # every worker has asked, none has claimed yet
        trial.set_user_attr(CONFIG_ID, config)
        return trial.number, workers.within_budget(handle, trial.number, config, SPACE, budget=3)

    with ThreadPoolExecutor(max_workers=3) as pool:
        judged = sorted(pool.map(worker, ["config-2", "config-3", "config-4"]))
    assert judged == [(2, True), (3, False), (4, False)]


@pytest.fixture
def one_trial_study(tmp_path, compose):
    """A study of the tiny model's three splits with a budget of one trial, on this test's own store."""
    overrides = [
        "mem_cap=4GiB",
        "batch.effective=4",
        "optimize.trials=1",
        "optimize.confirm=never",
        "train.steps=4",
        "measure.warmup_steps=1",
    ]
    driver = StudyDriver(cfg := compose(*overrides), overrides, validate(cfg).cap_bytes)
    driver.ctx.placement_dtype = "fp32"  # what the calibration finds on the CPU: its probes are not what is tested
    return driver, optuna.load_study(study_name=driver.name, storage=driver.storage)


def test_a_worker_measures_nothing_once_another_holds_the_budgets_last_trial(one_trial_study, monkeypatch):
    """Another worker has asked for a trial and claims the budget's one config while this worker looks for a trial
    to decide (before or after its own ask: either way). This worker measures nothing: it waits on that claim, or
    gives up its own trial, and its trials end FAIL, none decided and no job run."""
    driver, other = one_trial_study
    monkeypatch.setattr(study, "HEARTBEAT_S", 0.0)  # its wait on the other worker: one look, no pause
    theirs = other.ask()
    workers.own(theirs)
    ran = []
    monkeypatch.setattr(task, "run", lambda *args, **kwargs: ran.append(args))
    looking = threading.Thread(target=driver._next_trial, args=(tqdm(disable=True),))
    looking.start()
    theirs.set_user_attr(CONFIG_ID, driver.valid[0].config_id)
    looking.join(timeout=120)
    assert not looking.is_alive() and ran == []
    mine = [t for t in driver.study.get_trials() if t.number != theirs.number]
    assert all(t.state in (TrialState.FAIL, TrialState.WAITING) for t in mine), [(t.number, t.state) for t in mine]
    assert driver._open_ids() == {driver.valid[0].config_id}  # the claimed config alone: waited on, not decided


class _InterruptedSampler(optuna.samplers.RandomSampler):
    """Delivers a real SIGINT to this process inside `ask`, once the storage has made the trial (Optuna calls
    `before_trial` then): the trial exists, RUNNING, its owner not written."""

    def before_trial(self, study, trial):
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)  # to this thread: handled here, at once
        super().before_trial(study, trial)


def test_a_ctrl_c_inside_ask_leaves_no_trial_running_without_an_owner(tmp_path):
    """Seen from a terminal: a Ctrl-C left a study's trial RUNNING with no owner, so this worker's release did not
    end it and the next command ran a trial of its own before it took it for a dead worker's. Asked and owned as one
    call, the interrupt lands after the owner is written, and the release ends the trial."""
    study_ = optuna.create_study(storage=f"sqlite:///{tmp_path / 'optuna.db'}", sampler=_InterruptedSampler(seed=0))
    with pytest.raises(KeyboardInterrupt):
        workers.ask_owned(study_)
    (asked,) = study_.get_trials(deepcopy=False)
    assert asked.user_attrs["owner"] == str(Owner.current())
    workers.release_own(study_)
    assert [t.state for t in study_.get_trials(deepcopy=False)] == [TrialState.FAIL]
