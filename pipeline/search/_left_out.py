"""What of the search space no config can run, and why: each value of the space that no valid candidate uses, with
its real blocker (`unusable`); whether a study may leave it out and go on (`droppable`: an accepted value this setting
cannot run) or must refuse the command line (`check_values`: a value no field takes, a world size the machine lacks);
and the space's candidates with the values left out (`candidates`)."""

from __future__ import annotations

import re
from typing import Any

from omegaconf import DictConfig

from pipeline.config.accepted import choices_of
from pipeline.config.errors import ConfigError
from pipeline.search._space import (
    SPLIT_KEY,
    WORLD_KEY,
    Candidate,
    LeftOut,
    combinations,
    knob_space,
    not_searched,
    override_text,
)

_KEY = re.compile(r"\b(?:model|lora|gpu|batch|data|train|optimize|measure|launcher)\.\w+")


def _blocker(key: str, value: Any, space: dict, invalid: dict) -> str:
    """Why `key=value` runs in no combination: a split that does not make the effective batch says nothing of the
    value itself, so it comes last; before it, a reason that names a setting the space does not search (CUDA graphs
    need a padding with few shapes) comes before one that names only searched keys (a compile mode with
    compilation off, a split with accumulation: the space's own combinations)."""
    reasons = [why for label, why in invalid.items() if f"{key}={override_text(value)}" in label.split()]

    def rank(why: str) -> tuple[bool, bool, bool]:
        named = set(_KEY.findall(why.partition(": ")[2])) - {key}
        return why.startswith(f"{SPLIT_KEY}:"), not (named - set(space)), bool(named & set(space))

    return min(reasons, key=rank, default="no valid combination uses it")


def unusable(cfg: DictConfig, valid: list[Candidate], invalid: dict) -> list[LeftOut]:
    """The values of the space that no valid candidate uses, each with its real blocker (world sizes first: a
    split that only an impossible world size makes is that world size's fault)."""
    space = knob_space(cfg)
    found = []
    for key, values in sorted(space.items(), key=lambda item: item[0] != WORLD_KEY):
        used = {override_text(c.params[key]) for c in valid}
        for value in values:
            if override_text(value) not in used:
                found.append(LeftOut(key, value, _blocker(key, value, space, invalid)))
    return found


def droppable(left: LeftOut) -> bool:
    """A value a study may leave out and go on: an accepted value of its field that this setting cannot run (a
    preset space on another device or padding), not a value the field never takes (a typo, `fp8`) nor a world size
    the machine lacks."""
    accepted = choices_of(left.key)
    return left.key != WORLD_KEY and accepted is not None and override_text(left.value) in accepted


def candidates(cfg: DictConfig) -> tuple[list[Candidate], list[LeftOut]]:
    """Every valid candidate, and the values left out: those of the space no valid config uses, and those a study
    over everything does not search on this setting (`Knob.dropped_in`), each with why."""
    valid, invalid = combinations(cfg)
    return valid, [*unusable(cfg, valid, invalid), *not_searched(cfg)]


def check_values(cfg: DictConfig) -> None:
    """A space the study can search: no key without values, splits and a valid config, and every value that no
    valid config uses is one its field accepts (left out, and named, by the study); a value no field takes, or a
    world size the machine lacks, is refused with the reason."""
    for key, values in cfg.optimize.space.items():
        if not len(values):
            raise ConfigError(
                f"optimize.space.{key}",
                "an empty list searches nothing; accepted: the values to search, e.g. [fp16, bf16], or the key left "
                "out of the space ('++optimize.space={...}' sets the whole space)",
            )
    space = knob_space(cfg)
    if not space[SPLIT_KEY]:
        raise ConfigError("batch.effective", "has no split for this world_size; accepted: a multiple of world_size")
    valid, invalid = combinations(cfg)
    if not valid:
        raise ConfigError("optimize.space", f"no config in it can run; e.g. {next(iter(invalid.values()))}")
    for left in unusable(cfg, valid, invalid):
        if not droppable(left):
            raise ConfigError(
                f"optimize.space.{left.key}", f"value {override_text(left.value)!r} cannot run: {left.reason}"
            )
