"""How fast each CPU this process may use runs host work: the interpreter's own loop and the framework's dispatch of
small operators, the two parts of a host-bound step (BENCHMARKS.md: one compiled config's host time moved 1.5x from
process to process, every part of it together, its device time not at all). The calling thread is pinned to one CPU
at a time, round after round (CPUs in a rotated order each round, so a drift of the machine falls on every CPU), and
each CPU's figure is the median of its rounds. The last two lines name the slowest CPU and the fastest, for `taskset -c`.

    python -m bench.cpu_speed [--rounds 5] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch


def python_work(n: int = 200_000) -> int:
    """Interpreter-bound work: a loop of attribute reads, calls and dict updates, as a training step's Python is."""
    seen: dict[int, int] = {}
    total = 0
    for i in range(n):
        total += len(str(i)) + seen.get(i & 1023, 0)
        seen[i & 1023] = total & 0xFF
    return total


def dispatch_work(n: int = 4_000) -> float:
    """Framework-bound work: small CPU operators, each a trip through the dispatcher (what a launch costs the host)."""
    x = torch.ones(8)
    for _ in range(n):
        x = torch.add(x, 1.0).mul_(0.5)
    return float(x[0])


def timed_ms(work) -> float:
    start = time.perf_counter()
    work()
    return (time.perf_counter() - start) * 1000.0


def measure(cpus: list[int], rounds: int) -> dict[int, dict[str, float]]:
    """Each CPU's median milliseconds of python_work and dispatch_work over `rounds`, pinned in turn."""
    times: dict[int, dict[str, list[float]]] = {c: {"python": [], "dispatch": []} for c in cpus}
    try:
        for r in range(rounds):
            for c in cpus[r % len(cpus) :] + cpus[: r % len(cpus)]:
                os.sched_setaffinity(0, {c})
                time.sleep(0.01)  # let the scheduler move the thread there
                times[c]["python"].append(timed_ms(python_work))
                times[c]["dispatch"].append(timed_ms(dispatch_work))
    finally:
        os.sched_setaffinity(0, set(cpus))
    return {c: {k: statistics.median(v) for k, v in t.items()} for c, t in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    cpus = sorted(os.sched_getaffinity(0))
    python_work(20_000), dispatch_work(400)  # warm the interpreter's caches and the dispatcher
    found = measure(cpus, args.rounds)
    print("| cpu | python ms | dispatch ms |")
    print("|---|---|---|")
    for c, t in found.items():
        print(f"| {c} | {t['python']:.2f} | {t['dispatch']:.2f} |")
    for key in ("python", "dispatch"):
        values = [t[key] for t in found.values()]
        print(f"{key}: fastest {min(values):.2f} ms, slowest {max(values):.2f} ms ({max(values) / min(values):.2f}x)")
    fastest = min(found, key=lambda c: found[c]["python"] + found[c]["dispatch"])
    if args.json:
        args.json.write_text(json.dumps({str(c): t for c, t in found.items()}, indent=1))
    slowest = max(found, key=lambda c: found[c]["python"] + found[c]["dispatch"])
    print(f"slowest {slowest}")
    print(f"fastest {fastest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
