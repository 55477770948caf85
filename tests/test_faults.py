"""Faults past the command line: a sweep killed outright, two sweeps on one machine, a store that fails."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from pipeline.jobs import workdirs
from tests.helpers.cli import run_cli, run_python, start_cli
from tests.helpers.env import child_env
from tests.helpers.processes import Command
from tests.helpers.runs import mlflow_runs, the_study
from tests.helpers.services import running_mlflow
from tests.helpers.settings import ROUND_STUDY
from tests.helpers.wait import process_gone, wait_for_steps, wait_until

FAST = ["measure.warmup_steps=1", "train.progress_bar=false"]


@pytest.mark.slow
def test_a_sweep_killed_outright_is_cleaned_up_by_the_next_command(tmp_path):
    """SIGKILL the sweep process (no handler runs): its job dies with it, but its MLflow runs stay RUNNING and its
    job folder and multiprocessing's folder (pymp-*) stay behind, until the next command on the store ends them
    truthfully and removes the folders. The killed job leaks no semaphore (issue 21: the resource tracker warned).
    The test's own temp dir (`clean_state`), short: multiprocessing's folder goes in it (`workdirs.socket_temp`)."""
    jobs = Path(os.environ["TMPDIR"])
    env = {"TMPDIR": str(jobs)}
    sweep = start_cli("-m", "train.steps=100000,6", "data.num_samples=64", *FAST, cwd=tmp_path, env=env)
    steps = wait_for_steps(jobs, 2, alive=sweep)
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


def test_a_sweep_under_a_temp_dir_too_deep_for_a_socket_trains_and_leaves_no_folder(tmp_path, monkeypatch):
    """multiprocessing makes its folder in the temp dir and the fork server's socket in it; an AF_UNIX path holds 107
    bytes, and under a deeper TMPDIR (a scheduler's, a test's) every job failed with `OSError: AF_UNIX path too long`
    and a traceback. The folder now goes in /tmp there, and goes at the end as it did."""
    deep = tmp_path / ("d" * 40) / ("e" * 40)
    deep.mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    assert workdirs.socket_temp() == Path("/tmp") and len(str(deep)) + workdirs.SOCKET_ROOM > workdirs.SOCKET_PATH_MAX
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path.parent))
    assert workdirs.socket_temp() == tmp_path.parent  # a temp dir short enough keeps the folder
    proc = run_cli("batch.split=4x1", "train.steps=2", *FAST, cwd=tmp_path, env={"TMPDIR": str(deep)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "[job] tiny 4x1: ok" in proc.stdout, proc.stderr[-2000:]
    assert not [f.name for f in deep.iterdir() if f.name.startswith(workdirs.TEMP_PREFIXES)]  # both gone at the end


@pytest.mark.slow
def test_ctrl_c_ends_the_job_without_a_leaked_semaphore(tmp_path):
    """Ctrl-C once the job trains: the job is killed, its run ends KILLED, exit code 130, and nothing warns of a
    leaked semaphore (issue 21: tqdm's multiprocessing lock, made in every job, was never unregistered)."""
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    sweep = start_cli("train.steps=100000", "data.num_samples=64", *FAST, cwd=tmp_path, env={"TMPDIR": str(jobs)})
    wait_for_steps(jobs, 1, alive=sweep)
    sweep.send_signal(signal.SIGINT)
    output = sweep.communicate(timeout=120)[0]
    assert sweep.returncode == 130, output[-2000:]
    assert "leaked semaphore" not in output and "resource_tracker" not in output, output[-2000:]
    assert "Traceback" not in output
    (run,) = mlflow_runs(tmp_path)
    assert run.info.status == "KILLED"
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}")
    assert "job.log" in {a.path for a in client.list_artifacts(run.info.run_id)}  # what it printed until stopped
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


@pytest.mark.slow
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


def test_ctrl_c_as_the_command_starts_is_one_line_and_exit_130(tmp_path):
    """Ctrl-C once the command has started its fork server (during its checks, or Hydra's start): exit code 130, one
    line, no traceback (a long check, `repeats=100000`, printed 44 lines of one), no run left open, and the fork
    server gone with the command."""
    cmd = Command("pipeline.train", "-m", "batch.split=1x4,4x1", *FAST, cwd=tmp_path, env=child_env())
    server = cmd.fork_server()
    cmd.ctrl_c()
    assert cmd.finish(120) == 130, cmd.output
    assert process_gone(server.pid)
    out = cmd.output
    assert "Traceback" not in out and "KeyboardInterrupt" not in out, out
    said = [line for line in out.splitlines() if line.startswith("interrupted")]
    killed = ["interrupted: runs in progress were marked KILLED"]
    assert said in (["interrupted before anything ran"], ["interrupted: no run was recorded yet"], killed), out
    runs = mlflow_runs(tmp_path) if (tmp_path / "mlruns" / "mlflow.db").exists() else []
    assert all(r.info.status == "KILLED" for r in runs) and bool(runs) == (said == killed), out


