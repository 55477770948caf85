"""How long a job would take on this CPU, estimated before anything runs: the job's FLOPs over the rate a quick
matrix product reaches here. Training reaches less than a bare matrix product, so the estimate is a lower bound;
its point is to warn before a 1.7B-parameter model starts a day of CPU work."""

from __future__ import annotations

from omegaconf import DictConfig

from pipeline import knobs
from pipeline.config.choices import CPU, DataKind, ModelSource
from pipeline.config.devices import cpu_matmul_flops, cuda_device_count
from pipeline.measure.flops import Shape, flops_per_token

LONG_JOB_S = 600.0


SLOWEST_CPU_FLOPS = 1e9  # below this many FLOPs per LONG_JOB_S no CPU is too slow: nothing to measure


def cpu_job_flops(cfg: DictConfig) -> float | None:
    """Hardware FLOPs of the job; None when it runs on a GPU or its shape is unknown."""
    if cfg.gpu.name != CPU and cuda_device_count() > 0:
        return None
    m = cfg.model
    if m.source != ModelSource.CONFIG:
        return None
    shape = Shape.from_model(m)
    length = cfg.data.length if cfg.data.kind == DataKind.SYNTHETIC else cfg.train.max_length
    fpt = flops_per_token(
        shape.base_matmul_params(),
        shape.lora_params(cfg.lora.r, list(cfg.lora.target_modules)),
        shape.layers,
        length,
        shape.heads,
        shape.head_dim,
        knobs.recomputes(cfg),
    )
    return cfg.train.steps * cfg.batch.effective * length * fpt.hardware


def long_cpu_job_warning(cfg: DictConfig) -> str | None:
    """A one-line warning when the job would run for more than LONG_JOB_S on this CPU."""
    flops = cpu_job_flops(cfg)
    if flops is None or flops < LONG_JOB_S * SLOWEST_CPU_FLOPS:
        return None
    rate = cpu_matmul_flops()
    seconds = flops / rate
    if seconds < LONG_JOB_S:
        return None
    hours = seconds / 3600
    when = f"{hours:.1f} h" if hours >= 1 else f"{seconds / 60:.0f} min"
    return (
        f"warning: {cfg.model.name} on the CPU: at least {when} per job ({flops:.1e} FLOPs at the "
        f"{rate / 1e9:.0f} GFLOP/s this CPU reaches); a GPU, or model=tiny, is faster"
    )
