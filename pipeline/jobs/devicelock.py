"""One job per device at a time on a machine: a file lock per GPU (by its UUID) and one for the CPU.

Two sweeps, or two study workers, on one machine would otherwise measure side by side on the same device and each
read the other's load as its own step time. The parent holds the device's lock for the whole life of a job's
process; a second job waits for it and says whom it waits for. Locks live in /tmp (or BATCH_SPLIT_LOCK_DIR), shared
by every process of the machine, and a lock dies with its holder, however it ends.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pynvml

from pipeline.liveness import Owner

LOCK_DIR_ENV = "BATCH_SPLIT_LOCK_DIR"


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
            handle.write(json.dumps({"owner": str(Owner.current()), "what": what, "since": time.time()}))
            handle.flush()
        yield waited


def _holder(text: str) -> str:
    try:
        data = json.loads(text)
        return f"{data['what']} ({data['owner']})"
    except (ValueError, KeyError):
        return "another process"