# A Ctrl-C heard, then the error a library's clean-up raised where it struck (OmegaConf's `finally` on the state the
# interrupt left half made), in place of the KeyboardInterrupt: 3 runs of 25 of the test above, before.
STRUCK_IN_A_LIBRARY = """
import sys
from pipeline.commands import cli
from pipeline.commands.interrupts import Interrupts
from pipeline.config.errors import ConfigError

def struck(*args, **kwargs):
    Interrupts.signalled = True
    error = AttributeError("'NoneType' object has no attribute '_invalidate_flags_cache'")
    if sys.argv[1] == "raised":
        raise error
    cli._refuse(ConfigError("defaults", str(error)))  # the precheck's own reading of it: bad input

if sys.argv[2] == "checks":
    cli.checked_argv = struck
    cli.run_entry("pipeline.train", "config", print, "doc", [])
cli.run_entry("pipeline.train", "config", struck, "doc", ["train.steps=2", "measure.warmup_steps=1"])
"""


# A Ctrl-C that lands as MLflow is imported in Hydra's start (the sweep's callback imports it), as a terminal user's did
CUT_IN_MLFLOWS_IMPORT = """
import sys, importlib.abc

class Cut(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "mlflow.entities":
            sys.meta_path.remove(self)
            print("cut in", "Hydra's start" if "hydra._internal.hydra" in sys.modules else "the checks", flush=True)
            raise KeyboardInterrupt

sys.meta_path.insert(0, Cut())
from pipeline.commands import cli
cli.run_entry("pipeline.train", "config", print, "doc", ["-m", "train.steps=2", "measure.warmup_steps=1"])
"""


@pytest.mark.slow
def test_a_ctrl_c_that_cuts_mlflows_import_in_half_is_one_line_and_exit_130(tmp_path):
    """MLflow half imported when the Ctrl-C landed: the interrupt's clean-up imported the store again, which raised
    from the half-made module (`partially initialized module 'mlflow'`): a traceback and exit 1. Nothing was recorded,
    so nothing is imported and the line says so."""
    proc = run_python("-c", CUT_IN_MLFLOWS_IMPORT, cwd=tmp_path, timeout=120)
    said = (130, "cut in Hydra's start\n", "interrupted: no run was recorded yet\n")
    assert (proc.returncode, proc.stdout, proc.stderr) == said, proc.stdout[-2000:] + proc.stderr[-3000:]


@pytest.mark.parametrize("where", ["checks", "task"])
@pytest.mark.parametrize("how", ["raised", "refused"])
def test_an_error_that_follows_a_ctrl_c_is_said_as_the_interrupt(tmp_path, how, where):
    """In the checks: `interrupted before anything ran`, 130, no traceback and no `error:` line (before: a traceback
    and 1, or `error: defaults: ...` and 2). In the task (Hydra's run), which opened no run: the interrupted line of a
    run that says so (it said runs were marked KILLED where there were none)."""
    proc = run_python("-c", STRUCK_IN_A_LIBRARY, how, where, cwd=tmp_path, timeout=120)
    said = "interrupted before anything ran" if where == "checks" else "interrupted: no run was recorded yet"
    assert (proc.returncode, proc.stderr) == (130, said + "\n"), proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stdout


FIRST_CTRL_C = ("once the job line is out", "once the job trained a step")
SECOND_CTRL_C = ("right after the first", "once the interrupted line is out", "once the job's run is KILLED")


def _interrupt_twice(folder: Path, first: str, second: str) -> str | None:
    """One try: a sweep whose first job would train for hours, Ctrl-C'd twice as a terminal does (SIGINT to its whole
    process group: the command, its fork server, its job), each at a condition; what went wrong, or None."""
    jobs = folder / "jobs"
    jobs.mkdir(parents=True)
    cmd = Command(
        "pipeline.train",
        *("-m", "train.steps=100000,6", "data.num_samples=64", *FAST),
        cwd=folder,
        env=child_env(TMPDIR=str(jobs)),
    )
    cmd.wait_for("[job] tiny 4x1 steps=100000: starting")
    if first == FIRST_CTRL_C[1]:
        wait_for_steps(jobs, 1, alive=cmd.running)
    cmd.ctrl_c()
    if second == SECOND_CTRL_C[1]:
        cmd.wait_for("interrupted: ")
    elif second == SECOND_CTRL_C[2]:  # the command may be gone by then: the second Ctrl-C then reaches nobody
        wait_until(
            lambda: {r.info.status for r in mlflow_runs(folder) if r.data.tags["kind"] == "job"} == {"KILLED"},
            120,
            "the job's run ended KILLED",
        )
    cmd.ctrl_c()
    code = cmd.finish(180)
    out = cmd.output
    runs = {r.data.tags["kind"]: r.info.status for r in mlflow_runs(folder)}
    problems = []
    if code != 130:
        problems.append(f"exit code {code}")
    if re.search(r"Traceback|KeyboardInterrupt|Process batch-split-job|Exception ignored", out):
        problems.append("a traceback")
    if "interrupted: runs in progress were marked KILLED" not in out:
        problems.append("no line saying the runs were ended")
    if runs != {"sweep": "KILLED", "job": "KILLED"}:
        problems.append(f"runs {runs}")
    job_files = list(jobs.glob("batch-split-job-*/process.json"))
    if job_files and not wait_until(lambda: process_gone(json.loads(job_files[0].read_text())["pid"]), 15, "job end"):
        problems.append("the job outlived its command")
    return f"{first}, then {second}: {', '.join(problems)}\n{out[-3000:]}" if problems else None


