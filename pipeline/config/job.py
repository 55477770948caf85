"""A job's config as its check leaves it: the schema's dataclasses with what the check parsed out of them, made once
(`validate` returns it) and read as is by the sweep, the study and the job, so that nothing after the check parses
a config again: the split, the memory cap in bytes, and where the job runs."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from omegaconf import DictConfig

from pipeline import knobs
from pipeline.config.choices import CPU
from pipeline.config.errors import ConfigError
from pipeline.config.identity import config_id
from pipeline.config.knobs import compute_dtype, on_cuda
from pipeline.config.schema import Config, typed
from pipeline.records import GIB

_SPLIT = re.compile(r"^([0-9]+)x([0-9]+)$")
_SIZE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(TiB|GiB|MiB|KiB|TB|GB|MB|KB)$")
_UNIT = {
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
    "TiB": 2**40,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
}
SIZE_FORM = "a size like 14GiB, 14.5GB or 15000MiB"


@dataclass(frozen=True)
class Split:
    micro: int
    accumulation: int

    def __str__(self) -> str:
        return f"{self.micro}x{self.accumulation}"


def parse_split(text: str, field: str = "batch.split") -> Split:
    """'2x8' -> Split(2, 8): the one reader of a split."""
    match = _SPLIT.match(str(text))
    if not match or int(match.group(1)) < 1 or int(match.group(2)) < 1:
        raise ConfigError(
            field,
            f"got '{text}'; accepted: 'MxA' with whole numbers M, A >= 1 (micro-batch x accumulation), e.g. 2x2",
        )
    return Split(int(match.group(1)), int(match.group(2)))


def parse_size(text: str, field: str = "mem_cap") -> int:
    """'14GiB' -> bytes. Binary (KiB..TiB) and decimal (KB..TB) units; no spaces."""
    match = _SIZE.match(str(text))
    if not match or float(match.group(1)) <= 0:
        raise ConfigError(field, f"got '{text}'; accepted: {SIZE_FORM}")
    return int(float(match.group(1)) * _UNIT[match.group(2)])


def resolve_cap(cfg: DictConfig) -> tuple[int | None, str | None]:
    """The memory cap in bytes and where it came from: mem_cap, else a named gpu profile's memory."""
    if cfg.mem_cap is not None:
        return parse_size(cfg.mem_cap), "mem_cap"
    if cfg.gpu.name not in ("auto", CPU) and cfg.gpu.memory_gib:
        return int(cfg.gpu.memory_gib * GIB), f"gpu={cfg.gpu.name}"
    return None, None


@dataclass(frozen=True)
class JobConfig:
    """One job's config, checked and parsed. `config` is the schema's dataclasses, every interpolation resolved and
    each speed knob's alias written as the choice it names (a compile of `true` is `regional`): one spelling
    on record, one identity."""

    config: Config
    config_id: str
    split: Split
    cap_bytes: int | None  # the memory cap: mem_cap, else the memory of a named gpu profile
    cap_source: str | None  # "mem_cap" or "gpu=<profile>"
    device: str  # where the job runs: cuda or cpu
    dtype: str | None  # what it computes in; None: auto on a CUDA card whose bf16 support only the device tells

    def with_length(self, warmup_steps: int, steps: int) -> JobConfig:
        """The same job, trained for `warmup_steps` then `steps` steady steps (a confirmation run); its identity
        stays the job's, so that its runs pool with it."""
        config = dataclasses.replace(
            self.config,
            train=dataclasses.replace(self.config.train, steps=warmup_steps + steps),
            measure=dataclasses.replace(self.config.measure, warmup_steps=warmup_steps),
        )
        return dataclasses.replace(self, config=config)


def parse(cfg: DictConfig) -> JobConfig:
    """A config's JobConfig, without checking it: what `validate` returns for a config it passed, or the parse of
    one a study derives from a checked config (a probe's micro-batch)."""
    config = typed(cfg)
    for knob in knobs.registry():
        section = getattr(config, knob.section)
        setattr(section, knob.name, knob.canonical(knob.value(section)))
    cap_bytes, cap_source = resolve_cap(cfg)
    return JobConfig(
        config=config,
        config_id=config_id(dataclasses.asdict(config)),
        split=parse_split(cfg.batch.split),
        cap_bytes=cap_bytes,
        cap_source=cap_source,
        device="cuda" if on_cuda(cfg.gpu) else CPU,
        dtype=compute_dtype(cfg.train, cfg.gpu),
    )
