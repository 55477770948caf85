"""A job that waits for its device says who holds it: the holder's job, and the process behind it (pid, start, user,
command), so that two sweeps on one machine whose jobs share a name are told apart."""

from __future__ import annotations

import datetime
import getpass
import subprocess
import sys
import threading
from pathlib import Path

import psutil

from pipeline.jobs import devicelock
from tests.helpers.cli import start_python

HOLDER = """
import sys
from pipeline.jobs import devicelock
with devicelock.hold(["cpu"], "job tiny 1x4 #0"):
    print("held", flush=True)
    sys.stdin.readline()
"""


def test_a_waiting_job_names_the_holders_job_pid_start_and_command(tmp_path, monkeypatch):
    """Another command holds the CPU for its job `tiny 1x4 #0`, the name of this one's job too: the line this one
    gets names that command's pid, its start, its user and its command line."""
    monkeypatch.setenv(devicelock.LOCK_DIR_ENV, str(tmp_path))
    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    holder = start_python(
        str(script),
        "-m",
        "batch.split=1x4,2x2",
        "repeats=3",
        cwd=tmp_path,
        env={devicelock.LOCK_DIR_ENV: str(tmp_path)},
        stdin=subprocess.PIPE,
        stderr=None,
    )
    told: list[tuple[str, str, float]] = []

    def release(key: str, who: str) -> None:  # called once the lock is found taken, before waiting for it
        told.append((key, who, psutil.Process(holder.pid).create_time()))
        holder.stdin.write("\n")
        holder.stdin.flush()

    taken = threading.Event()

    def take() -> None:
        with devicelock.hold(["cpu"], "job tiny 1x4 #0", on_wait=release):
            taken.set()

    try:
        assert holder.stdout.readline() == "held\n"  # it holds the lock: the hold below must wait for it
        thread = threading.Thread(target=take, daemon=True)
        thread.start()
        thread.join(timeout=60)
        assert taken.is_set(), "the lock was never handed over"
    finally:
        holder.kill()
        holder.wait(timeout=30)
    ((key, who, created),) = told
    start = datetime.datetime.fromtimestamp(round(created, 2))
    when = start.strftime("%H:%M:%S" if start.date() == datetime.date.today() else "%Y-%m-%d %H:%M:%S")
    command = f"{Path(sys.executable).name} {script} -m batch.split=1x4,2x2 repeats=3"
    assert key == "cpu"
    assert who == f"job tiny 1x4 #0 of pid {holder.pid} (started {when} by {getpass.getuser()}: {command})"


def test_a_lock_record_that_cannot_be_read_still_gives_a_line():
    """A lock file written by an older version, or cut short: the waiting job still says something true."""
    assert devicelock._holder("") == "another process"
    assert devicelock._holder('{"what": "job tiny 2x2", "owner": "vm:12:3.5"}').startswith("job tiny 2x2 of pid 12")