@pytest.mark.slow
def test_ctrl_c_twice_ends_every_run_killed_without_a_traceback(tmp_path):
    """Ctrl-C twice, the second within a second or so of the first, once at each pair of conditions (the job line out
    or a step trained; then at once, once the command said it was interrupted, or once the job's run was ended): every
    try exits with 130, ends the sweep and its job KILLED, and prints no traceback. Two tries in five printed one
    (`Process batch-split-job:`, the job's own KeyboardInterrupt) where the second Ctrl-C broke off the clean-up or
    reached the job before the command killed it: six tries miss that one time in twenty."""
    failures = []
    pairs = [(first, second) for first in FIRST_CTRL_C for second in SECOND_CTRL_C]
    for attempt, (first, second) in enumerate(pairs):
        failure = _interrupt_twice(tmp_path / f"try{attempt}", first, second)
        if failure:
            failures.append(f"try {attempt}: {failure}")
    assert not failures, "\n\n".join(failures)


@pytest.mark.slow
def test_a_tracking_server_that_stops_answering_is_said_and_the_sweep_goes_on(tmp_path):
    """The sweep's MLflow server stopped (SIGSTOP: it takes connections and answers none) while a job runs: one line
    says the server has not answered for 10 s, one more that it answers again once it goes on, and the sweep ends as
    if nothing happened. MLflow's own `View run ... at:` lines stay out of the output."""
    with running_mlflow(f"sqlite:///{tmp_path / 'server.db'}", keep_logs_in=tmp_path) as server:
        cmd = Command(
            "pipeline.train",
            *("-m", "batch.split=1x4,4x1", "train.steps=6", *FAST, f"tracking.uri={server.url}"),
            cwd=tmp_path,
            env=child_env(),
        )
        cmd.wait_for("[job] tiny 1x4: starting")
        os.killpg(server.group, signal.SIGSTOP)
        try:
            cmd.wait_for(f"[mlflow] {server.url} has not answered for 10 s; waiting for it", 120)
        finally:
            os.killpg(server.group, signal.SIGCONT)
        code = cmd.finish(300)
        out = cmd.output
        client = MlflowClient(server.url)
        runs = client.search_runs([client.get_experiment_by_name("batch-split").experiment_id])
    assert code == 0, out[-3000:]
    again = re.findall(rf"^\[mlflow\] {re.escape(server.url)} answers again, after (\d+) s$", out, re.MULTILINE)
    assert len(again) == 1 and int(again[0]) >= 10, out[-3000:]
    assert "View run" not in out and "View experiment" not in out, out[-3000:]
    assert "[sweep] 2 of 2 jobs finished" in out
    assert sorted((r.data.tags["kind"], r.info.status) for r in runs) == [
        ("job", "FINISHED"),
        ("job", "FINISHED"),
        ("sweep", "FINISHED"),
    ]


STUDY = [
    *ROUND_STUDY,
    "optimize.study_name=killed",  # the same study for both commands
    "optimize.confirm_rounds=3",
    "optimize.confirm_share=0.85",  # 5.7x the search's device time: three rounds even where its processes run slower
]


@pytest.mark.slow
def test_a_study_killed_during_its_round_ends_its_parent_run_truthfully_when_it_goes_on(tmp_path):
    """SIGKILL once the confirmation round runs (no handler runs: the parent run stays RUNNING), then the same
    command: its clean-up ends the parent KILLED, saying the process ended without closing it; the study goes on in
    that parent run, and once it has its answer the run is FINISHED, `ok`, and says nothing of the kill any more (it
    kept the note, FINISHED beside `ended without closing it`)."""
    worker = Command("pipeline.optimize", *STUDY, cwd=tmp_path, env=child_env())
    worker.wait_for("[job] confirm 1: ", 600)  # its run is open: the round has begun
    worker.proc.kill()
    assert worker.finish(60) == -signal.SIGKILL
    (parent,) = [r for r in mlflow_runs(tmp_path) if r.data.tags["kind"] == "study"]
    assert parent.info.status == "RUNNING"  # what a kill leaves

    again = Command("pipeline.optimize", *STUDY, cwd=tmp_path, env=child_env())
    assert again.finish(900) == 0, again.output[-3000:]
    assert "[clean-up] ended " in again.output
    (resumed,) = [r for r in mlflow_runs(tmp_path) if r.data.tags["kind"] == "study"]
    assert resumed.info.run_id == parent.info.run_id
    assert (resumed.info.status, resumed.data.tags["status"]) == ("FINISHED", "ok"), resumed.data.tags
    assert "ended without closing it" not in resumed.data.tags.get("note", ""), resumed.data.tags


