"""Waiting on a condition with a deadline: a test never sleeps a fixed time and hopes."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path


def wait_until(
    condition: Callable[[], object],
    timeout: float,
    what: str,
    alive: Callable[[], bool] | subprocess.Popen | None = None,
):
    """Poll `condition` until it returns something true (returned); fail with `what` after `timeout` seconds, or as
    soon as `alive()` says the process being waited on is gone. `alive` may be the process itself: its end then fails
    with the end of what it printed (when its output is a pipe), so a failure says why the process stopped."""
    proc = alive if isinstance(alive, subprocess.Popen) else None
    if proc is not None:
        alive = lambda: proc.poll() is None  # noqa: E731
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if alive is not None and not alive():
            # what it printed (or wrote) last may have come between the look above and its end: one more look
            value = condition()
            assert value, f"the process ended before {what}" + _tail(proc)
            return value
        assert time.monotonic() < deadline, f"no {what} within {timeout:g} s"
        time.sleep(0.05)


def _tail(proc: subprocess.Popen | None) -> str:
    """The exit code and the last lines a finished process printed, for a failure message ('' when unknown)."""
    if proc is None:
        return ""
    out = proc.stdout.read() if proc.stdout is not None else ""
    return f" (exit code {proc.returncode}); it printed, last:\n{(out or '')[-3000:]}"


def wait_for_steps(job_tmp: Path, steps: int = 1, timeout: float = 180, alive=None) -> Path:
    """Wait until a job started with TMPDIR=`job_tmp` has logged `steps` optimizer steps (its steps.jsonl, written
    as it trains); return that file. `alive` (a callable, or the process) gone ends the wait with a failure."""

    def logged():
        for path in job_tmp.glob("batch-split-job-*/steps.jsonl"):
            if len(path.read_text(encoding="utf-8").splitlines()) >= steps:
                return path
        return None

    return wait_until(logged, timeout, f"a job under {job_tmp} logged {steps} steps", alive=alive)


def process_gone(pid: int) -> bool:
    """Exited (or a zombie waiting for a reaper that is not us)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True
