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

from pipeline.records import Compile

BOOKKEEPING = ("repeat", "repeats", "sweep_id", "paths", "tracking", "launcher", "optimize")
VOLATILE = (("train", "progress_bar"),)  # how much is printed, not what is trained
SHORT_KEYS = {
    "train.gradient_checkpointing": "ckpt",
    "train.torch_compile": "compile",
    "train.compile_mode": "mode",
    "train.liger_kernel": "liger",
    "train.learning_rate": "lr",
    "train.adapter_dtype": "adapters",
    "train.optimizer": "optim",
    "train.optimizer_step": "optim_step",
    "model.attn_implementation": "attn",
    "lora.target_modules": "targets",
    "world_size": "ws",
}
NAMED_KEYS = ("batch.split", "model", "repeat", "repeats")  # in every name already, or bookkeeping
COMPILE_KEY = "train.torch_compile"


def canonical_compile(value: Any) -> Any:
    """`train.torch_compile` as the choice it names (`true` -> `regional`, `false` -> `off`), so a config written
    either way is one config; a value that names none is left as it is (validation refuses it)."""
    try:
        return Compile.of(value).value
    except ValueError:
        return value


def identity_tree(cfg: DictConfig | dict[str, Any]) -> dict[str, Any]:
    """The part of a config that defines what is trained and measured."""
    tree = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else copy.deepcopy(cfg)
    for key in BOOKKEEPING:
        tree.pop(key, None)
    for group, key in VOLATILE:
        tree.get(group, {}).pop(key, None)
    train = tree.get("train")
    if isinstance(train, dict) and "torch_compile" in train:
        train["torch_compile"] = canonical_compile(train["torch_compile"])
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
    """`train.gradient_checkpointing=false` -> `ckpt=off`, `train.torch_compile=true` -> `compile=regional`; other
    keys by their last part."""
    name = SHORT_KEYS.get(key, key.rsplit(".", 1)[-1])
    if key == COMPILE_KEY:
        return f"{name}={canonical_compile(value)}"
    text = str(value)
    if isinstance(value, bool) or text.lower() in ("true", "false"):
        text = "on" if text.lower() == "true" else "off"
    return f"{name}={text}"


def display_name(model: str, split: str, values: list[tuple[str, Any]]) -> str:
    """The model, the split, then each (key, value) that varies, e.g. `qwen3-1.7b 4x1 ckpt=off compile=regional`."""
    return " ".join([model, split, *(short(k, v) for k, v in values)])
