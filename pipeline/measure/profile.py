"""Where a step's time goes: a torch.profiler window over a few steady steps, summarised per step (kernel launches,
top kernels, host against device time, casts and synchronisations), and a cheap GPU busy figure from NVML.

The profiler adds host overhead to the steps it records: a job that profiles should profile after its measured
window (`skip_first` past the last measured step) or be a separate run; its profiled steps are no timing data.
On CPU there are no kernels: the summary counts aten operators instead (`ops_per_step`), kernel fields are zero.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback

LAUNCH_CALLS = (
    "cudaLaunchKernel",
    "cudaLaunchKernelExC",
    "cuLaunchKernel",
    "cuLaunchKernelEx",
    "cudaLaunchCooperativeKernel",
)
GRAPH_LAUNCH_CALLS = ("cudaGraphLaunch", "cuGraphLaunch")
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cuStreamSynchronize")
MEMCPY_CALLS = ("cudaMemcpyAsync", "cudaMemcpy", "cudaMemsetAsync")
CAST_OPS = ("aten::_to_copy",)
SCALAR_READS = ("aten::_local_scalar_dense",)  # .item(), bool(tensor), float(tensor): a sync on CUDA
STEP_KEY = re.compile(r"^ProfilerStep(#\d+|\*)$")  # key_averages groups the steps as "ProfilerStep*"


def _is_device(event: Any) -> bool:
    """A kernel, copy or memset on the device (not a host op, not a user range mirrored on the GPU timeline)."""
    device_type = getattr(event, "device_type", None)
    if device_type is None or device_type == torch.autograd.DeviceType.CPU:
        return False
    return not getattr(event, "is_user_annotation", False) and not STEP_KEY.match(event.key or "")


def _count(events: dict[str, Any], names: Iterable[str]) -> int:
    return sum(events[name].count for name in names if name in events)


def summarize_key_averages(averages: Iterable[Any], steps: int, top: int = 10) -> dict:
    """A per-step summary of `prof.key_averages()` (FunctionEventAvg rows) over `steps` profiled steps.

    Times are in milliseconds per step. `host_ms`: the profiled steps' wall time (ProfilerStep# ranges) where the
    profiler had a schedule, else the sum of self CPU time; of it `host_op_ms` inside aten operators (self time),
    `host_runtime_api_ms` in CUDA runtime/driver calls, `host_outside_ops_ms` in no recorded op at all (Python and
    framework code between ops). `device_ms`: summed kernel (and copy) time, streams added up;
    `device_busy_fraction` = device_ms / host_ms (GPU only; an upper bound where streams overlap).
    `kernels_per_step` counts device-side events, `launches_per_step` the host's launch calls (a CUDA graph replay
    is one `cudaGraphLaunch` for many kernels), `ops_per_step` the aten operators (the unit on CPU)."""
    rows = list(averages)
    host_rows = {row.key: row for row in rows if getattr(row, "device_type", None) == torch.autograd.DeviceType.CPU}
    device_rows = [row for row in rows if _is_device(row)]
    step_rows = [row for key, row in host_rows.items() if STEP_KEY.match(key or "")]
    aten = [row for key, row in host_rows.items() if (key or "").startswith("aten::")]
    if step_rows:
        host_us = sum(row.cpu_time_total for row in step_rows)
        steps = sum(row.count for row in step_rows)
    else:
        host_us = sum(row.self_cpu_time_total for row in host_rows.values())
    steps = max(1, steps)
    device_us = sum(row.self_device_time_total for row in device_rows)
    cuda_api = [row for key, row in host_rows.items() if (key or "").startswith(("cuda", "cu"))]
    counts = {
        "kernels": sum(row.count for row in device_rows),
        "launches": _count(host_rows, LAUNCH_CALLS),
        "graph_launches": _count(host_rows, GRAPH_LAUNCH_CALLS),
        "syncs": _count(host_rows, SYNC_CALLS),
        "memcpy_calls": _count(host_rows, MEMCPY_CALLS),
        "scalar_reads": _count(host_rows, SCALAR_READS),
        "casts": _count(host_rows, CAST_OPS),
        "ops": sum(row.count for row in aten),
    }
    return {
        "steps": steps,
        "device": "cuda" if device_rows else "cpu",
        "host_ms": host_us / steps / 1000.0,
        "host_op_ms": sum(row.self_cpu_time_total for row in aten) / steps / 1000.0,
        "host_runtime_api_ms": sum(row.self_cpu_time_total for row in cuda_api) / steps / 1000.0,
        "host_outside_ops_ms": sum(row.self_cpu_time_total for row in step_rows) / steps / 1000.0,
        "device_ms": device_us / steps / 1000.0,
        "device_busy_fraction": (device_us / host_us) if device_rows and host_us else None,
        **{f"{name}_per_step": count / steps for name, count in counts.items()},
        **_top_rows(device_rows, aten, device_us, steps, top),
    }


def _top_rows(device_rows: list, aten: list, device_us: float, steps: int, top: int) -> dict:
    """The kernels that take the most device time, and the operators that take the most host time or calls."""
    kernels = sorted(device_rows, key=lambda row: row.self_device_time_total, reverse=True)[:top]
    by_time = sorted(aten, key=lambda row: row.self_cpu_time_total, reverse=True)[:top]
    by_count = sorted(aten, key=lambda row: row.count, reverse=True)[:top]
    return {
        "top_kernels": [
            {
                "name": row.key,
                "calls_per_step": row.count / steps,
                "ms_per_step": row.self_device_time_total / steps / 1000.0,
                "share": row.self_device_time_total / device_us if device_us else 0.0,
            }
            for row in kernels
        ],
        "top_ops_by_self_cpu": [
            {
                "name": row.key,
                "calls_per_step": row.count / steps,
                "self_cpu_ms_per_step": row.self_cpu_time_total / steps / 1000.0,
                "device_ms_per_step": row.device_time_total / steps / 1000.0,
            }
            for row in by_time
        ],
        "top_ops_by_count": [{"name": row.key, "calls_per_step": row.count / steps} for row in by_count],
    }


class ProfileWindow(TrainerCallback):
    """Profile `active` optimizer steps after `skip_first` + `wait` + `warmup` steps (torch.profiler's schedule,
    advanced at each step end); then write `trace.json` (chrome trace) and `profile_summary.json` into `out_dir`
    and keep the summary in `self.summary`; then `written` (the step meter's restart: writing the trace is no step's
    time)."""

    def __init__(
        self,
        out_dir: str | Path,
        skip_first: int = 0,
        wait: int = 1,
        warmup: int = 1,
        active: int = 3,
        cuda: bool | None = None,
        record_shapes: bool = False,
        with_stack: bool = False,
        written: Callable[[], None] | None = None,
    ) -> None:
        self.out_dir = Path(out_dir)
        self.written = written
        self.cuda = torch.cuda.is_available() if cuda is None else cuda
        self.active = active
        self.schedule = torch.profiler.schedule(
            skip_first=skip_first, wait=wait, warmup=warmup, active=active, repeat=1
        )
        self.record_shapes = record_shapes
        self.with_stack = with_stack
        self.profiler: torch.profiler.profile | None = None
        self.summary: dict | None = None
        self.first_step: int | None = None
        self._skip = skip_first + wait + warmup

    def _ready(self, prof: torch.profiler.profile) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(self.out_dir / "trace.json"))
        self.summary = summarize_key_averages(prof.key_averages(), self.active)
        self.summary["first_step"] = self.first_step
        (self.out_dir / "profile_summary.json").write_text(json.dumps(self.summary, indent=1), encoding="utf-8")
        if self.written is not None:
            self.written()

    def on_train_begin(self, args, state, control, **kwargs):
        activities = [torch.profiler.ProfilerActivity.CPU]
        if self.cuda:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.profiler = torch.profiler.profile(
            activities=activities,
            schedule=self.schedule,
            on_trace_ready=self._ready,
            record_shapes=self.record_shapes,
            with_stack=self.with_stack,
        )
        self.profiler.__enter__()
        self.first_step = state.global_step + 1 + self._skip

    def on_step_end(self, args, state, control, **kwargs):
        if self.profiler is not None:
            self.profiler.step()

    def on_train_end(self, args, state, control, **kwargs):
        if self.profiler is not None:
            self.profiler.__exit__(None, None, None)
            self.profiler = None
