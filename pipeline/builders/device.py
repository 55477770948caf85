"""Where a job runs and in which precision: the real device, the emulated card, and the compute dtype."""

from __future__ import annotations

import torch

from pipeline.config.choices import CPU
from pipeline.config.schema import GpuConfig
from pipeline.knobs import KnobRole, role
from pipeline.records import GIB, Placement


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu"


def match_profile(device_name: str, memory_gib: float, profiles: dict[str, dict]) -> str | None:
    """The gpu profile of a real device: its family ('h200', 'a100', 't4') named in the device's name, the closest
    memory breaking ties (a100-40gb vs a100-80gb)."""
    words = device_name.lower().replace("-", " ").split()
    found = [n for n in profiles if n.split("-")[0] in words]
    if not found:
        return None
    return min(found, key=lambda n: abs(profiles[n]["memory_gib"] - memory_gib))


def resolve_placement(gpu: GpuConfig, dtype: str, profiles: dict[str, dict] | None = None) -> Placement:
    """Pick the device for a gpu profile and the dtype for `dtype` (auto: bf16 where supported, fp16 on other GPUs,
    fp32 on CPU). A named profile on a CUDA device with more memory is emulated (its memory becomes the cap)."""
    gpu_name, memory_gib, bf16, peak_tflops = gpu.name, gpu.memory_gib, gpu.bf16, gpu.peak_tflops
    use_cuda = gpu_name != CPU and torch.cuda.is_available()
    resolve = role(KnobRole.DTYPE).resolve
    if use_cuda:
        props = torch.cuda.get_device_properties(torch.cuda.current_device())  # a torchrun rank's own device
        real_gib = props.total_memory / GIB
        supported = torch.cuda.is_bf16_supported() if bf16 is None else bool(bf16)
        emulated = None
        if gpu_name != "auto" and memory_gib is not None and memory_gib < real_gib:
            emulated = gpu_name
        dtype = resolve(dtype, True, supported)
        if emulated or gpu_name == "auto":  # speed is the real device's: so is the peak MFU is measured against
            real = match_profile(props.name, real_gib, profiles or {})
            peak_tflops = profiles[real]["peak_tflops"] if real else None
        return Placement("cuda", props.name, round(real_gib, 2), emulated, dtype, peak_tflops, supported)
    dtype = resolve(dtype, False, None)
    emulated = gpu_name if gpu_name not in ("auto", CPU) else None
    return Placement("cpu", _cpu_name(), None, emulated, dtype, None, True)


def torch_dtype(name: str) -> torch.dtype:
    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[name]
