"""One job on several processes: torchrun with the gloo backend on CPU, against one process at the same effective batch."""

from __future__ import annotations

import pytest

from pipeline.config.validate import validate
from pipeline.jobs import runner
from pipeline.jobs.child import Job
from pipeline.jobs.task import job_spec
from tests.helpers.cli import start_cli
from tests.helpers.processes import rank_process
from tests.helpers.wait import wait_for_steps

COMMON = ["train.steps=6", "measure.warmup_steps=1", "train.progress_bar=false", "gpu=cpu"]
# a two-rank job that trains until it is stopped (the samples repeat: no dataset of 400,000 samples to build first)
ENDLESS_TWO_RANKS = [
    "launcher.kind=torchrun",
    "world_size=2",
    "batch.split=2x1",
    "train.steps=100000",
    "data.num_samples=64",
]


@pytest.mark.slow
def test_two_process_ddp_matches_one_process(tmp_path, compose):
    spec = job_spec(validate(compose(*COMMON, "world_size=2", "launcher.kind=torchrun", "batch.split=2x1")))
    record = runner.run_job("torchrun", spec, tmp_path / "ddp")
    assert record.status == "ok", record.error or record.traceback
    assert record.world_size == 2 and record.exitcode == 0

    single = Job(job_spec(validate(compose(*COMMON, "batch.split=2x2"))), tmp_path).run()
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
    proc = start_cli(*ENDLESS_TWO_RANKS, *COMMON[1:], cwd=tmp_path, env={"TMPDIR": str(jobs)})
    wait_for_steps(jobs, 1, timeout=300, alive=proc)
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


@pytest.mark.slow
def test_a_world_size_sweep_keeps_the_effective_batch_and_its_losses_agree(tmp_path):
    """`world_size=1,2` in one multirun: the splits that make the effective batch at each world size run (with
    gradient checkpointing, as the seed's setting), the others are named and left out; the two world sizes train on
    the same samples per optimizer step, so their per-step losses agree; the two-rank job records each rank's peak
    and DDP's all-reduce."""
    from mlflow.tracking import MlflowClient

    from tests.helpers.cli import run_cli

    sweep = ["world_size=1,2", "batch.split=1x4,1x2", "launcher.kind=torchrun", "train.gradient_checkpointing=true"]
    proc = run_cli("-m", *sweep, *COMMON, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "[sweep] left out 2 job(s) whose split x world_size is not batch.effective: 1x2 x world_size 1, " in (
        proc.stdout
    ), proc.stdout
    assert ": 2 jobs, MLflow parent run" in proc.stdout and "[sweep] 2/2 jobs done" in proc.stdout
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}")
    runs = {r.data.params["world_size"]: r for r in client.search_runs(["1"]) if r.data.tags["kind"] == "job"}
    assert sorted(runs) == ["1", "2"] and all(r.info.status == "FINISHED" for r in runs.values())
    one, two = runs["1"], runs["2"]
    assert (one.data.params["batch.split"], two.data.params["batch.split"]) == ("1x4", "1x2")
    assert one.data.metrics["samples_per_step"] == two.data.metrics["samples_per_step"] == 4  # every rank's
    assert two.data.metrics["peak_gib"] == max(two.data.metrics[f"peak_rank{r}_gib"] for r in (0, 1))
    assert two.data.metrics["allreduce_median_s"] > 0 and "allreduce_median_s" not in one.data.metrics
    losses = {
        size: [m.value for m in sorted(client.get_metric_history(r.info.run_id, "loss"), key=lambda m: m.step)]
        for size, r in runs.items()
    }
    assert len(losses["1"]) == len(losses["2"]) == 6
    worst = max(abs(a - b) / abs(b) for a, b in zip(losses["2"], losses["1"], strict=True))
    assert worst <= 1e-5, losses
    assert two.data.metrics["loss_max_rel_dev"] <= 1e-5  # the sweep's table says so too


