"""Processes in the states tests need: an output whose reader is gone, and the ranks of a torchrun job."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from tests.helpers.env import child_env


def run_with_closed_output(module: str, *args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """`python -m MODULE ARGS` writing into a pipe whose reading end is already closed: what `... | head -1` does
    once head has what it wants, without the race of when head exits."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            [sys.executable, "-m", module, *args],
            cwd=cwd,
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=timeout,
            env=child_env(),
        )
    finally:
        os.close(write)


def rank_process(root_pid: int, rank: int, timeout: float = 60) -> psutil.Process:
    """The process of rank `rank` among the descendants of `root_pid` (its environment says RANK)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for child in psutil.Process(root_pid).children(recursive=True):
            try:
                if child.environ().get("RANK") == str(rank) and "pipeline.jobs.child" in child.cmdline():
                    return child
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        time.sleep(0.2)
    raise AssertionError(f"no process of rank {rank} under {root_pid} within {timeout:g} s")
