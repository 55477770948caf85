"""One job on several processes: torchrun with the gloo backend on CPU, against one process at the same effective batch."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pipeline.config.compose import compose_job
from pipeline.jobs import runner
from pipeline.jobs.child import Job
from pipeline.jobs.task import job_spec
from tests.helpers.processes import rank_process
from tests.helpers.wait import wait_for_steps

COMMON = ["train.steps=6", "measure.warmup_steps=1", "train.progress_bar=false", "gpu=cpu"]


@pytest.mark.slow
def test_two_process_ddp_matches_one_process(tmp_path):
    spec = job_spec(compose_job("config", [*COMMON, "world_size=2", "launcher.kind=torchrun", "batch.split=2x1"]))
    record = runner.run_job("torchrun", spec, tmp_path / "ddp")
    assert record.status == "ok", record.error or record.traceback
    assert record.world_size == 2 and record.exitcode == 0

    single = Job(job_spec(compose_job("config", [*COMMON, "batch.split=2x2"])), tmp_path).run()
    assert single.status == "ok"
    ddp_losses = [s.loss for s in record.steps]
    one_losses = [s.loss for s in single.steps]
    assert len(ddp_losses) == len(one_losses) == 6
    worst = max(abs(a - b) / abs(b) for a, b in zip(ddp_losses, one_losses, strict=True))
    assert worst <= 1e-5, (ddp_losses, one_losses)


@pytest.mark.slow
def test_submitit_launcher_runs_isolated_recorded_jobs(tmp_path):
    """The SLURM launcher's code path, through submitit's local executor: every job still gets its own child
    process and its own nested MLflow run, and the sweep's table is read back from MLflow."""
    from mlflow.tracking import MlflowClient

    from tests.helpers.cli import run_cli

    proc = run_cli(
        "-m",
        "hydra/launcher=local",
        "batch.split=1x4,4x1",
        "train.steps=6",
        "measure.warmup_steps=1",
        "train.progress_bar=false",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # each job went through submitit: its executor keeps one log folder per job
    logs = sorted(p.name for p in tmp_path.glob("mlruns/hydra/**/.submitit/*/*_log.out"))
    assert len(logs) == 2, logs
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}")
    runs = client.search_runs(["1"])
    (parent,) = [r for r in runs if r.data.tags.get("kind") == "sweep"]
    jobs = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert sorted(r.data.params["batch.split"] for r in jobs) == ["1x4", "4x1"]
    assert all(r.info.status == "FINISHED" and r.data.tags["status"] == "ok" for r in jobs)
    assert len({r.data.tags["pid"] for r in jobs}) == 2
    assert "| tiny 4x1" in proc.stdout and "| tiny 1x4" in proc.stdout


@pytest.mark.slow
def test_a_killed_rank_is_named_in_a_few_lines(tmp_path):
    """Issue 21: one rank of a torchrun job SIGKILLed once the job trains. The job fails in a few lines of output
    (not the launcher's banner, DDP's warnings and rank 0's traceback), its MLflow run's note names the rank that
    died and how, and no torchelastic_* or job folder stays in the temp folder."""
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TMPDIR": str(jobs)}
    env.pop("MLFLOW_TRACKING_URI", None)
    args = ["launcher.kind=torchrun", "world_size=2", "batch.split=2x1", "train.steps=100000", "data.num_samples=64"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline.train", *args, *COMMON[1:]],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    wait_for_steps(jobs, 1, timeout=300, alive=lambda: proc.poll() is None)
    victim = rank_process(proc.pid, rank=1)
    victim.kill()
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 1, out[-3000:]
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) <= 3 and "Traceback" not in out, out[-3000:]
    note = f"rank 1 of 2 (pid {victim.pid}) was killed by SIGKILL (killed: out of host memory, or by a user)"
    assert lines[-1].startswith(f"[job] tiny 2x1: failed: {note}"), lines
    assert sorted(p.name for p in jobs.iterdir() if not p.name.startswith("torchinductor")) == [], list(jobs.iterdir())

    from mlflow.tracking import MlflowClient

    (run,) = MlflowClient(f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}").search_runs(["1"])
    assert run.info.status == "FAILED" and run.data.tags["note"].startswith(note), run.data.tags
