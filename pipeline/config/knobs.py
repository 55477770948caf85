"""The speed knobs of a config checked up front (`pipeline.knobs`: each knob's choices and rule): a knob that cannot
run on the installed stack and this device is refused with one line before any model loads, not found out after
minutes of compilation. Also where a job will run and in which dtype, as far as the parent can tell."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from pipeline import knobs
from pipeline.config.choices import CPU
from pipeline.config.devices import cuda_device_count
from pipeline.config.errors import ConfigError, spelled
from pipeline.knobs.base import KnobRole, Setting


def on_cuda(gpu: DictConfig) -> bool:
    """Whether the job will run on a CUDA device."""
    return gpu.name != CPU and cuda_device_count() > 0


def compute_dtype(t: DictConfig, gpu: DictConfig) -> str | None:
    """The dtype the job will compute in, where it can be told before a device is opened (None: auto on an
    unknown card)."""
    precision = knobs.role(KnobRole.DTYPE)
    return precision.resolve(precision.value(t), on_cuda(gpu), gpu.bf16)


def check_values(section: str, values: Any) -> None:
    """Every knob of a config section (`values`) holds one of its choices or aliases."""
    for knob in knobs.in_section(section):
        value = knob.value(values)
        try:
            knob.canonical(value)
        except ValueError:
            raise ConfigError(knob.key, f"got '{spelled(value)}'; accepted: {knob.accepted()}") from None


def setting_of(train: Any, model: Any, gpu: Any, accumulation: int, cuda: bool | None = None) -> Setting:
    """What a knob's rule sees (`cuda`: as check_knobs says)."""
    if cuda is None:
        cuda = gpu.name != CPU and (gpu.name != "auto" or cuda_device_count() > 0)
    return Setting(train, model, gpu, cuda, accumulation)


def same_job(setting: Setting) -> dict[str, tuple[Any, str]]:
    """The knobs whose value makes no job of its own in `setting`: key -> (the value whose job it runs, why)."""
    found = {}
    for knob in knobs.registry():
        section = {"train": setting.train, "model": setting.model}.get(knob.section)
        twin = knob.same_job_as(knob.value(section), setting) if section is not None else None
        if twin is not None:
            found[knob.key] = twin
    return found


def check_knobs(
    train: Any, model: Any, gpu: Any, accumulation: int, cuda: bool | None = None, keys: tuple[str, ...] = ()
) -> None:
    """Each knob's rule against the stack, the device and the other knobs (`keys`: these knobs only); raises
    ConfigError for the first that refuses. `cuda`: whether the job is meant for a CUDA device (by default what
    the gpu profile and the machine say: a named card is, and is refused later where there is none)."""
    setting = setting_of(train, model, gpu, accumulation, cuda)
    for knob in knobs.registry():
        if keys and knob.key not in keys:
            continue
        why = knob.refuses(setting)
        if why:
            raise ConfigError(knob.key, why)
