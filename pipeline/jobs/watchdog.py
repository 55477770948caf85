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
import threading
import time

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
