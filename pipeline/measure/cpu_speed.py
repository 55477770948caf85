"""How fast each CPU runs host work now: the interpreter's own loop and the framework's dispatch of small operators,
the two parts of a host-bound step. The calling thread is pinned to one CPU at a time, in rotated rounds (a drift of
the machine falls on every CPU), and each CPU's figure is the median of its rounds, in milliseconds.

Why: on a cloud host the CPUs a process may use are not equally fast, and which are fast changes within minutes
(BENCHMARKS.md: on one H100's 16 CPUs the interpreter's work ran 1.9-2.2x slower on the slowest than the fastest, and
the fastest of one map was among the slowest ten minutes later); a host-bound step runs at its thread's CPU's speed.
"""

from __future__ import annotations

import os
import statistics
import time

import torch


def python_work(n: int) -> int:
    """Interpreter-bound work: a loop of calls and dict updates, as a training step's Python is."""
    seen: dict[int, int] = {}
    total = 0
    for i in range(n):
        total += len(str(i)) + seen.get(i & 1023, 0)
        seen[i & 1023] = total & 0xFF
    return total


def dispatch_work(n: int) -> float:
    """Framework-bound work: small CPU operators, each a trip through the dispatcher (what a launch costs the host)."""
    x = torch.ones(8)
    for _ in range(n):
        x = torch.add(x, 1.0).mul_(0.5)
    return float(x[0])


def _ms(work, n: int) -> float:
    start = time.perf_counter()
    work(n)
    return (time.perf_counter() - start) * 1000.0


def cpu_speeds(
    cpus: list[int], rounds: int = 3, python_n: int = 20_000, dispatch_n: int = 500
) -> dict[int, dict[str, float]]:
    """Each CPU's median milliseconds of `python_work` and `dispatch_work` over `rounds`, this thread pinned to each
    in turn; the thread's CPUs are as they were afterwards."""
    before = os.sched_getaffinity(0)
    times: dict[int, dict[str, list[float]]] = {c: {"python": [], "dispatch": []} for c in cpus}
    python_work(python_n // 10), dispatch_work(dispatch_n // 10)  # the interpreter's caches and the dispatcher warm
    try:
        for r in range(rounds):
            for c in cpus[r % len(cpus) :] + cpus[: r % len(cpus)]:
                os.sched_setaffinity(0, {c})
                times[c]["python"].append(_ms(python_work, python_n))
                times[c]["dispatch"].append(_ms(dispatch_work, dispatch_n))
    finally:
        os.sched_setaffinity(0, before)
    return {c: {k: statistics.median(v) for k, v in t.items()} for c, t in times.items()}


def ranked(speeds: dict[int, dict[str, float]]) -> list[int]:
    """The CPUs, fastest first (the least milliseconds of both works together; a tie to the lower number)."""
    return sorted(speeds, key=lambda c: (sum(speeds[c].values()), c))
