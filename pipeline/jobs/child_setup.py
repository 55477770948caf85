"""What the job process (the child side) sets up around its training: Ctrl-C left to its starter, no dataset bars
in its log, a thread-only progress-bar lock, the versions it records, and the atomic write of its record."""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import threading
from pathlib import Path

import datasets
import peft
import torch
import tqdm
import transformers
import trl

from pipeline.measure import memory

CUDA_ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"  # torch's, as the allocator knob set it in the job's process


def ignore_ctrl_c() -> None:
    """A job process, or the fork server, started with SIGINT blocked (`runner`): from here on it ignores it (a Ctrl-C
    held meanwhile is dropped; the command that started it ends its jobs itself)."""
    if signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, []):
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def versions() -> dict[str, str]:
    """The libraries, CUDA and driver the job ran on, and its CUDA allocator's settings and segments."""
    found = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "trl": trl.__version__,
        "peft": peft.__version__,
        "datasets": datasets.__version__,
        "cuda": str(torch.version.cuda),
        "driver": memory.driver_version(),
        "cuda_alloc_conf": os.environ.get(CUDA_ALLOC_CONF) or "default",
        "cuda_expandable_segments": memory.expandable_segments(),  # what the allocator made of it (None on the CPU)
    }
    return {key: value for key, value in found.items() if value is not None}


def write_json(path: Path, record: dict) -> None:
    """Write atomically, so a reader never sees half a record."""
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp", encoding="utf-8") as tmp:
        json.dump(record, tmp, default=str)
    os.replace(tmp.name, path)


def quiet(progress_bar: bool) -> None:
    """Without train.progress_bar no progress bars of the dataset preparation (TRL's follow the same key through its
    SFTConfig): a bar redrawn in place would fill the job's log. The libraries' notices and warnings are not silenced:
    they go to the job's log, counted (`jobs.joblog`, `jobs.library_warnings`)."""
    if not progress_bar:
        datasets.disable_progress_bars()


def no_process_locks() -> None:
    """tqdm (every progress bar of datasets, TRL and transformers, shown or not) otherwise makes a multiprocessing
    lock, a named semaphore registered with the resource tracker of the process that started the job: a job killed
    by a timeout, a signal or Ctrl-C never unregisters it, and the tracker warns of a leaked semaphore when the sweep
    ends. The job's bars all run in this one process, so a thread lock is all they need."""
    tqdm.tqdm.set_lock(threading.RLock())
