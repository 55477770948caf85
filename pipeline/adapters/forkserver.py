"""multiprocessing's fork server of this process (`multiprocessing.forkserver._forkserver`): its pid, stopping it,
and the folder its socket goes in. The standard library starts it (`forkserver.ensure_running`) but keeps no public
handle on it, and makes the folder (`util.get_temp_dir`) in the temp dir unless one was set before."""

from __future__ import annotations

import multiprocessing.process
import multiprocessing.util
import shutil
import tempfile
from multiprocessing import forkserver
from pathlib import Path


def server_pid() -> int | None:
    """The running fork server's pid; None when none was started (or it was stopped)."""
    return forkserver._forkserver._forkserver_pid


def forget_server() -> None:
    """Close the pipe to the fork server, reap it and remove its socket (the caller has killed it)."""
    forkserver._forkserver._stop()


def make_folder_in(where: Path) -> None:
    """multiprocessing's folder of this process (pymp-*, the server's socket in it) made in `where`, not the temp dir,
    and removed at exit as multiprocessing removes its own; nothing when it has one already."""
    settings = multiprocessing.process.current_process()._config
    if settings.get("tempdir") is None:
        folder = tempfile.mkdtemp(prefix="pymp-", dir=where)
        multiprocessing.util.Finalize(None, shutil.rmtree, args=(folder, True), exitpriority=-100)
        settings["tempdir"] = folder
