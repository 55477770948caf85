"""Memory as the job sees it: allocator peaks, the device's own figure (NVML, CUDA context included), resident
memory on CPU, and the cap enforced inside the job."""

from __future__ import annotations

import os
from dataclasses import dataclass

import psutil
import pynvml
import torch

from pipeline.records import JobMemory


def _proc_status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def rss_bytes() -> int:
    kib = _proc_status_kib("VmRSS")
    if kib is None:
        return psutil.Process().memory_info().rss
    return kib * 1024


def peak_rss_bytes() -> int:
    kib = _proc_status_kib("VmHWM")
    return rss_bytes() if kib is None else kib * 1024


def reset_peak_rss() -> bool:
    """Linux resets the resident high-water mark when 5 is written to clear_refs (since 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def driver_version() -> str:
    """The NVIDIA driver's version as NVML reports it; "none" where there is no NVML or driver (a CPU machine)."""
    try:
        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
    except Exception:  # noqa: BLE001 - no NVML, no driver: there is none to name
        return "none"
    return version.decode() if isinstance(version, bytes) else str(version)


def _nvml_handle():
    """NVML's handle of this process's GPU: the visible device of its local rank (torchrun sets LOCAL_RANK; one
    process alone has rank 0), named by index or UUID in CUDA_VISIBLE_DEVICES."""
    visible = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    local = int(os.environ.get("LOCAL_RANK", "0"))
    name = visible[local] if local < len(visible) else str(local)
    if name.startswith(("GPU-", "MIG-")):
        return pynvml.nvmlDeviceGetHandleByUUID(name)
    return pynvml.nvmlDeviceGetHandleByIndex(int(name))


class DeviceMemory:
    """NVML's view of this process on the job's GPU (its rank's, in a torchrun job); None everywhere NVML or the GPU
    is absent."""

    def __init__(self) -> None:
        self.handle = None
        self.baseline = 0
        try:
            pynvml.nvmlInit()
            self.handle = _nvml_handle()
            self.baseline = pynvml.nvmlDeviceGetMemoryInfo(self.handle).used
        except Exception:  # noqa: BLE001 - no NVML, no GPU, or no driver: the figure is simply absent
            self.handle = None

    def process_bytes(self) -> int | None:
        """Memory NVML charges to this process (context included); falls back to the device's use above the
        baseline taken before CUDA started, when the process list is hidden (containers, VMs)."""
        if self.handle is None:
            return None
        try:
            for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(self.handle):
                if proc.pid == os.getpid() and proc.usedGpuMemory:
                    return int(proc.usedGpuMemory)
            return int(pynvml.nvmlDeviceGetMemoryInfo(self.handle).used - self.baseline)
        except Exception:  # noqa: BLE001
            return None


@dataclass(frozen=True)
class CapPlan:
    context_bytes: int  # the CUDA context, measured: outside the allocator, inside the cap
    fraction: float | None  # of the device's memory given to the caching allocator; None: uncapped


def cuda_started() -> bool:
    """Whether this process uses CUDA already (what the allocator holds is then worth reading)."""
    return torch.cuda.is_available() and torch.cuda.is_initialized()


def expandable_segments() -> str | None:
    """Whether the CUDA allocator's segments are expandable ("true"/"false", from its public snapshot, where it has
    one and says); None on the CPU."""
    if not cuda_started():
        return None
    found = [s["is_expandable"] for s in torch.cuda.memory_snapshot() if "is_expandable" in s]
    return str(any(found)).lower() if found else None


def release_cached() -> int:
    """Return the CUDA caching allocator's unused segments to the device (`torch.cuda.empty_cache`); the bytes it
    held reserved less after (0 on the CPU, which caches nothing)."""
    if not cuda_started():
        return 0
    before = torch.cuda.memory_reserved()
    torch.cuda.empty_cache()
    return before - torch.cuda.memory_reserved()


def apply_cuda_cap(cap_bytes: int | None, device_memory: DeviceMemory) -> CapPlan:
    """Start CUDA, measure the context, and limit the caching allocator so reserved + context stays under the cap
    (on this process's device: in a torchrun job, each rank's cap on its own)."""
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    used = device_memory.process_bytes()
    context = max(0, (used or 0) - torch.cuda.memory_reserved())
    if cap_bytes is None:
        return CapPlan(context, None)
    total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    fraction = max(0.0, min(1.0, (cap_bytes - context) / total))
    torch.cuda.set_per_process_memory_fraction(fraction)
    return CapPlan(context, fraction)


def job_memory(placement, cap_bytes, meter, context_bytes: int, model_load_bytes, device_memory) -> JobMemory:
    """A job's peaks; in a torchrun job also every rank's at the last step, and the largest as the peak (each rank is
    judged against the cap on its own device, so the job fits when its largest rank does)."""
    if placement is None:
        return JobMemory(peak_bytes=None, cap_bytes=cap_bytes)
    ranks = meter.rank_peaks if meter else ()
    if placement.device == "cuda":
        reserved = torch.cuda.max_memory_reserved()
        return JobMemory(
            peak_bytes=max((reserved + context_bytes, *ranks)),
            cap_bytes=cap_bytes,
            model_load_bytes=model_load_bytes,
            context_bytes=context_bytes,
            peak_reserved_bytes=reserved,
            peak_allocated_bytes=torch.cuda.max_memory_allocated(),
            nvml_process_bytes=device_memory.process_bytes() if device_memory else None,
            rank_peak_bytes=ranks,
        )
    rss = peak_rss_bytes()
    return JobMemory(
        peak_bytes=max((rss, *ranks)),
        cap_bytes=cap_bytes,
        model_load_bytes=model_load_bytes,
        peak_rss_bytes=rss,
        rank_peak_bytes=ranks,
    )