def test_a_job_whose_command_went_before_it_began_ends_without_a_traceback(capsys):
    """The fork server forks a job, then the command that asked for it is gone (a second Ctrl-C) before it sends the
    job its work: the job's read of it (multiprocessing's own `spawn._main`, on a real pipe whose writer closed) fails
    in EOFError, which the fork server prints through `sys.excepthook`. Once the job's modules are imported (as the
    fork server imports them) that says nothing; any other exception still prints its traceback. One try in twenty
    of the double Ctrl-C test printed it."""
    import multiprocessing.spawn
    import sys

    import pipeline.jobs.child  # noqa: F401 - what the fork server imports before it forks a job

    read, write = os.pipe()
    os.close(write)  # the command is gone: nothing will come
    with pytest.raises(EOFError) as orphaned:
        multiprocessing.spawn._main(read, os.open(os.devnull, os.O_RDONLY))
    sys.excepthook(orphaned.type, orphaned.value, orphaned.tb)
    assert capsys.readouterr().err == ""
    with pytest.raises(EOFError) as other:
        raise EOFError("elsewhere")  # not where a job reads its work
    sys.excepthook(other.type, other.value, other.tb)
    assert "Traceback" in capsys.readouterr().err


def test_a_ctrl_c_while_a_job_process_starts_is_heard_and_the_child_ignores_it(tmp_path):
    """The Ctrl-C that struck in the instant the fork server was spawned was lost (SIGINT was ignored in the command
    meanwhile, so that the child would start ignoring it): the sweep ran to its end, exit 0. The command keeps its
    handler now; the child starts with SIGINT blocked and ignores it once the job module is imported."""
    from pipeline.jobs.runner import _ctrl_c_left_to_this_process

    heard = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: heard.append(signum))
    probe = (
        "import signal; blocked = lambda: signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, []); "
        "print(blocked(), end=' '); import pipeline.jobs.child; "
        "print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN, blocked())"
    )
    try:
        with _ctrl_c_left_to_this_process():
            os.kill(os.getpid(), signal.SIGINT)  # the Ctrl-C, inside the window
            child = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=child_env())
        wait_until(lambda: heard, 5, "the Ctrl-C")  # the handler runs at the interpreter's next check
    finally:
        signal.signal(signal.SIGINT, previous)
    assert heard == [signal.SIGINT]
    assert child.returncode == 0, child.stderr[-2000:]
    assert child.stdout.split() == ["True", "True", "False"]  # blocked from its start; then ignored, unblocked


# A study of two splits whose probes and trials are short, one trial, no round
PROBED = [
    "mem_cap=4GiB",
    "batch.effective=2",
    "optimize.trials=1",
    "optimize.confirm=never",
    "optimize.probe_steps=2",
    "train.steps=6",
    *FAST,
]


@pytest.mark.slow
def test_a_study_killed_once_its_first_probe_said_ok_does_not_measure_it_again(tmp_path):
    """SIGKILL once the first probe's `ok` line is out (no handler runs), then the same command: that probe's finding
    was kept on the study before its line was printed, so it is said to be kept and not run again, and the study
    goes on to its answer with it (it measured that probe again)."""
    first = Command("pipeline.optimize", *PROBED, cwd=tmp_path, env=child_env())
    first.wait_for("[job] probe 1x1: ok", 600)
    first.proc.kill()
    assert first.finish(60) == -signal.SIGKILL

    again = Command("pipeline.optimize", *PROBED, cwd=tmp_path, env=child_env())
    assert again.finish(900) == 0, again.output[-3000:]
    assert "[study] probe 1x1: measured before the study stopped; not run again" in again.output, again.output
    assert "[job] probe 1x1: starting" not in again.output
    assert "[job] probe 2x1: ok" in again.output
    probes = [r for r in mlflow_runs(tmp_path) if r.data.tags["kind"] == "probe"]
    assert [r.info.status for r in probes if r.info.run_name == "probe 1x1"] == ["FINISHED"]
    study = the_study(f"sqlite:///{tmp_path / 'mlruns' / 'optuna.db'}")
    assert len(study.user_attrs["calibration"]["probes"]) == 2  # both probes' peaks fit the predictor


