"""A study's space read as every combination of its values: those a rule lets run, and whether each value is in one."""

from __future__ import annotations

import itertools
from collections.abc import Callable

from omegaconf import DictConfig, OmegaConf

from pipeline.config.errors import ConfigError


def runnable_combinations(space: dict, train: DictConfig, check: Callable[[DictConfig, dict], object]) -> list[dict]:
    """The combinations of `space` (a key -> its values) that `check(section, combination)` does not refuse with a
    ConfigError, where `section` is `train` with the combination's `train.*` values merged in."""
    valid = []
    for combo in itertools.product(*space.values()):
        values = dict(zip(space, combo, strict=True))
        section = OmegaConf.merge(train, {k.split(".", 1)[1]: v for k, v in values.items() if k.startswith("train.")})
        try:
            check(section, values)
        except ConfigError:
            continue
        valid.append(values)
    return valid


def assert_every_value_runs(space: dict, valid: list[dict]) -> None:
    """Every value of every key of `space` is in at least one of the `valid` combinations."""
    for key, values in space.items():
        assert {str(v) for v in values} == {str(c[key]) for c in valid}, key
