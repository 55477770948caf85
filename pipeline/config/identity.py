"""A config's identity and its display name.

The identity is a short hash of the resolved config without bookkeeping (repeat index, sweep id, paths, tracking,
launcher, the study's own settings, the progress bar): two runs share it exactly when they trained the same thing
the same way, so repeats pool by it and nothing else. The display name says what differs: the model, the split,
and every other key that varies across the sweep or study, in a short form (`tiny 4x1 ckpt=off compile=regional`).
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from omegaconf import DictConfig, OmegaConf

from pipeline import knobs

BOOKKEEPING = ("repeat", "repeats", "sweep_id", "paths", "tracking", "launcher", "optimize", "wide")
VOLATILE = (("train", "progress_bar"),)  # how much is printed, not what is trained
SHORT_KEYS = {  # beside each speed knob's own (`pipeline.knobs`)
    "train.learning_rate": "lr",
    "lora.target_modules": "targets",
    "world_size": "ws",
}
NAMED_KEYS = ("batch.split", "model", "repeat", "repeats")  # in every name already, or bookkeeping


def canonical(key: str, value: Any) -> Any:
    """A speed knob's value as the choice it names (an alias such as `true` -> `regional`), so a config written
    either way is one config; any other value, or one that names no choice (validation refuses it), as it is."""
    knob = knobs.by_key().get(key)
    if knob is None or not knob.aliases:
        return value
    try:
        return knob.canonical(value)
    except ValueError:
        return value


def identity_tree(cfg: DictConfig | dict[str, Any]) -> dict[str, Any]:
    """The part of a config that defines what is trained and measured."""
    tree = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else copy.deepcopy(cfg)
    for key in BOOKKEEPING:
        tree.pop(key, None)
    for group, key in VOLATILE:
        tree.get(group, {}).pop(key, None)
    for knob in knobs.registry():
        section = tree.get(knob.section)
        if isinstance(section, dict) and knob.name in section:
            section[knob.name] = canonical(knob.key, section[knob.name])
    return tree


def digest(tree: Any, length: int = 10) -> str:
    return hashlib.sha1(json.dumps(tree, sort_keys=True, default=str).encode()).hexdigest()[:length]


def config_id(cfg: DictConfig | dict[str, Any]) -> str:
    """A stable short hash of the config's identity."""
    return digest(identity_tree(cfg))


def parse_override(text: str) -> tuple[str, str]:
    """`+train.steps=5` -> ("train.steps", "5")."""
    key, _, value = text.partition("=")
    return key.lstrip("+~"), value


def varying_keys(jobs: list[list[str]]) -> list[str]:
    """Keys whose values differ between the jobs of a sweep (in the order they first appear), bar those every name
    shows anyway."""
    values: dict[str, set[str]] = {}
    for job in jobs:
        seen = dict(parse_override(o) for o in job)
        for key in {k for j in jobs for k, _ in map(parse_override, j)}:
            values.setdefault(key, set()).add(seen.get(key, "<unset>"))
    order = list(dict.fromkeys(parse_override(o)[0] for job in jobs for o in job))
    return [k for k in order if len(values[k]) > 1 and k not in NAMED_KEYS]


def short(key: str, value: Any) -> str:
    """A speed knob by its short name and its value as the choice it names (a false checkpointing -> `ckpt=off`, a
    compile of `true` -> `compile=regional`), other keys by their last part."""
    name = {**SHORT_KEYS, **knobs.short_names()}.get(key, key.rsplit(".", 1)[-1])
    value = canonical(key, value)
    text = str(value)
    if isinstance(value, bool) or text.lower() in ("true", "false"):
        text = "on" if text.lower() == "true" else "off"
    return f"{name}={text}"


def display_name(model: str, split: str, values: list[tuple[str, Any]]) -> str:
    """The model, the split, then each (key, value) that varies, e.g. `qwen3-1.7b 4x1 ckpt=off compile=regional`."""
    return " ".join([model, split, *(short(k, v) for k, v in values)])
