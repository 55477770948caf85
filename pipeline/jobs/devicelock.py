"""One job per device at a time on a machine: a file lock per GPU (by its UUID) and one for the CPU.

Two sweeps, or two study workers, on one machine would otherwise measure side by side on the same device and each
read the other's load as its own step time. The parent holds the device's lock for the whole life of a job's
process; a second job waits for it and says whom it waits for: the holder's job, pid, start, user and command, so
that two sweeps whose jobs share a name are told apart. Locks live in /tmp (or BATCH_SPLIT_LOCK_DIR), shared
by every process of the machine, and a lock dies with its holder, however it ends.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import shlex
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pynvml

from pipeline.liveness import Owner, host

LOCK_DIR_ENV = "BATCH_SPLIT_LOCK_DIR"
COMMAND_CHARS = 200  # of the holder's command line, in a waiting job's line


def lock_dir() -> Path:
    folder = Path(os.environ.get(LOCK_DIR_ENV) or "/tmp/batch-split-locks")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def device_keys(on_cuda: bool, processes: int) -> list[str]:
    """The lock names of the devices a job uses: the first `processes` visible GPUs, or the CPU."""
    if not on_cuda:
        return ["cpu"]
    visible = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    try:
        pynvml.nvmlInit()
        try:
            indices = visible or [str(i) for i in range(pynvml.nvmlDeviceGetCount())]
            keys = []
            for name in indices[:processes]:
                handle = (
                    pynvml.nvmlDeviceGetHandleByUUID(name)
                    if name.startswith(("GPU-", "MIG-"))
                    else pynvml.nvmlDeviceGetHandleByIndex(int(name))
                )
                uuid = pynvml.nvmlDeviceGetUUID(handle)
                keys.append(f"cuda-{uuid.decode() if isinstance(uuid, bytes) else uuid}")
            return keys
        finally:
            pynvml.nvmlShutdown()
    except (pynvml.NVMLError, ValueError):
        return [f"cuda-{name}" for name in (visible or ["0"])[:processes]]


@contextlib.contextmanager
def hold(keys: list[str], what: str, on_wait: Callable[[str, str], None] | None = None) -> Iterator[float]:
    """Hold the locks of `keys` (in order, so two jobs never deadlock) while the block runs; yields the seconds
    spent waiting. `on_wait(key, holder)` is called once per lock that was taken by someone else."""
    waited = 0.0
    with contextlib.ExitStack() as stack:
        for key in sorted(keys):
            handle = stack.enter_context(open(lock_dir() / f"{key}.lock", "a+", encoding="utf-8"))
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.seek(0)
                if on_wait is not None:
                    on_wait(key, _holder(handle.read()))
                start = time.monotonic()
                fcntl.flock(handle, fcntl.LOCK_EX)
                waited += time.monotonic() - start
            stack.callback(fcntl.flock, handle, fcntl.LOCK_UN)
            handle.seek(0)
            handle.truncate()
            handle.write(json.dumps(_record(what)))
            handle.flush()
        yield waited


def _record(what: str) -> dict[str, object]:
    """What a waiting job is told of the holder: its job, and the process that holds it (owner, command, user),
    so that two sweeps on one machine, whose jobs may share a name, are told apart."""
    owner = Owner.current()
    try:
        process = psutil.Process(owner.pid)
        command, user = process.cmdline(), process.username()
    except (psutil.Error, KeyError):  # KeyError: a uid the system cannot name
        command, user = [], ""
    return {"owner": str(owner), "what": what, "since": time.time(), "command": _shown(command), "user": user}


def _shown(command: list[str]) -> str:
    """`python -m pipeline.train -m batch.split=1x4,2x2 repeats=3`: the interpreter by its name alone, at most
    COMMAND_CHARS characters."""
    if command:
        command = [Path(command[0]).name, *command[1:]]
    text = shlex.join(command)
    return text if len(text) <= COMMAND_CHARS else text[: COMMAND_CHARS - 3] + "..."


@dataclass(frozen=True)
class Holder:
    """A lock file's record (`_record`): whose it is and what it runs; a user or command missing (a holder that could
    not tell them) is empty, and left out of the waiting job's line."""

    owner: Owner
    what: str
    user: str = ""
    command: str = ""

    @classmethod
    def from_json(cls, text: str) -> Holder:
        """ValueError, KeyError or TypeError for a file that is not one (half written, or another version's)."""
        data = json.loads(text)
        owner = Owner.parse(data["owner"])
        if owner is None:
            raise ValueError(data["owner"])
        return cls(owner, str(data["what"]), str(data.get("user") or ""), str(data.get("command") or ""))


def _holder(text: str) -> str:
    """`job tiny 1x4 #0 of pid 4242 (started 16:53:35 by alice: python -m pipeline.train -m ...)`."""
    try:
        held = Holder.from_json(text)
    except (ValueError, KeyError, TypeError):
        return "another process"
    owner = held.owner
    started = datetime.datetime.fromtimestamp(owner.started)
    when = started.strftime("%H:%M:%S" if started.date() == datetime.date.today() else "%Y-%m-%d %H:%M:%S")
    by = f" by {held.user}" if held.user else ""
    command = f": {held.command}" if held.command else ""
    where = f" on {owner.host}" if owner.host != host() else ""
    return f"{held.what} of pid {owner.pid}{where} (started {when}{by}{command})"
