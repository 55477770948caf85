"""Dynamo's own counters and timers (`torch._dynamo.utils.counters`, `calculate_time_spent`): how many graphs a job
compiled, how often Inductor skipped CUDA graphs, and the seconds spent compiling. torch has no public equivalent;
where a torch has moved them the job counts nothing (and `tests/test_adapters.py` fails)."""

from __future__ import annotations

try:
    from torch._dynamo.utils import calculate_time_spent, counters
except ImportError:
    calculate_time_spent = counters = None


def count(group: str, name: str) -> int:
    """Dynamo's counter `name` of `group` (e.g. stats/unique_graphs); 0 without counters."""
    return int(counters[group][name]) if counters is not None else 0


def seconds_spent() -> dict[str, float]:
    """Dynamo's compile timers by phase (`total_wall_time`, Inductor's `CUDAGraphNode.record`, ...); empty without
    them."""
    return dict(calculate_time_spent()) if calculate_time_spent is not None else {}
