"""A job's output: its libraries' warnings, log records and stray lines go to its log (`job.log`, an artifact of its
run), its console line counts the warnings and names the log, a failure's own words still reach the console, and
-v (launcher.verbose) shows everything as it comes."""

from __future__ import annotations

import importlib
import logging
import re
import subprocess
import sys
import warnings
from io import StringIO
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from pipeline.commands import cli, train
from pipeline.jobs import joblog, library_warnings
from tests.helpers.cli import run_python
from tests.helpers.noisy import noisy_folder
from tests.helpers.runs import mlflow_runs

FAST = ["train.steps=3", "measure.warmup_steps=1"]
JOB_LINE = re.compile(
    r"\[job\] tiny 4x1: (?P<end>.+); (?:(?P<count>\d+) library warnings in its job\.log|its output in (?P<log>\S+))$"
)
STARTING = re.compile(r"\[job\] tiny 4x1: starting \(\w+\), MLflow run (?P<run>[0-9a-f]{32})$")


def _fakelib(folder: Path):
    """A module outside the repository, as a library is, that warns and logs as it is told."""
    (folder / "fakelib.py").write_text(
        "import logging, warnings\n"
        "own = logging.getLogger('fakelib.own')  # a handler of its own, not propagating (as transformers')\n"
        "own.addHandler(logging.StreamHandler()); own.propagate = False\n"
        "bare = logging.getLogger('fakelib.bare')  # none: the root's handlers, or Python's last resort\n"
        "def noisy(n):\n"
        "    for i in range(n):\n"
        "        warnings.warn('same every time', UserWarning)\n"
        "    for i in range(3):\n"
        "        own.warning('record %d', i)\n"
        "    bare.error('a bare error')\n"
        "    bare.info('below the level')\n",
        encoding="utf-8",
    )
    sys.path.insert(0, str(folder))
    try:
        return importlib.import_module("fakelib")
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("fakelib", None)


def test_library_warnings_are_counted_by_kind_each_written_once_and_put_back(tmp_path, capsys):
    fakelib = _fakelib(tmp_path)
    shown_before, filters_before, factory_before = (
        warnings.showwarning,
        list(warnings.filters),
        logging.getLogRecordFactory(),
    )
    with library_warnings.counted() as fired:
        fakelib.noisy(5000)
    err = capsys.readouterr().err
    assert err.count("UserWarning: same every time") == 1  # written once, counted every time
    assert "below the level" not in err
    assert re.findall(r"^record \d$", err, re.M) == ["record 0", "record 1", "record 2"]  # each record, as written
    assert fired.count == 5000 + 3 + 1
    kinds = dict(fired.kinds)
    assert kinds[f"UserWarning at {tmp_path / 'fakelib.py'}:7: same every time"] == 5000
    assert kinds["WARNING from fakelib.own: record 0"] == 1 and kinds["ERROR from fakelib.bare: a bare error"] == 1
    summary = fired.summary().splitlines()
    assert summary[0] == "[job] library warnings: 5004 of 5 kinds, by how often each fired:"
    assert summary[1] == f"  5000  UserWarning at {tmp_path / 'fakelib.py'}:7: same every time"
    assert (warnings.showwarning, warnings.filters, logging.getLogRecordFactory()) == (
        shown_before,
        filters_before,
        factory_before,
    )
    assert library_warnings.Fired().summary() == ""  # nothing fired: nothing said


def test_the_console_copy_of_a_log_holds_all_of_it_and_a_tail_is_its_last_lines(tmp_path):
    """What a process wrote while followed is on the console once it has ended, whole, however the reads cut it (a
    two-byte character among them); the tail drops blank lines and cuts a line of thousands of characters."""
    log, console = tmp_path / "job.log", StringIO()
    writer = "import sys\nfor i in range(20000): sys.stderr.write(f'line {i} é\\n')\nsys.stderr.write('x' * 5000)\n"
    with open(log, "ab") as out, joblog.follow(log, console):
        subprocess.run([sys.executable, "-c", writer], stderr=out, check=True)
    assert console.getvalue() == log.read_text(encoding="utf-8")
    assert console.getvalue().count("\n") == 20000
    tail = joblog.tail(log, lines=3)
    assert tail[:2] == ["line 19998 é", "line 19999 é"]
    assert tail[2] == "x" * (joblog.TAIL_WIDTH - 1) + "…"
    assert joblog.tail(tmp_path / "missing.log") == []


def test_a_job_whose_folder_is_gone_as_it_is_forked_leaves_its_output_alone(tmp_path):
    """Its command, interrupted, removed the folder while the job was being forked: nothing to redirect to, and
    nothing said (it printed a traceback where the command had said it was interrupted)."""
    assert joblog.redirect(tmp_path / "gone" / "job.log") is False
    assert not (tmp_path / "gone").exists()


