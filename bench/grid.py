"""A recorded grid (JSON, `bench.grid_export`): the space, the baseline (the command line's config), the cap, the trial
length, and one record per config: its params, status (ok, oom, failed), step seconds, peak GiB and fixed seconds
(spawn, setup, compilation), of those its compilation's, and its steps' spread in its process (`step_sd`), where they
were recorded; and what a config's later processes compile where a study's cache holds its layers (`bench.replay`
runs studies against it).
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.search import _sampler as sampler

# what a later process of a compiled config compiles, the rest read from the cache: at most 4.6 s (3.0-4.6 s in 22
# processes on an H200, two settings, against 16.6-20.3 s in 8 with an empty cache; BENCHMARKS.md)
CACHED_COMPILE_S = 4.6
# what a trial compiles where an earlier trial of its study compiled the same layers, and it changes only keys that
# leave them as they are (the loss and the optimizer, outside the layers): at most 9.5 s (3.1-9.5 s in 20 such trials
# of 4 studies on an H100 and an H200, three settings, against 14.8-31.0 s for the first; BENCHMARKS.md)
SHARED_COMPILE_S = 9.5
OUTSIDE_THE_LAYERS = ("train.loss", "train.optimizer")


@dataclass(frozen=True)
class GridConfig:
    params: dict[str, Any]
    status: str  # ok | oom | failed
    step_s: float | None
    peak_gib: float | None
    fixed_s: float
    runs: int = 1  # processes that measured it (its step_s: their geometric mean)
    compile_s: float | None = None  # of fixed_s, its compilation (None: not recorded, read as what is over the least)
    step_sd: float | None = None  # its steady steps' spread in its process (sd of their logs; None: not recorded)

    @property
    def label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.params.items())


@dataclass(frozen=True)
class Grid:
    space: dict[str, list[Any]]
    baseline: dict[str, Any]
    cap_gib: float
    steps: int
    warmup: int
    configs: list[GridConfig]
    setting: str = ""

    @classmethod
    def load(cls, path: Path) -> Grid:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
        configs = [GridConfig(**c) for c in raw["configs"]]
        return cls(raw["space"], raw["baseline"], raw["cap_gib"], raw["steps"], raw["warmup"], configs, raw["setting"])

    def compile_s(self, config: GridConfig) -> float:
        """Its compilation's seconds: as recorded, or where not, its start-up over the grid's least (a config that
        compiles nothing starts in about the same time as any other: 1.6-2.0 s on the seed's grid)."""
        if config.compile_s is not None:
            return config.compile_s
        return max(0.0, config.fixed_s - min(c.fixed_s for c in self.configs))

    def rerun_fixed_s(self, config: GridConfig, compiles_s: float = CACHED_COMPILE_S) -> float:
        """A later process's start-up: its compilation read back from the cache but `compiles_s` of it (a config's
        own later process: CACHED_COMPILE_S; a trial whose layers an earlier trial compiled: SHARED_COMPILE_S; the
        grid's figure is its own recording's, in the order the grid ran)."""
        compiled = self.compile_s(config)
        return config.fixed_s - compiled + min(compiled, compiles_s)

    def first_fixed_s(self, config: GridConfig) -> float:
        """A study's first process of compiled layers: at least what the grid's first config of the same layers
        compiled (the grid ran them in its order over one cache, so the later ones read the layers back; one that
        compiled more, as on a resumed grid's fresh machine, keeps its own). As recorded where both compilations
        were."""
        group = layers(config)
        first = next((c for c in self.configs if layers(c) == group), None) if group is not None else None
        if first is None or first.compile_s is None or config.compile_s is None:
            return config.fixed_s
        return config.fixed_s - config.compile_s + max(config.compile_s, first.compile_s)

    def find(self, params: dict[str, Any]) -> GridConfig | None:
        return self._by_key.get(sampler.key(params))

    @property
    def _by_key(self) -> dict[tuple, GridConfig]:
        return {sampler.key(c.params): c for c in self.configs}

    def space_order(self) -> dict[tuple, int]:
        """Each config's place in the space as a study enumerates it (the product of the keys' values in order)."""
        combos = itertools.product(*self.space.values())
        return {sampler.key(dict(zip(self.space, combo, strict=True))): i for i, combo in enumerate(combos)}

    def fits(self, config: GridConfig) -> bool:
        return config.status == "ok" and config.peak_gib is not None and config.peak_gib <= self.cap_gib

    @property
    def best(self) -> GridConfig:
        return min((c for c in self.configs if self.fits(c)), key=lambda c: c.step_s)

    def job_seconds(self, config: GridConfig, steps: int) -> float:
        if config.status != "ok":
            return config.fixed_s + (config.step_s or 0.0)
        return config.fixed_s + steps * config.step_s

    @property
    def seconds(self) -> float:
        """Device seconds of the grid: every config measured once, over the trials' length."""
        return sum(self.job_seconds(c, self.steps) for c in self.configs)


def layers(config: GridConfig) -> tuple | None:
    """What a config's compiled layers depend on: its keys but those outside the layers; None where its layers run
    eagerly (an eager config's compilation, a compiled loss's, shares nothing with another's)."""
    if config.params.get("train.torch_compile", "off") == "off":
        return None
    return tuple(sorted((k, v) for k, v in config.params.items() if k not in OUTSIDE_THE_LAYERS))
