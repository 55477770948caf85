"""Why a config is slow, from what the study measured: the cost of a micro-batch whatever its size, and where the
device says so, whether the step waits on the host.

Every split of a study trains the same records at every step (one data order, one effective batch), so the configs
that differ only in their split do the same work per step; a step time that grows with the number of micro-batches
grows by a cost each micro-batch pays whatever its tokens (launches, Python, the framework): the slope of the step
time over the micro-batches per step, fitted over those configs. A config most of whose step is that cost is bound by
it; `host-bound` is said only where the device was measured idle (NVML's busy share under `measure.busy_threshold`,
or a profile whose device time is under half its step), and the profile's own figures where a job was profiled.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from pipeline.config.job import parse_split
from pipeline.records import Status
from pipeline.search import TrialRecord, measured_seconds

SPLIT = "batch.split="
BOUND_SHARE = 0.5  # a config whose per-micro-batch cost is at least this share of its step is bound by it


@dataclass(frozen=True)
class MicroCost:
    """The step time's growth per micro-batch at the same tokens, over the configs of one setting."""

    seconds: float
    base: float  # what a step costs beside its micro-batches' fixed costs
    splits: int

    def share(self, record: TrialRecord) -> float:
        step = measured_seconds(record)
        return self.seconds * micro_batches(record) / step if step else 0.0


def micro_batches(record: TrialRecord) -> int:
    split = next((o[len(SPLIT) :] for o in record.overrides if o.startswith(SPLIT)), None) or record.label.split()[1]
    return parse_split(split).accumulation


def setting(record: TrialRecord) -> tuple[str, ...]:
    """What the record's config holds but its split."""
    return tuple(o for o in record.overrides if not o.startswith(SPLIT)) + (f"world_size={record.world_size}",)


def micro_costs(records: list[TrialRecord]) -> dict[tuple[str, ...], MicroCost]:
    """The cost per micro-batch of each setting measured at two numbers of micro-batches or more, where the step
    grows with them by more than the runs' own noise (their intervals)."""
    found: dict[tuple[str, ...], list[TrialRecord]] = {}
    for r in records:
        if r.status in (Status.OK, Status.PRUNED) and measured_seconds(r) is not None and r.overrides:
            found.setdefault(setting(r), []).append(r)
    costs = {}
    for key, group in found.items():
        points = [(micro_batches(r), measured_seconds(r)) for r in group]
        if len({a for a, _ in points}) < 2:
            continue
        slope, intercept = statistics.linear_regression([float(a) for a, _ in points], [t for _, t in points])
        spread = max(a for a, _ in points) - min(a for a, _ in points)
        noise = sum((r.ci.high - r.ci.low) / 2 for r in group if r.ci) / max(1, len(group)) * 2
        if slope > 0 and slope * spread > noise:
            costs[key] = MicroCost(slope, intercept, len(group))
    return costs


def _device_idle(record: TrialRecord, busy_threshold: float) -> str | None:
    """What says the device waited, where it was measured."""
    if record.gpu_busy is not None and record.gpu_busy < busy_threshold:
        return f"GPU busy {100 * record.gpu_busy:.0f}%"
    host, device = record.profile.host_ms, record.profile.device_ms
    if host and device is not None and device < 0.5 * host:
        return f"device {device / 1000:.3f} s of a {host / 1000:.3f} s step (profile)"
    return None


def note(record: TrialRecord, costs: dict[tuple[str, ...], MicroCost], busy_threshold: float) -> str:
    """The table's note of a config bound by its cost per micro-batch: `host-bound: 0.33 s per micro-batch`."""
    cost = costs.get(setting(record))
    if cost is None or cost.share(record) < BOUND_SHARE:
        return ""
    shown = f"{cost.seconds:.{max(2, _places(cost.seconds) - 1)}f}"  # two significant digits: never 0.00 s
    if _device_idle(record, busy_threshold):
        return f"host-bound: {shown} s per micro-batch"
    return f"{shown} s per micro-batch whatever its size"


def _places(seconds: float) -> int:
    """Decimals that give a micro-batch's cost three significant digits (three at least): at 0.003 s, shown to three
    places, 8 micro-batches x 0.003 s + 0.060 s read 0.084 beside a step of 0.082 s."""
    return 3 if seconds <= 0 else max(3, 2 - math.floor(math.log10(seconds)))


def step_line(
    role: str, record: TrialRecord, costs: dict[tuple[str, ...], MicroCost], busy_threshold: float, named=True
) -> str:
    """`baseline tiny 1x8: 2.780 s a step = 8 micro-batches x 0.330 s + 0.140 s (...)`, with what was measured."""
    step = measured_seconds(record)
    cost = costs.get(setting(record))
    places = _places(cost.seconds) if cost is not None else 3
    parts = [f"{role}{f' {record.label}' if named else ''}: {step:.{places}f} s a step"]
    if cost is not None:
        a = micro_batches(record)
        parts[0] += (
            f" = {a} micro-batch{'es' if a != 1 else ''} x {cost.seconds:.{places}f} s + "
            f"{step - a * cost.seconds:.{places}f} s (the step's growth per micro-batch at the same tokens, over "
            f"{cost.splits} splits of its knobs)"
        )
    idle = _device_idle(record, busy_threshold)
    if idle:
        parts.append(idle)
    elif record.gpu_busy is not None:
        parts.append(f"GPU busy {100 * record.gpu_busy:.0f}%")
    if record.profile.host_ms:
        p = record.profile
        parts.append(
            f"profile: device {(p.device_ms or 0) / 1000:.3f} s, host {p.host_ms / 1000:.3f} s, "
            f"{p.launches_per_step or 0:,.0f} launches a step"
        )
    bound = cost is not None and cost.share(record) >= BOUND_SHARE
    if bound:
        parts.append(note(record, costs, busy_threshold))
    return "; ".join(parts)


def lines(
    best: TrialRecord, baseline: TrialRecord | None, records: list[TrialRecord], busy_threshold: float, named=True
) -> list[str]:
    """The answer's and the baseline's steps, split into what was measured; none where nothing beyond the step time
    was. `named`: each by its label too (the compact answer, whose lines above name them, says `answer` alone)."""
    costs = micro_costs(records)
    shown = [("baseline", baseline)] if baseline is not None and baseline.number != best.number else []
    shown.append(("answer", best))
    said = [
        step_line(role, r, costs, busy_threshold, named)
        for role, r in shown
        if measured_seconds(r) is not None and (setting(r) in costs or r.gpu_busy is not None or r.profile.measured)
    ]
    return ["where the step goes:", *(f"  {line}" for line in said)] if said else []