def test_v_asks_for_every_line_on_the_console():
    argv = cli.checked_argv("pipeline.train", "config", train.__doc__, ["-v", "--cfg", "job"], None, True)
    assert argv == ["--cfg", "job", "launcher.verbose=true"]
    argv = cli.checked_argv("pipeline.train", "config", train.__doc__, ["--cfg", "job", "--verbose"], None, True)
    assert argv == ["--cfg", "job", "launcher.verbose=true"]


def _artifact(tmp_path: Path, run, name: str = "job.log") -> str:
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}")
    return Path(client.download_artifacts(run.info.run_id, name, str(tmp_path / run.info.run_id))).read_text()


@pytest.mark.slow
def test_a_jobs_library_warnings_go_to_its_log_and_its_line_counts_them(tmp_path):
    """5,000 warnings and 300 log records of a library while a job trains, and a line at the file descriptor: the
    console shows the job's two lines, the last with the count and the log's path; the log, read back from the
    job's MLflow run, holds the warning once, every record, the line, and how often each kind fired."""
    noisy_folder(tmp_path)
    proc = run_python("run_noisy.py", *FAST, cwd=tmp_path, env={"NOISY_WARNINGS": "5000", "NOISY_RECORDS": "300"})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 2 and (started := STARTING.match(lines[0])), out[-3000:]
    said = JOB_LINE.match(lines[1])
    assert said and said["end"].startswith("ok, step ") and len(lines[1]) <= 120, lines

    (run,) = mlflow_runs(tmp_path)
    assert started["run"] == run.info.run_id  # its job.log: an artifact of the run its starting line names
    log = _artifact(tmp_path, run)
    assert log.count("UserWarning: the knob is noisy") == 1
    assert re.findall(r"^a noisy record$", log, re.M) == ["a noisy record"] * 300
    assert "noisylib: written at the file descriptor\n" in log
    summary = log[log.index("[job] library warnings: ") :].splitlines()
    counted = {kind: int(n) for n, kind in (line.split(maxsplit=1) for line in summary[1:])}
    assert counted[f"UserWarning at {tmp_path / 'noisylib.py'}:14: the knob is noisy"] == 5000
    assert counted["WARNING from noisylib: a noisy record"] == 300
    assert int(said["count"]) == sum(counted.values())
    assert summary[0].startswith(f"[job] library warnings: {said['count']} of {len(counted)} kinds")


@pytest.mark.slow
@pytest.mark.parametrize(
    "fail, words, end",
    [
        ("raise", ["Traceback (most recent call last):", "RuntimeError: noisylib gave up"], "failed: RuntimeError"),
        ("abort", ["Fatal Python error: Aborted", "noisylib.py"], "failed: killed by SIGABRT"),
    ],
)
def test_a_failed_jobs_own_words_reach_the_console_and_its_log_is_kept(tmp_path, fail, words, end):
    """A job that raises prints its traceback, as it always did; one that aborts, the last lines of its log, which
    end with the Python stack it died in. Its line names its log, which its FAILED run keeps."""
    noisy_folder(tmp_path)
    proc = run_python("run_noisy.py", *FAST, cwd=tmp_path, env={"NOISY_RECORDS": "100", "NOISY_FAIL": fail})
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    for word in words:
        assert word in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.count("a noisy record") < 20  # the records stay in the log
    said = JOB_LINE.match(proc.stdout.strip().splitlines()[-1])
    assert said and said["end"].startswith(end), proc.stdout[-3000:]
    (run,) = mlflow_runs(tmp_path)
    log = _artifact(tmp_path, run)
    assert run.info.status == "FAILED" and (tmp_path / said["log"]).read_text() == log
    assert "noisylib: written at the file descriptor\n" in log and words[-1] in log


@pytest.mark.slow
def test_verbose_shows_every_line_a_job_prints_as_it_comes(tmp_path):
    noisy_folder(tmp_path)
    proc = run_python("run_noisy.py", "-v", *FAST, cwd=tmp_path, env={"NOISY_WARNINGS": "5", "NOISY_RECORDS": "50"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert re.findall(r"^a noisy record$", proc.stderr, re.M) == ["a noisy record"] * 50
    assert "noisylib: written at the file descriptor\n" in proc.stderr
    said = JOB_LINE.match(proc.stdout.strip().splitlines()[-1])
    assert said and int(said["count"]) >= 55
    (run,) = mlflow_runs(tmp_path)
    assert "a noisy record" in _artifact(tmp_path, run)  # kept in the log too