@pytest.mark.slow
def test_an_interrupted_study_counts_its_killed_trials_device_time(tmp_path):
    """Ctrl-C while a trial trains: the answer's `device time used by jobs` and the study run's `gpu_seconds` count
    the seconds the killed trial ran (at least the steps it logged) beside the probes' (they left it out)."""
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    study = Command(
        "pipeline.optimize",
        *PROBED,
        "train.steps=100000",
        "data.num_samples=64",
        cwd=tmp_path,
        env=child_env(TMPDIR=str(jobs)),
    )
    study.wait_for("[job] trial 0: ", 600)  # the probes' folders are gone: the one left is the trial's

    def trained(least_s: float) -> float:
        for path in jobs.glob("batch-split-job-*/steps.jsonl"):
            lines = path.read_text(encoding="utf-8").splitlines()[:-1]  # the last may be half written
            total = sum(json.loads(line)["step_time_s"] for line in lines)
            if total >= least_s:
                return total
        return 0.0

    logged = wait_until(lambda: trained(3.0), 300, "3 s of the trial's steps", alive=study.running)
    study.ctrl_c()
    assert study.finish(180) == 130, study.output[-3000:]
    said = re.search(r"^device time used by jobs \(probes and confirmation included\): (\d+) s$", study.output, re.M)
    assert said, study.output[-3000:]
    stored = the_study(f"sqlite:///{tmp_path / 'mlruns' / 'optuna.db'}")
    probes = stored.user_attrs["calibration"]["gpu_seconds"]
    assert int(said[1]) >= round(probes + logged) - 1, (said[1], probes, logged)
    (parent,) = [r for r in mlflow_runs(tmp_path) if r.data.tags["kind"] == "study"]
    assert parent.data.metrics["gpu_seconds"] >= probes + logged


