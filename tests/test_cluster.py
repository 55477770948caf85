"""Beyond one machine, on the real engines: study workers on two "hosts" sharing PostgreSQL and an MLflow server
(one of them killed mid-trial), fresh PostgreSQL stores opened by several processes at once, and a sweep on a
one-node SLURM cluster.

Two hosts are played on one machine: each worker has its own BATCH_SPLIT_HOST (so the other judges it by its
heartbeat alone, as across machines), device-lock folder (so their jobs run side by side, as on two machines), TMPDIR
(its job folders) and working directory.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from collections.abc import Iterator

import optuna
import pytest
from mlflow.tracking import MlflowClient

from pipeline.tracking.store import store_lock
from tests.helpers.cli import run_cli, start_python
from tests.helpers.runs import the_study
from tests.helpers.wait import wait_for_steps

GRACE_S = 10.0  # BATCH_SPLIT_GRACE_S of the workers: how long a silent remote worker's trial stays claimed
DONE = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)

# `python -m pipeline.optimize ARGS` as `python -c OPTIMIZE GO ARGS`, its imports done first: it says "ready", then
# starts once the file GO exists, so that workers started together reach their stores at the same instant.
OPTIMIZE = """
import pathlib, sys, time
import pipeline.optimize, pipeline.search.study
print("ready", flush=True)
while not pathlib.Path(sys.argv[1]).exists():
    time.sleep(0.005)
sys.argv = [pipeline.optimize.__file__, *sys.argv[2:]]
pipeline.optimize.main()
"""


# Open a study's stores as `pipeline.optimize` does (MLflow experiment, then Optuna study) once the file GO exists:
# python -c OPEN GO OVERRIDES...
OPEN = """
import pathlib, sys, time
from pipeline.config.compose import compose_job
from pipeline.config.validate import validate
from pipeline.search.study import StudyDriver
cfg = compose_job("config", sys.argv[2:])
print("ready", flush=True)
while not pathlib.Path(sys.argv[1]).exists():
    time.sleep(0.005)
driver = StudyDriver(cfg, [], validate(cfg).cap_bytes)
print(driver.tracker.experiment_id, driver.study.study_name, flush=True)
"""


def _host_env(tmp_path, name: str) -> dict[str, str]:
    """What the environment of a worker playing host `name` adds: its own host name, device locks and job folders."""
    home = tmp_path / name
    for sub in ("locks", "tmp"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    env = {"BATCH_SPLIT_HOST": name, "TMPDIR": str(home / "tmp")}
    env.update(BATCH_SPLIT_LOCK_DIR=str(home / "locks"), BATCH_SPLIT_HEARTBEAT_S="1", BATCH_SPLIT_GRACE_S=str(GRACE_S))
    return env


@contextlib.contextmanager
def _started_together(
    tmp_path, hosts: list[str], script: str, args: list[str]
) -> Iterator[dict[str, subprocess.Popen]]:
    """`python -c script GO args` once per host, each in its folder, released together (GO made) once all are ready;
    any still running when the block ends is killed (its jobs stop with it)."""
    go = tmp_path / "go"
    workers = {
        name: start_python("-c", script, str(go), *args, cwd=tmp_path / name, env=_host_env(tmp_path, name))
        for name in hosts
    }
    try:
        for worker in workers.values():
            while (line := worker.stdout.readline()) != "ready\n":
                assert line, worker.communicate()[0][-3000:]  # it ended before it was ready
        go.touch()
        yield workers
    finally:
        for worker in workers.values():
            if worker.poll() is None:
                worker.kill()
                worker.communicate()


def _only_study(storage: str) -> optuna.Study:
    """The one study in `storage` (workers also make and remove a `<name>:calibration` lock study). Opened under
    the workers' lock: opening a fresh database creates its tables, which must not race theirs."""
    with store_lock(storage):
        return the_study(storage)


