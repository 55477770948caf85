"""A job dies with the process that started it.

A job outlives a SIGKILLed parent otherwise (nothing is left to kill it): it would go on holding the GPU and its
memory while the re-run command measures other configs next to it. The job checks once a second whether the process
that started it (`owner_pid` in its spec) is still there, and whether its own parent changed (the fork server or the
starting process died), and kills itself when either says the owner is gone. A Ctrl-C or SIGTERM of the owner
already takes the job down (runner.run_job); this covers the kill that no handler sees.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback

INTERVAL_S = 1.0


def alive(pid: int | None) -> bool:
    """Whether process `pid` is running (a zombie, killed but not yet reaped, is not); False for no pid."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True  # no /proc (macOS): existence is all we can tell


def follow(owner_pid: int | None, interval_s: float = INTERVAL_S) -> threading.Thread | None:
    """Start a daemon thread that SIGKILLs this process once `owner_pid` is gone; None when there is no owner."""
    if not owner_pid or owner_pid == os.getpid():
        return None
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(interval_s)
            if os.getppid() != parent or not alive(owner_pid):
                os.kill(os.getpid(), signal.SIGKILL)

    thread = threading.Thread(target=watch, name="owner-watchdog", daemon=True)
    thread.start()
    return thread


def _orphaned_at_birth(kind: type, tb) -> bool:
    """An EOFError raised where a forked job reads what to run from its starter (multiprocessing's `spawn._main`):
    the starter went away (a second Ctrl-C) between asking the fork server for the job and sending it."""
    if not issubclass(kind, EOFError):
        return False
    frames = traceback.extract_tb(tb)
    return any(f.name == "_main" and f.filename.endswith(os.path.join("multiprocessing", "spawn.py")) for f in frames)


def _excepthook(kind, value, tb) -> None:
    if _orphaned_at_birth(kind, tb):
        return  # a job that never began: nothing ran, nothing to say (the command has said it was interrupted)
    sys.__excepthook__(kind, value, tb)


def quiet_orphans() -> None:
    """In the fork server (it imports the job's modules once): a job forked for a command that is gone by the time it
    reads its work ends without a traceback. The fork server prints any exception of a forked child through
    `sys.excepthook`; every other one still prints."""
    sys.excepthook = _excepthook
