"""A job's temp folder: made for it, and removed once the job's process and its owner are both gone (a sweep killed
outright leaves its folders behind; the next command removes them)."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from pipeline.jobs import watchdog
from pipeline.jobs.files import PROCESS_FILE

WORKDIR_PREFIX = "batch-split-job-"
TEMP_PREFIXES = (WORKDIR_PREFIX, "pymp-")  # job folders, and multiprocessing's of a process that ran jobs


def make() -> Path:
    return Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX))


def remove_orphans() -> int:
    """Remove the temp folders of jobs whose process and owner are both gone, and the multiprocessing folders of
    processes that ran jobs and are gone (a SIGKILLed sweep leaves both). Folders without our process file are
    left alone: they are being made, or not ours."""
    removed = 0
    temp = Path(tempfile.gettempdir())
    for folder in [f for prefix in TEMP_PREFIXES for f in temp.glob(f"{prefix}*")]:
        try:
            process = json.loads((folder / PROCESS_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # not started yet, or not ours
        if not (watchdog.alive(process["pid"]) or watchdog.alive(process["owner_pid"])):
            shutil.rmtree(folder, ignore_errors=True)
            removed += 1
    return removed