def _kill_one_mid_trial(tmp_path, storage: str, workers: dict[str, subprocess.Popen]):
    """Wait until a worker's trial is RUNNING and its job has trained a step, then SIGKILL that worker; return its
    host, the time of the kill and the trial it left RUNNING."""
    deadline = time.time() + 300
    owners: list[str] = []
    while not owners:
        assert all(w.poll() is None for w in workers.values()), {n: w.poll() for n, w in workers.items()}
        assert time.time() < deadline, "no trial started in time"
        time.sleep(0.2)
        try:
            running = _only_study(storage).get_trials(states=(optuna.trial.TrialState.RUNNING,))
        except ValueError:  # no study yet
            continue
        owners = [t.user_attrs["owner"].split(":")[0] for t in running if "config_id" in t.user_attrs]
    victim = owners[0]
    wait_for_steps(tmp_path / victim / "tmp", 1, alive=workers[victim])
    workers[victim].send_signal(signal.SIGKILL)
    killed_at = time.time()
    workers[victim].wait()
    # the trial it held: its newest RUNNING or FAIL one (the survivor may already have failed it, its heartbeat lapsed)
    held = [
        t
        for t in _only_study(storage).get_trials(states=(optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.FAIL))
        if t.user_attrs.get("owner", "").startswith(victim + ":")
    ]
    return victim, killed_at, max(held, key=lambda t: t.number)


@pytest.mark.slow
def test_two_hosts_share_a_study_and_the_survivor_finishes_what_a_killed_one_left(
    tmp_path, postgres_server, mlflow_server
):
    began = time.monotonic()
    storage = postgres_server.url("optuna")  # fresh: both workers create its schema at the same instant
    args = [
        "mem_cap=4GiB",
        "batch.effective=8",  # four splits: the survivor has others to measure while the dead one's claim lapses
        "optimize.trials=4",
        "train.steps=12",
        "measure.warmup_steps=1",
        "optimize.probe_steps=2",
        "optimize.confirm_floor_s=0",  # the round as its share buys it: this test is of the workers, not the round
        "train.progress_bar=false",
        f"optimize.storage={storage}",
        f"tracking.uri={mlflow_server.url}",
    ]
    with _started_together(tmp_path, ["host-a", "host-b"], OPTIMIZE, args) as workers:
        victim, killed_at, killed = _kill_one_mid_trial(tmp_path, storage, workers)
        heartbeat = killed.user_attrs["heartbeat"]  # its last: no one beats it any more
        (survivor,) = [w for name, w in workers.items() if name != victim]
        out, _ = survivor.communicate(timeout=600)
    print(out)  # shown when an assertion below fails
    assert survivor.returncode == 0, out[-3000:]
    assert "1 trial(s) of a dead worker marked FAIL" in out
    assert "best feasible: tiny " in out

    # the study: every config decided once, the dead worker's trial failed only once its heartbeat had lapsed
    study = _only_study(storage)
    trials = study.get_trials()
    decided = [t.user_attrs["config_id"] for t in trials if t.state in DONE and "config_id" in t.user_attrs]
    assert len(decided) == len(set(decided)) == 4, [(t.number, t.state, t.user_attrs.get("label")) for t in trials]
    killed = trials[killed.number]
    assert killed.state == optuna.trial.TrialState.FAIL
    failed_at = killed.datetime_complete.timestamp()
    assert failed_at >= killed_at and failed_at >= heartbeat + GRACE_S, (failed_at, killed_at, heartbeat)
    assert killed.user_attrs["config_id"] in decided  # measured again, by the survivor

    # MLflow: everything through the server, nested under one study run, nothing left RUNNING
    client = MlflowClient(mlflow_server.url)
    experiment = client.get_experiment_by_name("batch-split")
    assert experiment.artifact_location.startswith("mlflow-artifacts:"), experiment.artifact_location
    runs = client.search_runs([experiment.experiment_id])
    assert all(r.info.status != "RUNNING" for r in runs), [(r.info.run_name, r.info.status) for r in runs]
    (parent,) = [r for r in runs if r.data.tags.get("kind") == "study"]
    assert parent.info.status == "FINISHED"
    jobs = [r for r in runs if r.data.tags.get("kind") in ("trial", "probe", "confirm")]
    assert len(jobs) == len(runs) - 1 and all(r.data.tags["mlflow.parentRunId"] == parent.info.run_id for r in jobs)
    assert {r.data.tags["owner"].split(":")[0] for r in jobs} == {"host-a", "host-b"}
    by_id = {r.info.run_id: r for r in runs}
    for trial in (t for t in trials if t.state in DONE and "label" in t.user_attrs):  # not the repeats of one
        run = by_id[trial.user_attrs["run_id"]]
        assert run.info.status == "FINISHED"
        assert {a.path for a in client.list_artifacts(run.info.run_id)} >= {"config.yaml", "result.json"}
    (dead_run,) = [r for r in jobs if r.info.status == "FAILED"]
    assert (
        dead_run.data.tags["owner"].startswith(victim + ":")
        and "ended without closing it" in dead_run.data.tags["note"]
    )
    assert dead_run.data.tags["config_id"] == killed.user_attrs["config_id"]
    print(
        f"dead worker's trial claimed for {failed_at - heartbeat:.1f} s after its last heartbeat (grace {GRACE_S:g} s),"
        f" failed {failed_at - killed_at:.1f} s after the kill; test took {time.monotonic() - began:.0f} s"
    )


