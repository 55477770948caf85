"""The search space: every split of the effective batch, times the knobs named in `optimize.space`."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from pipeline.config.validate import ConfigError, validate

SPLIT_KEY = "batch.split"


def splits(effective: int, world_size: int) -> list[str]:
    """Every 'MxA' with M x A x world_size = effective, smallest micro-batch first."""
    per_device = effective // world_size if effective % world_size == 0 else 0
    return [f"{m}x{per_device // m}" for m in range(1, per_device + 1) if per_device % m == 0]


@dataclass(frozen=True)
class Candidate:
    values: tuple[tuple[str, Any], ...]  # (config key, value), batch.split first

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.values)

    @property
    def overrides(self) -> list[str]:
        return [f"{k}={_text(v)}" for k, v in self.values]

    @property
    def label(self) -> str:
        return " ".join(self.overrides)


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def knob_space(cfg: DictConfig) -> dict[str, list[Any]]:
    space = {SPLIT_KEY: splits(cfg.batch.effective, cfg.world_size)}
    for key, values in cfg.optimize.space.items():
        if len(values):
            space[key] = list(values)
    return space


def apply(cfg: DictConfig, candidate: Candidate) -> DictConfig:
    """The base config with the candidate's values set (a copy)."""
    out = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    OmegaConf.set_struct(out, True)
    with open_dict(out):
        for key, value in candidate.values:
            OmegaConf.update(out, key, value, merge=False)
    return out


def candidates(cfg: DictConfig) -> tuple[list[Candidate], dict[str, str]]:
    """Every valid candidate, and the invalid ones with the reason (e.g. bf16 on a card without it)."""
    space = knob_space(cfg)
    keys = list(space)
    valid, invalid = [], {}
    for combo in itertools.product(*(space[k] for k in keys)):
        candidate = Candidate(tuple(zip(keys, combo, strict=True)))
        try:
            validate(apply(cfg, candidate))
        except ConfigError as err:
            invalid[candidate.label] = str(err)
            continue
        valid.append(candidate)
    return valid, invalid


def suggest(trial, space: dict[str, list[Any]]) -> Candidate:
    return Candidate(tuple((key, trial.suggest_categorical(key, values)) for key, values in space.items()))
