"""A study's calibration: at most two short probe jobs (the smallest and the largest micro-batch, each once per step,
uncapped) that fit the memory predictor's two free numbers and say which split of the base config to measure
first. Stored on the study (user attribute `calibration`), so every worker and every resumed run uses the same."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf

from pipeline.jobs import task
from pipeline.records import GIB, RunKind, Status
from pipeline.search.predictor import Knobs
from pipeline.tracking import runs

FORMULA_KNOBS = ("batch.split", "train.dtype", "train.gradient_checkpointing")  # what the predictor's formula sees


def knobs_of(cfg: DictConfig, space_keys: list[str], placement_dtype: str | None = None) -> Knobs:
    """The memory knobs of a config: the formula's own, and the other searched keys as the line's fixed setting."""
    micro = int(cfg.batch.split.split("x")[0])
    dtype = cfg.train.dtype if cfg.train.dtype != "auto" else (placement_dtype or "fp32")
    other = tuple((k, str(OmegaConf.select(cfg, k))) for k in space_keys if k not in FORMULA_KNOBS)
    return Knobs(micro, cfg.train.max_length, dtype, bool(cfg.train.gradient_checkpointing), other)


@dataclass
class Calibration:
    probes: list[tuple[Knobs, float]] = field(default_factory=list)  # (knobs, measured peak bytes)
    first: tuple[str, float] | None = None  # the split to measure first, and its estimated step time
    gpu_seconds: float = 0.0
    dtype: str | None = None  # what the probes' placement resolved (train.dtype=auto)
    device: str | None = None

    def to_attr(self, scale: float, offset: float) -> dict[str, Any]:
        return {
            "scale": scale,
            "offset": offset,
            "probes": [
                {
                    "micro": k.micro,
                    "max_length": k.max_length,
                    "dtype": k.dtype,
                    "checkpointing": k.checkpointing,
                    "other": k.other,
                    "peak": peak,
                }
                for k, peak in self.probes
            ],
            "first": list(self.first) if self.first else None,
            "gpu_seconds": self.gpu_seconds,
            "dtype": self.dtype,
            "device": self.device,
        }


def probe_points(calibration: dict) -> list[tuple[Knobs, float]]:
    """The calibration probes stored on a study, as (knobs, peak bytes)."""
    return [
        (Knobs(p["micro"], p["max_length"], p["dtype"], p["checkpointing"], tuple(map(tuple, p["other"]))), p["peak"])
        for p in calibration.get("probes", [])
    ]


def run_probes(
    base: DictConfig,
    splits: list[str],
    space_keys: list[str],
    cap: int,
    study: str,
    parent: str,
    steps: int,
    base_in_space: bool,
) -> Calibration:
    """Probe the smallest and largest micro-batch of `splits` on the base config, recorded under `parent`."""
    found = Calibration()
    for split in dict.fromkeys([splits[0], splits[-1]]):
        # Memory depends on the micro-batch, not on accumulation: a probe runs its micro-batch once per step.
        micro, accumulation = (int(x) for x in split.split("x"))
        cfg = OmegaConf.create(OmegaConf.to_container(base, resolve=False))
        cfg.batch.split = f"{micro}x1"
        cfg.batch.effective = micro * cfg.world_size
        cfg.train.steps = steps
        cfg.measure.warmup_steps = 1
        spec = task.job_spec(cfg, name=f"probe {micro}x1", uncapped=True)
        outcome = task.run(cfg, spec=spec, kind=RunKind.PROBE, parent_id=parent, tags={runs.STUDY: study})
        summary = outcome.summary
        found.gpu_seconds += summary.seconds.get("wall", 0.0)
        if outcome.status is not Status.OK or not summary.peak_gib:
            continue
        placement = outcome.result.placement
        found.dtype, found.device = placement.dtype, placement.device
        at_split = OmegaConf.create(OmegaConf.to_container(base, resolve=False))
        at_split.batch.split = split
        found.probes.append((knobs_of(at_split, space_keys, placement.dtype), summary.peak_gib * GIB))
        if summary.median and summary.peak_gib * GIB <= cap and base_in_space:
            # The base config at this split (a candidate) takes about `accumulation` probe steps.
            estimate = summary.median * accumulation
            if found.first is None or estimate < found.first[1]:
                found.first = (split, estimate)
    return found
