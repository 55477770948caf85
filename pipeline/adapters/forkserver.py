"""multiprocessing's fork server of this process (`multiprocessing.forkserver._forkserver`): its pid, and stopping
it. The standard library starts it (`forkserver.ensure_running`) but keeps no public handle on it."""

from __future__ import annotations

from multiprocessing import forkserver


def server_pid() -> int | None:
    """The running fork server's pid; None when none was started (or it was stopped)."""
    return forkserver._forkserver._forkserver_pid


def forget_server() -> None:
    """Close the pipe to the fork server, reap it and remove its socket (the caller has killed it)."""
    forkserver._forkserver._stop()
