"""What the machine offers, found without importing torch (the parent process never does): CUDA devices through
NVML, the CPU cores, and a quick measure of the CPU's matrix rate for the estimate of a long CPU job."""

from __future__ import annotations

import functools
import os
import time

import numpy as np
import pynvml


@functools.cache
def cuda_device_count() -> int:
    """CUDA devices this process may use: NVML's count, limited by CUDA_VISIBLE_DEVICES; 0 without a driver."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return 0
    try:
        pynvml.nvmlInit()
        try:
            count = pynvml.nvmlDeviceGetCount()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no library, no driver, no device: all mean no CUDA here
        return 0
    if visible is not None:
        count = min(count, len([d for d in visible.split(",") if d.strip()]))
    return count


def cpu_cores() -> int:
    """The CPU cores this process may run on (its affinity, which a container or `taskset` narrows)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity call (macOS)
        return os.cpu_count() or 1


@functools.cache
def cpu_matmul_flops(size: int = 512, repeats: int = 5) -> float:
    """FLOP/s of an fp32 matrix product on this CPU (best of a few, about 50 ms): an upper bound on what training
    reaches here."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((size, size), dtype=np.float32)
    b = rng.standard_normal((size, size), dtype=np.float32)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2.0 * size**3 / best
