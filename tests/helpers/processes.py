"""Processes in the states tests need: an output whose reader is gone, the ranks of a torchrun job, and a command
run as a terminal runs it (its own process group, its output read as it comes)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from tests.helpers.env import child_env
from tests.helpers.wait import wait_until


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


class Command:
    """`python -m MODULE ARGS` as a terminal runs it, in a process group of its own (a Ctrl-C reaches every process
    in it: the command, its fork server, its jobs), its output (stdout and stderr) read line by line as it comes."""

    def __init__(self, module: str, *args: str, cwd: Path, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def running(self) -> bool:
        return self.proc.poll() is None or self.reader.is_alive()

    def wait_for(self, text: str, timeout: float = 300) -> str:
        """The first line holding `text`, once it has come; fails after `timeout` or once the command has ended."""
        found = wait_until(
            lambda: next((line for line in list(self.lines) if text in line), None),
            timeout,
            f"line with {text!r}",
            alive=self.running,
        )
        return found

    def ctrl_c(self) -> None:
        """What a terminal's Ctrl-C does: SIGINT to every process of the group (none left: nothing to do)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGINT)

    def finish(self, timeout: float = 300) -> int:
        """Wait for the command's end and the end of its output; its exit code."""
        code = self.proc.wait(timeout)
        self.reader.join(timeout)
        assert not self.reader.is_alive(), "the output stayed open after the command ended"
        return code

    def fork_server(self, timeout: float = 120) -> psutil.Process:
        """The command's fork server, once it has started it."""

        def find():
            with contextlib.suppress(psutil.NoSuchProcess):
                for child in psutil.Process(self.proc.pid).children():
                    with contextlib.suppress(psutil.Error):
                        if "multiprocessing.forkserver" in " ".join(child.cmdline()):
                            return child
            return None

        return wait_until(find, timeout, "fork server", alive=lambda: self.proc.poll() is None)
