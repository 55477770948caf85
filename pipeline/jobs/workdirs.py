"""A job's temp folder: made for it, and removed once the job's process and its owner are both gone (a sweep killed
outright leaves its folders behind; the next command removes them)."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from pipeline.adapters import forkserver
from pipeline.jobs import watchdog
from pipeline.jobs.files import PROCESS_FILE

WORKDIR_PREFIX = "batch-split-job-"
TEMP_PREFIXES = (WORKDIR_PREFIX, "pymp-")  # job folders, and multiprocessing's of a process that ran jobs
# An AF_UNIX socket's path holds 107 bytes on Linux; multiprocessing's folder and the fork server's socket in it
# (`pymp-XXXXXXXX/listener-XXXXXXXX`) add 32 to the temp dir's.
SOCKET_PATH_MAX, SOCKET_ROOM = 107, 32


def make() -> Path:
    return Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX))


def socket_temp() -> Path:
    """Where multiprocessing's folder goes, the fork server's socket in it: the temp dir, or /tmp where the temp dir is
    too deep for the socket's path (a scheduler's or a test's TMPDIR: the server could not bind, `OSError: AF_UNIX path
    too long`, and every job failed)."""
    temp = Path(tempfile.gettempdir())
    return temp if len(str(temp)) + SOCKET_ROOM <= SOCKET_PATH_MAX else Path("/tmp")


def place_socket_folder() -> None:
    """multiprocessing's folder of this process in `socket_temp()` where that is not the temp dir, before
    multiprocessing makes it in the temp dir, too deep for the fork server's socket."""
    if (where := socket_temp()) != Path(tempfile.gettempdir()):
        forkserver.make_folder_in(where)


def remove_orphans() -> int:
    """Remove the temp folders of jobs whose process and owner are both gone, and the multiprocessing folders of
    processes that ran jobs and are gone (a SIGKILLed sweep leaves both). Folders without our process file are
    left alone: they are being made, or not ours."""
    removed = 0
    temp, sockets = Path(tempfile.gettempdir()), socket_temp()
    folders = [f for prefix in TEMP_PREFIXES for f in temp.glob(f"{prefix}*")]
    if sockets != temp:
        folders += sockets.glob("pymp-*")
    for folder in folders:
        try:
            process = json.loads((folder / PROCESS_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # not started yet, or not ours
        if not (watchdog.alive(process["pid"]) or watchdog.alive(process["owner_pid"])):
            shutil.rmtree(folder, ignore_errors=True)
            removed += 1
    return removed
