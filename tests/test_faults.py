"""Faults past the command line: a sweep killed outright, two sweeps on one machine, a store that fails."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.helpers.cli import run_cli, start_cli
from tests.helpers.runs import mlflow_runs
from tests.helpers.wait import process_gone, wait_for_steps

FAST = ["measure.warmup_steps=1", "train.progress_bar=false"]


def test_a_sweep_killed_outright_is_cleaned_up_by_the_next_command(tmp_path):
    """SIGKILL the sweep process (no handler runs): its job dies with it, but its MLflow runs stay RUNNING and its
    job folder and multiprocessing's folder (pymp-*) stay behind, until the next command on the store ends them
    truthfully and removes the folders. The killed job leaks no semaphore (issue 21: the resource tracker warned)."""
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    env = {"TMPDIR": str(jobs)}
    sweep = start_cli("-m", "train.steps=100000,6", "data.num_samples=64", *FAST, cwd=tmp_path, env=env)
    steps = wait_for_steps(jobs, 2, alive=lambda: sweep.poll() is None)
    job = json.loads((steps.parent / "process.json").read_text())["pid"]
    sweep.kill()
    output = sweep.communicate(timeout=60)[0]  # to its end: the resource tracker, last to go, writes there too
    deadline = time.time() + 15
    while not process_gone(job):
        assert time.time() < deadline, "the job outlived its sweep"
        time.sleep(0.2)
    left = {r.data.tags["kind"]: r for r in mlflow_runs(tmp_path) if r.info.status == "RUNNING"}
    assert set(left) == {"sweep", "job"}  # what a kill leaves: nothing could end them
    assert steps.parent.exists() and len(list(jobs.glob("pymp-*"))) == 1
    assert "leaked semaphore" not in output and "resource_tracker" not in output, output[-2000:]

    report = run_cli(cwd=tmp_path, env=env, module="pipeline.report", timeout=300)
    assert report.returncode == 0, report.stderr[-2000:]
    assert "[clean-up] ended 2 run(s) left RUNNING and removed 2 temp folder(s)" in report.stdout
    runs = {r.data.tags["kind"]: r for r in mlflow_runs(tmp_path)}
    assert runs["sweep"].info.status == "KILLED" and runs["sweep"].data.tags["status"] == "killed"
    assert runs["job"].info.status == "FAILED" and runs["job"].data.tags["status"] == "failed"
    for run in runs.values():
        assert "ended without closing it" in run.data.tags["note"]
    assert not steps.parent.exists() and not list(jobs.glob("pymp-*"))


@pytest.mark.slow
def test_ctrl_c_ends_the_job_without_a_leaked_semaphore(tmp_path):
    """Ctrl-C once the job trains: the job is killed, its run ends KILLED, exit code 130, and nothing warns of a
    leaked semaphore (issue 21: tqdm's multiprocessing lock, made in every job, was never unregistered)."""
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    sweep = start_cli("train.steps=100000", "data.num_samples=64", *FAST, cwd=tmp_path, env={"TMPDIR": str(jobs)})
    wait_for_steps(jobs, 1, alive=lambda: sweep.poll() is None)
    sweep.send_signal(signal.SIGINT)
    output = sweep.communicate(timeout=120)[0]
    assert sweep.returncode == 130, output[-2000:]
    assert "leaked semaphore" not in output and "resource_tracker" not in output, output[-2000:]
    assert "Traceback" not in output
    (run,) = mlflow_runs(tmp_path)
    assert run.info.status == "KILLED"
    assert not list(jobs.glob("pymp-*")) and not list(jobs.glob("batch-split-job-*"))


@pytest.mark.slow
def test_two_sweeps_on_one_machine_take_turns_on_the_device(tmp_path):
    """Two sweeps started together on one machine (one device lock folder, as for any two commands of a machine):
    their jobs queue for the CPU, so no two jobs ever train at the same time, and the one that waits says so."""
    locks = tmp_path / "locks"
    procs = []
    for name in ("a", "b"):
        folder = tmp_path / name
        folder.mkdir()
        sweep = start_cli(
            "-m", "batch.split=2x2,4x1", "train.steps=8", *FAST, cwd=folder, env={"BATCH_SPLIT_LOCK_DIR": str(locks)}
        )
        procs.append((folder, sweep))
    outputs = [proc.communicate(timeout=600)[0] for _, proc in procs]
    assert all(proc.returncode == 0 for _, proc in procs), [o[-2000:] for o in outputs]
    assert any("waiting for cpu, in use by job tiny" in o for o in outputs), outputs
    spans = sorted(
        (run.info.start_time, run.info.end_time)
        for folder, _ in procs
        for run in mlflow_runs(folder)
        if run.data.tags["kind"] == "job"
    )
    assert len(spans) == 4
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert end <= start, spans  # a job's run opens after the device is its own, and ends before it lets go


def test_a_corrupt_store_at_run_time_is_one_line_naming_it_and_exit_1(tmp_path):
    """The store breaks after the checks passed (here: the database replaced by garbage once the sweep has opened
    its parent run): one line naming the store and where it is, exit code 1, no traceback. Whichever write meets the
    garbage first (the sweep's or a job's), the line is the same."""
    db = tmp_path / "mlruns" / "mlflow.db"
    sweep = start_cli("-m", "train.steps=3,4", *FAST, cwd=tmp_path, stderr=subprocess.PIPE)
    with ThreadPoolExecutor(max_workers=1) as reader:
        first = reader.submit(sweep.stdout.readline).result(timeout=120)
    assert first.startswith("[sweep] ") and "MLflow parent run" in first, first
    db.write_bytes(b"this is not a database any more" * 100)
    out, err = sweep.communicate(timeout=300)
    assert sweep.returncode == 1, out[-2000:] + err[-2000:]
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[-1].startswith("error: the MLflow store at sqlite:///mlruns/mlflow.db failed: "), err[-2000:]
    assert "not a database" in lines[-1]
    assert "Traceback" not in err