@pytest.mark.slow
def test_a_job_stopped_mid_run_is_said_left_out_of_its_steady_steps_and_noted(tmp_path):
    """The job stopped (SIGSTOP) once it trains, past its stall limit (launcher.stall_s=2; the tiny model's steps take
    a fraction of a second): one line says it has logged no step since its last, one more that it steps again once
    SIGCONT lets it go on. The step the stop fell in is no steady step: its run counts the others, says which it left
    out and why (a tag, metrics, its page), and so do the job's last line and the sweep's table."""
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    total = 300
    cmd = Command(
        "pipeline.train",
        *("-m", "batch.split=4x1", f"train.steps={total}", "data.num_samples=64", "launcher.stall_s=2", *FAST),
        cwd=tmp_path,
        env=child_env(TMPDIR=str(jobs)),
    )
    steps = wait_for_steps(jobs, 3, alive=cmd.running)
    job = json.loads((steps.parent / "process.json").read_text())["pid"]
    os.kill(job, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        logged = len(steps.read_text(encoding="utf-8").splitlines())
        said = cmd.wait_for("[job] tiny 4x1: no step for ", 120)
        wait_until(lambda: time.monotonic() - stopped >= 3.0, 10, "3 s stopped")  # a bound, not a race: >= 3 s
    finally:
        os.kill(job, signal.SIGCONT)
    assert logged <= total - 2  # a step still to end after SIGCONT: its time holds the 3 s stopped
    assert cmd.finish(300) == 0, cmd.output[-3000:]
    out = cmd.output
    stalled = re.fullmatch(r"\[job\] tiny 4x1: no step for (\d+) s \(last at step (\d+)\); waiting\n", said)
    assert stalled and int(stalled[1]) >= 2, said
    again = re.findall(r"^\[job\] tiny 4x1: steps again \(step (\d+)\), after (\d+) s$", out, re.M)
    assert len(again) == 1 and int(again[0][0]) > int(stalled[2]) and int(again[0][1]) >= 2, out[-3000:]
    assert out.count("no step for") == 1
    ended = re.search(
        r"^\[job\] tiny 4x1: ok, step [\d.]+ s; (?P<note>step (?P<step>\d+) took (?P<took>[\d.]+) s, over the stall "
        r"limit of 2 s: left out of the steady steps)(?:; \d+ library warnings? in its job\.log)?$",
        out,
        re.M,
    )
    assert ended and int(ended["step"]) >= logged and float(ended["took"]) >= 3.0, out[-3000:]
    (run,) = [r for r in mlflow_runs(tmp_path) if r.data.tags.get("kind") == "job"]
    metrics, tags = run.data.metrics, run.data.tags
    assert run.info.status == "FINISHED" and tags["stall_note"] == ended["note"]
    assert metrics["stalled_steps"] == 1 and metrics["stalled_max_s"] >= 3.0
    assert metrics["steady_steps"] == total - 1 - 1  # the warm-up's one step and the stalled one left out
    assert metrics["step_time_p90_s"] < 2.0  # no stopped time in the steady steps
    assert "1 stalled step left out (" in tags["mlflow.note.content"]
    notes = out.partition("notes of each config's runs:\n")[2]  # the table's notes, under it at 120 columns
    assert re.match(r"  tiny 4x1: (.*[;,] )?1 stalled step left out \(\d+ s\)", notes), out[-3000:]  # after drift


def test_a_step_over_the_stall_limit_leaves_the_steady_steps_and_is_noted():
    """The rule after a job ended: a steady step over launcher.stall_s (or, unset, ten typical steps and at least
    30 s) is marked on the result, leaves the statistics (its 41 s no longer makes a cv over 400%), and the run's
    metrics, page and the table's notes say so; a limit under most steps is the job's pace, not a stall."""
    from pipeline.jobs import stall
    from pipeline.measure.summary import summarize_job
    from pipeline.records import RunKind
    from pipeline.render.rows import Criteria, notes
    from pipeline.summaries import JobSummary, RecordedJob
    from pipeline.tracking import figures
    from tests.helpers.records import result

    times = [5.0] + [0.05 + 0.001 * (i % 3) for i in range(2, 20)]
    times[6] = 41.0  # step 7: stopped for 40 s
    job = result(times)
    before = summarize_job(job, 1, 0.95)
    assert before.step_time.n == 18 and before.step_time.cv > 4  # what it was: one steady step of 41 s, cv 400%+
    for stall_s, limit in ((None, stall.STALL_MIN_S), (2.0, 2.0)):
        marked = stall.mark(job, 1, stall_s)
        assert (marked.stalled_steps, marked.stall_limit_s) == ((7,), limit)
        summary = summarize_job(marked, 1, 0.95)
        assert summary.step_time.n == 17 and summary.step_time.cv < 0.05 and summary.step_time.p90 < 0.06
        assert (summary.stalled_steps, summary.stalled_max_s) == (1, 41.0)
    assert figures.stall_note(marked) == "step 7 took 41.0 s, over the stall limit of 2 s: left out of the steady steps"
    assert stall.mark(job, 1, 0.01) == job  # every step over it: no stall, the job's own pace
    assert stall.mark(result([0.05] * 20), 1, None) == result([0.05] * 20)
    back = JobSummary.from_metrics(summary.status, summary.fit, figures.metrics(summary))
    assert (back.stalled_steps, back.stalled_max_s) == (1, 41.0)
    assert "1 stalled step left out (41 s)" in figures.description("tiny 4x1", back)
    runs = [RecordedJob(f"r{i}", "tiny 4x1", "c", i, RunKind.JOB, s) for i, s in enumerate([back, before])]
    criteria = Criteria(max_drift=10.0, max_cv=100.0, busy_threshold=0.0)
    assert notes(runs, criteria) == ["1 stalled step left out (41 s) in 1 of 2 runs"]


def test_a_stall_is_no_step_for_its_window_while_the_job_idles(tmp_path):
    """The rule read on a steps file and CPU samples: no step for 30 s (or ten of its typical steps, when slower)
    with its processes idle is a stall; the same time busy on the CPU (compiling) is none, nor the time before its
    first step or after its last."""
    from pipeline.jobs import stall

    path = tmp_path / "steps.jsonl"
    records = [{"step": 1, "step_time_s": 40.0, "compile_s": 39.0}] + [
        {"step": n, "step_time_s": 0.05} for n in range(2, 6)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + '{"step": 6, "st', encoding="utf-8")
    steps = stall._Steps(path, os.getpid())
    assert steps.read(100.0) and (steps.last, steps.last_at) == (5, 100.0)  # the half-written line waits
    assert steps.window() == stall.STALL_MIN_S  # the compiling first step is not a typical one
    steps.cpu.clear()
    steps.cpu.extend([(100.0, 10.0), (131.0, 10.5)])
    assert steps.stalled(131.0, total=10) and not steps.stalled(120.0, total=10)
    assert not steps.stalled(131.0, total=5)  # its last step: what follows is its ending
    steps.cpu[-1] = (131.0, 35.0)
    assert not steps.stalled(131.0, total=10)  # busy: working
    with path.open("a", encoding="utf-8") as more:  # a slow model's steps: ten of them make its window
        more.write(
            'ep_time_s": 6.0}\n' + "".join(json.dumps({"step": n, "step_time_s": 6.0}) + "\n" for n in range(7, 30))
        )
    assert steps.read(140.0) and steps.last == 29 and steps.window() == 60.0


def test_a_ctrl_c_inside_a_store_call_lands_after_it_and_a_second_one_at_once():
    """A study stopped with Ctrl-C mid-write ended `database is locked` (its transaction left open on a pooled SQLite
    connection, its cleanup's writes waiting on it): the first Ctrl-C now lands once the call has returned, a second
    one inside the call at once, and the handler is the caller's again after either."""
    from pipeline.tracking.watched import WatchedClient

    committed = []

    class Store:
        def write(self, presses: int) -> str:
            for _ in range(presses):
                os.kill(os.getpid(), signal.SIGINT)
            committed.append(presses)
            return "written"

    client = WatchedClient(Store(), "sqlite:///mlruns/mlflow.db")
    with pytest.raises(KeyboardInterrupt):
        client.write(1)
    assert committed == [1]
    with pytest.raises(KeyboardInterrupt):
        client.write(2)
    assert committed == [1]  # the second press stopped the call before its commit
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert client.write(0) == "written" and committed == [1, 0]


def test_a_ctrl_c_as_a_run_is_made_leaves_the_run_known_and_ended_killed(tmp_path):
    """A notebook's interrupt that struck as the store made a run (the next job of a confirmation round) left that run
    RUNNING for good: made in the store, never known to the process, whose owner (the kernel) lives on, so no clean-up
    ends it. Now the interrupt lands once the run is kept open, and the interrupt's clean-up ends it KILLED."""
    from mlflow.tracking import MlflowClient

    from pipeline.tracking import store

    tracker = store.Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "interrupted", str(tmp_path / "artifacts"))
    real = tracker.client._client

    class StruckAsItReturns:  # the real client; the Ctrl-C comes once the run is in the store
        def __getattr__(self, name):
            return getattr(real, name)

        def create_run(self, *args, **kwargs):
            run = real.create_run(*args, **kwargs)
            os.kill(os.getpid(), signal.SIGINT)
            return run

    tracker.client._client = StruckAsItReturns()
    before = store.open_runs()
    with pytest.raises(KeyboardInterrupt):
        tracker.start("confirm 1: tiny 4x1")
    (run,) = MlflowClient(tracker.uri).search_runs([tracker.experiment_id])
    assert store.open_runs() - before == {run.info.run_id}
    assert store.end_open_runs(keep=before) == 1
    assert MlflowClient(tracker.uri).get_run(run.info.run_id).info.status == "KILLED"


