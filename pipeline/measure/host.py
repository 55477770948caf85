"""Where a job's training thread ran on the host: its CPU, and that CPU's memory node, after the warm-up and at the
end of training; how many CPUs it was allowed and torch's threads; the host's load. A step that waits on the host runs as fast as the
host lets it (BENCHMARKS.md: one compiled config's host time moved 1.5x from process to process, its device time
not at all), so every job records where its host work ran.

With `measure.pin_cpu` the training thread is pinned, at the end of the warm-up, to the CPU that runs host work
fastest then (`cpu_speed`): the CPUs of a cloud host differ up to 2x and change within minutes, and a thread stays
where it landed. Only the training thread: threads and processes started during the warm-up (the compiler's workers,
the data's) keep every CPU. Not where there is nothing to choose (one CPU allowed) nor where several ranks of a job
share the host: their probes, run at once, would slow each other and could pick one CPU for two ranks."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import psutil
import torch
from transformers import TrainerCallback

from pipeline.measure.cpu_speed import cpu_speeds, ranked

CPUS = Path("/sys/devices/system/cpu")


def node_of(cpu: int, cpus: Path = CPUS) -> int | None:
    """The memory (NUMA) node a CPU belongs to, where the system says (`cpuN/nodeM`); None elsewhere."""
    found = sorted(p.name for p in (cpus / f"cpu{cpu}").glob("node[0-9]*"))
    return int(found[0][4:]) if found else None


def where() -> dict[str, Any]:
    """The CPU this process's main thread last ran on, and its node."""
    cpu = psutil.Process().cpu_num()
    return {"cpu": cpu, "node": node_of(cpu)}


class HostWatch(TrainerCallback):
    """Reads `where` once the first steady step ends (after `warmup` steps) and when training ends; with a `pin`
    (the step meter, whose clock restarts after the probe) pins the training thread to the fastest CPU when the
    warm-up ends, unless `ranks` (this job's processes on this host) share the host or one CPU is allowed."""

    def __init__(self, warmup: int, pin: Any = None, ranks: int = 1) -> None:
        self.warmup = warmup
        self.seen: list[dict[str, Any]] = []
        self.allowed = len(os.sched_getaffinity(0))
        self.pin = pin if ranks == 1 and self.allowed > 1 else None
        self.pinned: dict[str, Any] | None = None
        self.unpinned = None  # why a pin asked for was not made
        if pin is not None and self.pin is None:
            self.unpinned = f"{ranks} ranks share this host" if ranks > 1 else "one CPU allowed"

    def _pin(self) -> None:
        speeds = cpu_speeds(sorted(os.sched_getaffinity(0)))
        order = ranked(speeds)
        cpu = order[0]
        os.sched_setaffinity(0, {cpu})
        ms = {c: round(sum(speeds[c].values()), 2) for c in order}
        self.pinned = {"cpu": cpu, "probe_ms": ms, "slowest_over_fastest": round(ms[order[-1]] / ms[order[0]], 2)}
        self.pin.restart()  # the probe is no step's time

    def on_train_begin(self, args, state, control, **kwargs):
        if self.pin is not None and self.warmup == 0:
            self._pin()

    def on_step_end(self, args, state, control, **kwargs):
        if self.pin is not None and self.pinned is None and state.global_step == self.warmup:
            self._pin()
        if state.global_step == self.warmup + 1:
            self.seen.append(where())

    def on_train_end(self, args, state, control, **kwargs):
        self.seen.append(where())

    def summary(self) -> dict[str, Any] | None:
        if not self.seen:
            return None
        return {
            "cpus": [s["cpu"] for s in self.seen],
            "nodes": [s["node"] for s in self.seen],
            "allowed": self.allowed,
            "threads": torch.get_num_threads(),
            "load_1m": round(os.getloadavg()[0], 2),
            **({"pinned": self.pinned} if self.pinned else {}),
            **({"unpinned": self.unpinned} if self.unpinned else {}),
        }
