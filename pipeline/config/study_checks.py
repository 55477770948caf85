"""The checks of a study's settings (`optimize.*`) and of the names MLflow and Optuna store and search for."""

from __future__ import annotations

import json
import re

from omegaconf import DictConfig, OmegaConf

from pipeline.config.errors import ConfigError, at_least, in_range

MAX_EXPERIMENT_NAME = 500  # MLflow's limit
MAX_STUDY_NAME = 200  # within Optuna's 512 with the suffixes of its lock studies; MLflow's filters have no escapes
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_name(field: str, value: object, longest: int, refused: str, accepted: str) -> None:
    """A name MLflow or Optuna stores and searches for: 1 to `longest` characters, none of `refused` (characters the
    stores' filter strings cannot hold) and no control characters; `accepted` says so in the message."""
    text = str(value)
    if not text.strip():
        raise ConfigError(field, f"empty; accepted: {accepted}")
    if len(text) > longest:
        raise ConfigError(field, f"{len(text)} characters long; accepted: {accepted}")
    bad = next((c for c in text if c in refused or _CONTROL.match(c)), None)
    if bad is not None:
        raise ConfigError(field, f"got {json.dumps(text)[:80]}, which holds {json.dumps(bad)}; accepted: {accepted}")


def check_splits(values: object, cfg: DictConfig) -> None:
    """`optimize.space.batch.split` narrows the splits searched: a list of splits of the effective batch (at a world
    size the study searches)."""
    sizes = cfg.optimize.space.get("world_size") or [cfg.world_size]
    effective = cfg.batch.effective
    accepted = sorted(
        {
            f"{m}x{effective // w // m}"
            for w in sizes
            if effective % w == 0
            for m in range(1, effective // w + 1)
            if (effective // w) % m == 0
        },
        key=lambda s: [int(n) for n in s.split("x")],
    )
    listed = OmegaConf.to_container(values) if OmegaConf.is_list(values) else values
    form = f"a list of splits of effective batch {effective}: {', '.join(accepted)}"
    if not isinstance(listed, list) or not listed:
        raise ConfigError("optimize.space.batch.split", f"got {listed}; accepted: {form}")
    wrong = [str(v) for v in listed if str(v) not in accepted]
    if wrong:
        raise ConfigError("optimize.space.batch.split", f"got {', '.join(wrong)}; accepted: {form}")


def check_optimize(o: DictConfig, cfg: DictConfig) -> None:
    at_least("optimize.trials", o.trials, 1)
    at_least("optimize.probe_steps", o.probe_steps, 2)
    at_least("optimize.prune_steps", o.prune_steps, 1)
    if o.prune_factor < 1.0:
        raise ConfigError("optimize.prune_factor", f"got {o.prune_factor}; accepted: a number >= 1")
    at_least("optimize.skip_margin", o.skip_margin, 0, "a number")
    at_least("optimize.confirm_k", o.confirm_k, 1)
    at_least("optimize.confirm_within", o.confirm_within, 0, "a number")
    in_range("optimize.confirm_share", o.confirm_share, 0.0, 0.9)
    at_least("optimize.confirm_steps", o.confirm_steps, 3)
    at_least("optimize.confirm_rounds", o.confirm_rounds, 3)
    if o.confirm_budget_s is not None:
        at_least("optimize.confirm_budget_s", o.confirm_budget_s, 0, "a number (or null: the share alone)")
    at_least("optimize.confirm_floor_s", o.confirm_floor_s, 0, "a number of seconds")
    in_range("optimize.tie_tolerance", o.tie_tolerance, 0.0, 0.5)
    at_least("optimize.max_loss_dev", o.max_loss_dev, 0, "a number")
    if o.study_name is not None:
        check_name(
            "optimize.study_name",
            o.study_name,
            MAX_STUDY_NAME,
            "'\"\\",
            f"a name of 1 to {MAX_STUDY_NAME} characters without quotes, backslashes or control characters, or "
            "null (named after the config, so that the same command resumes it)",
        )
    for key, values in o.space.items():
        if key == "batch.split":
            check_splits(values, cfg)
            continue
        if OmegaConf.select(cfg, key, default="__missing__") == "__missing__":
            raise ConfigError(f"optimize.space.{key}", "unknown config key; accepted: keys like train.steps")
        if not isinstance(values, list | tuple) and not OmegaConf.is_list(values):
            raise ConfigError(f"optimize.space.{key}", f"got {values}; accepted: a list of candidate values")
        if key == "world_size" and not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in values):
            raise ConfigError(
                "optimize.space.world_size",
                f"got {OmegaConf.to_container(values) if OmegaConf.is_list(values) else values}; accepted: a list of "
                "whole numbers >= 1 (ranks of one job, a device each), e.g. [1, 2]",
            )