def test_a_ctrl_c_as_a_run_ends_leaves_it_as_it_ended(tmp_path):
    """The mirror case: an interrupt that struck as the store ended a run FINISHED left it kept open here, and the
    interrupt's clean-up then marked the finished run KILLED. Now it lands once the run is no longer kept open."""
    from mlflow.tracking import MlflowClient

    from pipeline.tracking import store

    tracker = store.Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "interrupted", str(tmp_path / "artifacts"))
    before = store.open_runs()
    run_id = tracker.start("confirm 0: tiny 4x1")
    real = tracker.client._client

    class StruckAsItReturns:
        def __getattr__(self, name):
            return getattr(real, name)

        def set_terminated(self, *args, **kwargs):
            real.set_terminated(*args, **kwargs)
            os.kill(os.getpid(), signal.SIGINT)

    tracker.client._client = StruckAsItReturns()
    with pytest.raises(KeyboardInterrupt):
        tracker.end(run_id)
    assert store.open_runs() == before and store.end_open_runs(keep=before) == 0
    assert MlflowClient(tracker.uri).get_run(run_id).info.status == "FINISHED"


STRUCK_START = """
import os, signal
from multiprocessing import reduction
from pipeline.adapters.forkserver import server_pid
from pipeline.jobs import runner

runner.warm_up("forkserver")  # the server up and done with its imports
server, real = server_pid(), reduction.sendfds
for presses in (1, 2):
    def struck(sock, fds):  # a terminal's Ctrl-C, to the whole group, as the request is about to be sent
        for _ in range(presses):
            os.killpg(0, signal.SIGINT)
        return real(sock, fds)

    reduction.sendfds = struck
    try:
        runner.warm_up("forkserver")
    except KeyboardInterrupt:
        reduction.sendfds = real
        runner.warm_up("forkserver")  # served after the request before it, in the order they came
        print(presses, "interrupted; the same server serves the next:", server_pid() == server, flush=True)
"""


@pytest.mark.slow
def test_a_ctrl_c_as_a_job_starts_lands_once_it_runs_and_leaves_the_fork_server_quiet():
    """One Ctrl-C (CI saw it) or two as a job is handed to the fork server: cut between connecting and sending its
    request, the start left the server reading half a request, and it died printing `EOFError` from
    `multiprocessing/reduction.py` on the console. Now the interrupt lands once the job is started: no traceback, the
    server lives on. Its own process group, as a terminal's command has: the Ctrl-C goes to the whole group."""
    child = subprocess.run(
        [sys.executable, "-c", STRUCK_START],
        cwd=Path(__file__).parents[1],
        capture_output=True,
        text=True,
        timeout=300,
        env=child_env(),
        start_new_session=True,
    )
    said = "".join(f"{n} interrupted; the same server serves the next: True\n" for n in (1, 2))
    assert (child.returncode, child.stdout, child.stderr) == (0, said, ""), child.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["subprocess", "forkserver"])
