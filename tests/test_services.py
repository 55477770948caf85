"""The throwaway services of tests/services.py, proven on the real engines: an Optuna study shared by two processes
through PostgreSQL, a dead worker's trial failed by Optuna's heartbeat, batch jobs on the one-node SLURM cluster, and
a dead job seen by submitit once SLURM keeps accounts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import warnings

import pytest

from tests.helpers.wait import wait_until

# One worker: load the study, then ask/tell `n` trials, each tagged with this process's pid.
ASK_TELL = """
import os, sys, optuna
optuna.logging.set_verbosity(optuna.logging.WARNING)
study = optuna.load_study(study_name="shared", storage=sys.argv[1])
for _ in range(int(sys.argv[2])):
    trial = study.ask()
    x = trial.suggest_float("x", -1.0, 1.0)
    trial.set_user_attr("pid", os.getpid())
    study.tell(trial, x * x)
"""

# A worker that dies mid-trial: its storage beats every second, the trial never ends.
HANGING = """
import sys, time, optuna
storage = optuna.storages.RDBStorage(sys.argv[1], heartbeat_interval=1, grace_period=6)
study = optuna.load_study(study_name="beats", storage=storage)
study.optimize(lambda trial: time.sleep(600) or 0.0, n_trials=1)
"""


@pytest.mark.slow
def test_two_processes_share_an_optuna_study_on_postgres(postgres_url):
    import optuna

    study = optuna.create_study(study_name="shared", storage=postgres_url, direction="minimize")
    workers = [
        subprocess.Popen([sys.executable, "-c", ASK_TELL, postgres_url, "5"], stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    for worker in workers:
        _, err = worker.communicate(timeout=120)
        assert worker.returncode == 0, err[-2000:]
    trials = study.get_trials()
    assert sorted(t.number for t in trials) == list(range(10))
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    pids = [t.user_attrs["pid"] for t in trials]
    assert sorted(set(pids)) == sorted(w.pid for w in workers) and pids.count(workers[0].pid) == 5
    assert study.best_value == min(t.params["x"] ** 2 for t in trials)


@pytest.mark.slow
def test_heartbeat_fails_a_killed_workers_trial_on_postgres(postgres_url):
    import optuna

    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
    grace_s = 6  # a live worker's heartbeat thread writes every second; a busy machine may delay one by seconds
    storage = optuna.storages.RDBStorage(postgres_url, heartbeat_interval=1, grace_period=grace_s)
    study = optuna.create_study(study_name="beats", storage=storage)
    worker = subprocess.Popen([sys.executable, "-c", HANGING, postgres_url])
    deadline = time.monotonic() + 60
    while not study.get_trials():
        assert worker.poll() is None and time.monotonic() < deadline, "the worker never started its trial"
        time.sleep(0.2)
    started = study.get_trials()[0].datetime_start.timestamp()
    # a grace period and a heartbeat (1 s) past the trial's start: only a live worker's heartbeat keeps it RUNNING
    wait_until(lambda: time.time() > started + grace_s + 1, 30, "the grace period's end", alive=worker)
    assert optuna.storages.fail_stale_trials(study) is None
    assert [t.state for t in study.get_trials()] == [optuna.trial.TrialState.RUNNING]
    os.kill(worker.pid, signal.SIGKILL)
    worker.wait()
    killed = time.monotonic()
    while study.get_trials()[0].state == optuna.trial.TrialState.RUNNING:
        assert time.monotonic() - killed < 30, "the dead worker's trial stayed RUNNING"
        optuna.storages.fail_stale_trials(study)
        time.sleep(0.5)
    assert study.get_trials()[0].state == optuna.trial.TrialState.FAIL


@pytest.mark.slow
def test_sbatch_and_srun_run_on_the_one_node_slurm_cluster(slurm_cluster, tmp_path):
    node = slurm_cluster.run("sinfo", "-h", "-o", "%P %D %c %T")
    assert node.stdout.split() == [f"{slurm_cluster.partition}*", "1", str(slurm_cluster.cpus), "idle"], node

    srun = slurm_cluster.run("srun", "--cpus-per-task=1", "printenv", "SLURM_JOB_PARTITION")
    assert srun.returncode == 0 and srun.stdout.strip() == slurm_cluster.partition, srun

    out = tmp_path / "job.out"
    sbatch = slurm_cluster.run(
        "sbatch", "--parsable", f"--output={out}", "--wrap", "echo job $SLURM_JOB_ID on $SLURMD_NODENAME"
    )
    assert sbatch.returncode == 0, sbatch
    job_id = sbatch.stdout.strip()
    slurm_cluster.wait_idle(60)
    assert out.read_text().strip() == f"job {job_id} on localhost"


@pytest.mark.slow
def test_submitit_sees_a_dead_job_through_accounting(slurm_cluster_with_accounting, tmp_path):
    submitit = pytest.importorskip("submitit")

    executor = submitit.AutoExecutor(folder=tmp_path / "submitit", cluster="slurm")
    executor.update_parameters(slurm_partition=slurm_cluster_with_accounting.partition, timeout_min=5)
    executor.update_parameters(cpus_per_task=1, mem_gb=1)
    job = executor.submit(os.abort)  # dies before it writes a result, as a job killed for memory or time does
    deadline = time.monotonic() + 60
    while not job.done():  # without accounting the state stays UNKNOWN and this never ends
        assert time.monotonic() < deadline, f"submitit still waits for job {job.job_id} ({job.state})"
        time.sleep(1)
    assert job.state == "FAILED"
    with pytest.raises(submitit.core.utils.UncompletedJobError, match="state: FAILED"):
        job.result()
    sacct = slurm_cluster_with_accounting.run("sacct", "-n", "-X", "-P", "-o", "JobID,State", "-j", job.job_id)
    assert sacct.stdout.split() == [f"{job.job_id}|FAILED"], sacct