@pytest.mark.slow
def test_a_study_over_world_sizes_answers_with_how_many_ranks_it_uses(tmp_path):
    """Issue 23: `optimize.space={world_size:[1,2]}` on the tiny model with gloo: both world sizes' splits are
    decided, and the answer says how many processes the best config uses."""
    from mlflow.tracking import MlflowClient

    from pipeline.search._trials import TrialRecord
    from tests.helpers.cli import run_cli
    from tests.helpers.runs import the_study

    args = ["mem_cap=2GiB", "launcher.kind=torchrun", "++optimize.space={world_size:[1,2]}", "optimize.trials=5"]
    args += ["optimize.confirm=never", "train.steps=6", "measure.warmup_steps=2", "gpu=cpu", "train.progress_bar=false"]
    proc = run_cli(*args, cwd=tmp_path, module="pipeline.optimize", timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "5 valid configs" in proc.stdout
    storage = f"sqlite:///{tmp_path / 'mlruns' / 'optuna.db'}"
    study = the_study(storage)
    decided = [TrialRecord.of(t) for t in study.get_trials() if t.user_attrs.get("label")]
    assert {(r.overrides[0], r.world_size) for r in decided} == {
        ("batch.split=1x4", 1),
        ("batch.split=2x2", 1),
        ("batch.split=4x1", 1),
        ("batch.split=1x2", 2),
        ("batch.split=2x1", 2),
    }
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}")
    (parent,) = [r for r in client.search_runs(["1"]) if r.data.tags["kind"] == "study"]
    size = int(parent.data.metrics["best_world_size"])
    assert f"  uses {size} process{'es' if size > 1 else ''} (world_size={size})" in proc.stdout.splitlines()
    assert f"world_size={size}" in parent.data.tags["answer"]
    assert not [r for r in client.search_runs(["1"]) if r.info.status == "RUNNING"]


@pytest.mark.slow
def test_a_rank_that_stops_answering_ends_its_job_within_the_launchers_timeout(tmp_path):
    """A rank stopped (SIGSTOP) while its job trains: alive, holding its device, answering no collective. The other
    rank waits in gloo; the job still ends at `launcher.timeout_s`, with one line, both ranks gone (the stopped one
    never sees its launcher die: the runner kills every process under it), its run FAILED, nothing left RUNNING."""
    from mlflow.tracking import MlflowClient

    from tests.helpers.wait import process_gone, wait_until

    jobs = tmp_path / "jobs"
    jobs.mkdir()
    timeout_s = 60  # two ranks start and train a step inside it five times over (11 s on 2 quiet cores)
    proc = start_cli(
        *ENDLESS_TWO_RANKS, f"launcher.timeout_s={timeout_s}", *COMMON[1:], cwd=tmp_path, env={"TMPDIR": str(jobs)}
    )
    wait_for_steps(jobs, 1, timeout=timeout_s, alive=proc)
    stopped, waiting = rank_process(proc.pid, rank=1), rank_process(proc.pid, rank=0)
    stopped.suspend()
    out, _ = proc.communicate(timeout=timeout_s + 120)
    assert proc.returncode == 1, out[-3000:]
    lines = [line for line in out.splitlines() if line.strip()]
    assert "Traceback" not in out, out
    assert lines[-1].startswith(f"[job] tiny 2x1: failed: timed out after {timeout_s} s; its output in "), out
    assert lines[-1].endswith("/job.log"), out  # rank 0's output up to the stop, kept on its run
    wait_until(lambda: process_gone(stopped.pid) and process_gone(waiting.pid), 30, "both ranks gone")
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}")
    (run,) = client.search_runs(["1"])
    assert run.info.status == "FAILED" and run.data.tags["note"] == f"timed out after {timeout_s} s"
    assert run.data.metrics["wall_s"] < timeout_s + 15  # the timeout, then at most the kill's wait