@pytest.mark.slow
def test_fresh_postgres_stores_opened_by_three_processes_at_once(tmp_path, postgres_server):
    """Creating a database's schema is not safe to run twice at once (PostgreSQL: duplicate key value violates
    unique constraint "pg_type_typname_nsp_index"); the stores are created under a lock, and the experiment's
    artifacts go under an absolute paths.root/artifacts rather than ./mlruns of whichever process came first."""
    root = tmp_path / "shared"
    args = [
        "mem_cap=4GiB",
        f"paths.root={root}",
        f"tracking.uri={postgres_server.url('mlflow')}",
        f"optimize.storage={postgres_server.url('optuna')}",
    ]
    hosts = ["host-a", "host-b", "host-c"]
    with _started_together(tmp_path, hosts, OPEN, args) as processes:
        opened = [(p.communicate(timeout=120)[0], p.returncode) for p in processes.values()]
    assert all(code == 0 for _, code in opened), [out[-2000:] for out, _ in opened]
    assert len({out.splitlines()[-1] for out, _ in opened}) == 1, opened  # one experiment id, one study name
    experiment = MlflowClient(postgres_server.url("mlflow")).get_experiment_by_name("batch-split")
    assert experiment.artifact_location == (root / "artifacts").as_uri()
    assert len(optuna.get_all_study_summaries(postgres_server.url("optuna"))) == 1


@pytest.mark.slow
def test_a_sweep_on_slurm_records_every_job_under_one_parent(slurm_cluster, tmp_path):
    """The README's SLURM command on a CPU-only cluster: each split one SLURM job, recorded like a local one."""
    proc = run_cli(
        "-m",
        "hydra/launcher=slurm",
        f"hydra.launcher.partition={slurm_cluster.partition}",
        "hydra.launcher.gpus_per_node=0",
        "hydra.launcher.cpus_per_task=1",
        "hydra.launcher.mem_gb=4",
        "batch.split=2x2,4x1",
        "train.steps=4",
        "measure.warmup_steps=1",
        "train.progress_bar=false",
        cwd=tmp_path,
        timeout=500,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    runs = MlflowClient(f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}").search_runs(["1"])
    (parent,) = [r for r in runs if r.data.tags.get("kind") == "sweep"]
    assert parent.info.status == "FINISHED"
    jobs = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(jobs) == len(runs) - 1 and sorted(r.data.params["batch.split"] for r in jobs) == ["2x2", "4x1"]
    assert all(r.info.status == "FINISHED" and r.data.tags["status"] == "ok" for r in jobs)
    assert len({r.data.tags["config_id"] for r in jobs}) == 2
    # each ran as a job of its own on the cluster: submitit's folders hold their logs
    logs = sorted(p.name for p in tmp_path.glob("mlruns/hydra/*/*/.submitit/*/*_log.out"))
    assert len(logs) == 2, logs
