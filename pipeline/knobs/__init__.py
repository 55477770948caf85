"""The speed knobs, one module each in this folder (`base` says what a knob is): every module but `base` defines
`KNOB`, and the registry is what the folder holds, in the order of the modules' names. Adding a knob is adding its
module (and its default to its group's YAML): the schema, validation, `--help`, identity, the job's builders, the
exported script, the search (its memory formula, probes, prior and screening order), the result card and the docs
read it from here, asking each knob, or the knob of a role (`role`) where they need one in particular; none spells a
knob's key.

The registry is read on first use, not at import: a module put on the folder's path (`__path__`) before then is a
knob like any other.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Iterable
from enum import StrEnum
from typing import Any

from pipeline.knobs.base import VARYING, Knob, KnobRole, Memory, Slack  # noqa: F401 - VARYING: the study passes it


@functools.cache
def registry() -> tuple[Knob, ...]:
    """Every knob of the folder, by module name (`base` and the private modules are not knobs)."""
    names = sorted({m.name for m in pkgutil.iter_modules(__path__) if m.name != "base" and not m.name.startswith("_")})
    return tuple(importlib.import_module(f"{__name__}.{name}").KNOB for name in names)


def in_section(section: str) -> list[Knob]:
    """The knobs of one config section (`train`, `model`)."""
    return [k for k in registry() if k.section == section]


def by_key() -> dict[str, Knob]:
    return {k.key: k for k in registry()}


@functools.cache
def role(which: KnobRole) -> Knob:
    """The knob with a role (`KnobRole`): how a module outside the folder finds the one it must, never by its key."""
    found = [k for k in registry() if k.role == which]
    if len(found) != 1:
        raise LookupError(f"{len(found)} knobs have the role {which}")
    return found[0]


def recomputes(config: Any) -> bool:
    """Whether a config's layers recompute their forward in the backward (`Knob.recomputes`)."""
    return any(k.recomputes(config.train) for k in in_section("train"))


def packs(train: Any) -> bool:
    """Whether a train section packs records into rows of max_length (`Knob.packs`)."""
    return any(k.packs(train) for k in in_section("train"))


def truncates(train: Any) -> bool:
    """Whether a train section's records come truncated to max_length before the collator (`Knob.truncates`)."""
    return any(k.truncates(train) for k in in_section("train"))


def one_shape(train: Any) -> bool:
    """Whether a train section gives every micro-batch one shape (`Knob.one_shape`)."""
    return any(k.one_shape(train) for k in in_section("train"))


def prepare_process(train: Any, environ: dict) -> None:
    """Set up a job's process before it touches the device, in its environment `environ` (`Knob.process`)."""
    for k in in_section("train"):
        k.process(train, environ)


def model_kwargs(model: Any) -> dict[str, Any]:
    """The model's `from_pretrained` arguments the knobs set, from the model section (`Knob.model_kwargs`)."""
    return {key: value for k in registry() for key, value in k.model_kwargs(model).items()}


def card_lines() -> list[tuple[str, str]]:
    """(key, words) of the knobs a result card's setting line shows, in its order (`Knob.card`)."""
    return [(k.key, k.card[1]) for k in sorted((k for k in registry() if k.card), key=lambda k: k.card[0])]


def short_names() -> dict[str, str]:
    """Each knob's name in a config's display name (`train.gradient_checkpointing` -> `ckpt`)."""
    return {k.key: k.short or k.name for k in registry()}


def searched(lengths_vary: bool | None = None, cuda: bool = True) -> dict[str, list[Any]]:
    """What a study over everything this setting can run tries: each knob's searched values, by key (where the
    records' lengths vary or not, on a CUDA device or not, where given: `Knob.searched_in`)."""
    found = {k.key: k.searched if lengths_vary is None else k.searched_in(lengths_vary, cuda) for k in registry()}
    return {key: [v.value if isinstance(v, StrEnum) else v for v in values] for key, values in found.items() if values}


def dropped(lengths_vary: bool, cuda: bool) -> dict[str, dict[Any, str]]:
    """What a study over everything leaves out of each knob's searched values on this setting, with why, by key
    (`Knob.dropped_in`)."""
    found = {k.key: k.dropped_in(lengths_vary, cuda) for k in registry()}
    return {
        key: {v.value if isinstance(v, StrEnum) else v: why for v, why in values.items()}
        for key, values in found.items()
        if values
    }


def memory(values: Iterable[tuple[str, Any]], dtype: str | None = None) -> Memory:
    """The memory term of knob values (key, value as a config or a record writes it) in a job computing in `dtype`
    (None: not known), a knob not among them at its default; other keys add nothing."""
    knobs = by_key()
    given = dict(values)
    setting = {"train.dtype": dtype, **given}
    term = Memory()
    for key, value in [*given.items(), *((k.key, k.default) for k in registry() if k.key not in setting)]:
        if key in knobs:
            term += knobs[key].memory_in(knobs[key].canonical(value), setting)
    return term


def slack(values: Iterable[tuple[str, Any]]) -> Slack | None:
    """What a process of a config (knob values: key, value as a config writes it; a knob not among them at its
    default) may keep unused over another's peak (`Knob.slack_in`); None: nothing."""
    setting = dict(values)
    for knob in registry():
        found = knob.slack_in(knob.canonical(setting.get(knob.key, knob.default)), setting)
        if found is not None:
            return found
    return None


def unmodelled(values: Iterable[tuple[str, Any]]) -> tuple[tuple[str, str], ...]:
    """What knob values (key, value as a config or a record writes it) move the peak beyond their memory terms
    (`Knob.unmodelled`), by key."""
    knobs = by_key()
    values = list(values)
    setting = dict(values)
    found = (
        (key, knobs[key].unmodelled(knobs[key].canonical(value), setting)) for key, value in values if key in knobs
    )
    return tuple(sorted((key, v) for key, v in found if v is not None))
