"""Where a job's training thread ran on the host: its CPU, and that CPU's memory node, after the warm-up and at the
end of training; how many CPUs it was allowed and torch's threads; the host's load. A step that waits on the host runs as fast as the
host lets it (BENCHMARKS.md: one compiled config's host time moved 1.5x from process to process, its device time
not at all), so every job records where its host work ran."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import psutil
import torch
from transformers import TrainerCallback

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
    """Reads `where` once the first steady step ends (after `warmup` steps) and when training ends."""

    def __init__(self, warmup: int) -> None:
        self.warmup = warmup
        self.seen: list[dict[str, Any]] = []

    def on_step_end(self, args, state, control, **kwargs):
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
            "allowed": len(os.sched_getaffinity(0)),
            "threads": torch.get_num_threads(),
            "load_1m": round(os.getloadavg()[0], 2),
        }