def test_a_ctrl_c_held_through_a_jobs_start_kills_the_job_it_started(tmp_path, compose, monkeypatch, kind):
    """The Ctrl-C held through a start lands once the child runs, where the caller has no handle on it yet: the start
    kills the child before raising, instead of leaving a job that trains on beside the interrupted command."""
    from multiprocessing import reduction

    from pipeline.config.validate import validate
    from pipeline.jobs import runner
    from pipeline.jobs.task import job_spec

    spec = job_spec(validate(compose("train.steps=100000", "train.progress_bar=false")))
    started = []
    if kind == "subprocess":

        class Popen(subprocess.Popen):  # the Ctrl-C as the child is made (SIGINT is blocked here: it lands after)
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                started.append(self)
                # to this thread: sent to the process, another of its threads (not blocking SIGINT) took it, and on
                # a busy machine Python raised it in this one only after the start had returned (CI, once)
                signal.pthread_kill(threading.get_ident(), signal.SIGINT)

        monkeypatch.setattr(runner.subprocess, "Popen", Popen)
    else:
        runner.warm_up(kind)
        real_sendfds, real_start = reduction.sendfds, runner._start_whole

        def sendfds(sock, fds):  # the Ctrl-C as the request is about to be sent (to this thread, as above)
            signal.pthread_kill(threading.get_ident(), signal.SIGINT)
            return real_sendfds(sock, fds)

        monkeypatch.setattr(reduction, "sendfds", sendfds)
        monkeypatch.setattr(runner, "_start_whole", lambda process: real_start(started.append(process) or process))
    with pytest.raises(KeyboardInterrupt):
        runner.start(kind, spec, tmp_path / "job")
    assert len(started) == 1 and started[0].pid is not None and process_gone(started[0].pid)


STRUCK_IN_A_MIGRATION = """
import os, signal, sys
from sqlalchemy import event
from sqlalchemy.engine import Engine

def struck(conn, cursor, statement, *args):  # the Ctrl-C as a migration has made its table's temporary copy
    if not struck.done and statement.lstrip().upper().startswith("CREATE TABLE _ALEMBIC_TMP_"):
        struck.done = True
        os.kill(os.getpid(), signal.SIGINT)
struck.done = False
if sys.argv[2] == "struck":
    event.listen(Engine, "before_cursor_execute", struck)
from pipeline.tracking.store import Tracker
try:
    Tracker(f"sqlite:///{sys.argv[1]}/mlflow.db", "interrupted", sys.argv[1] + "/artifacts")
    print("made")
except KeyboardInterrupt:
    print("interrupted")
"""


@pytest.mark.slow
def test_a_ctrl_c_during_a_new_stores_migrations_leaves_a_store_the_next_command_opens(tmp_path):
    """A Ctrl-C as a sweep made its store struck MLflow's schema migrations half done: every later command on that
    store failed (`table _alembic_tmp_experiments already exists`, with a traceback). The migrations now finish
    first, and the interrupt lands after them."""
    first = run_python("-c", STRUCK_IN_A_MIGRATION, str(tmp_path), "struck", cwd=tmp_path, timeout=120)
    assert (first.returncode, first.stdout) == (0, "interrupted\n"), first.stderr[-3000:]
    second = run_python("-c", STRUCK_IN_A_MIGRATION, str(tmp_path), "plain", cwd=tmp_path, timeout=120)
    assert (second.returncode, second.stdout) == (0, "made\n"), second.stderr[-3000:]


STRUCK_IN_A_GC_CALLBACK = """
import os, signal, weakref
from pipeline.commands.interrupts import Interrupts

Interrupts.install()

class Thing:
    pass

def callback(ref):  # the Ctrl-C lands inside a garbage collector's callback, as one of SQLAlchemy's
    os.kill(os.getpid(), signal.SIGINT)

thing = Thing()
ref = weakref.ref(thing, callback)
try:
    del thing
    for _ in range(10**8):
        pass
    print("went on")
except KeyboardInterrupt:
    print("stopped")
"""


def test_a_ctrl_c_that_lands_where_python_ignores_exceptions_still_stops_the_command(tmp_path):
    """A terminal user's Ctrl-C landed in SQLAlchemy's garbage-collector callback: Python printed `Exception ignored
    in: <function _collection_gced ...>` with the KeyboardInterrupt, and the sweep ran on to its end, exit 0. The
    interrupt is heard again once the callback is done: the command stops, and nothing is printed."""
    proc = run_python("-c", STRUCK_IN_A_GC_CALLBACK, cwd=tmp_path, timeout=120)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "stopped\n", ""), proc.stderr[-3000:]


CUT_IN_AN_ENTRYS_IMPORTS = """
import importlib.abc, os, signal, sys

class Cut(importlib.abc.MetaPathFinder):  # a Ctrl-C as the command imports Hydra, before its main runs
    def find_spec(self, name, path, target=None):
        if name == "hydra":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)

sys.meta_path.insert(0, Cut())
"""


def test_a_ctrl_c_as_a_command_imports_its_libraries_is_one_line_and_exit_130(tmp_path):
    """`python -m pipeline.optimize` Ctrl-C'd in its first seconds, while it imports: Python printed the import's
    KeyboardInterrupt traceback and the command died of the signal (status -2). Now one line and exit 130. The Ctrl-C
    comes from a `sitecustomize` module, which Python imports before the command."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(CUT_IN_AN_ENTRYS_IMPORTS, encoding="utf-8")
    paths = os.pathsep.join([str(tmp_path / "site"), str(Path(__file__).parents[1])])
    proc = run_python("-m", "pipeline.optimize", cwd=tmp_path, env={"PYTHONPATH": paths}, timeout=120)
    assert (proc.returncode, proc.stdout, proc.stderr) == (130, "", "interrupted before anything ran\n"), proc.stderr
