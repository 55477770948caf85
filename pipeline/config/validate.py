"""Cross-field rules, checked once on the composed config before anything is written or loaded.

Every failure is a `ConfigError` naming the field, what was given and the accepted form; the entry points print it as
one line and exit with code 2.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from pipeline import knobs
from pipeline.config.accepted import field_choices
from pipeline.config.choices import CPU, LauncherKind, ModelSource
from pipeline.config.data import check_data
from pipeline.config.devices import cpu_cores, cuda_device_count
from pipeline.config.errors import ConfigError, at_least, at_most, choice, in_range
from pipeline.config.job import JobConfig, Split, parse, parse_split
from pipeline.config.knobs import check_knobs, check_values, on_cuda
from pipeline.config.schema import ARCH_FIELDS
from pipeline.config.study_checks import MAX_EXPERIMENT_NAME, check_name, check_optimize


def check_split(cfg: DictConfig) -> Split:
    # the effective batch and world size first: a split may be derived from them (optimize's base split is
    # 1x${div:...}), and a bad one must be blamed on its source, not on the split it makes
    at_least("batch.effective", cfg.batch.effective, 1)
    at_most("batch.effective", cfg.batch.effective, 2**16)
    at_least("world_size", cfg.world_size, 1)
    split = parse_split(cfg.batch.split)
    mismatch = layout_mismatch(cfg)
    if mismatch:
        raise ConfigError("batch.split", mismatch)
    return split


def layout_mismatch(cfg: DictConfig) -> str | None:
    """Why micro x accumulation x world_size is not the effective batch (with the splits that are), or None when it
    is. A multirun that sweeps world_size leaves such a combination out (`plan.plan_sweep`); anywhere else it is bad
    input."""
    split = parse_split(cfg.batch.split)
    product = split.micro * split.accumulation * cfg.world_size
    if product == cfg.batch.effective:
        return None
    effective = cfg.batch.effective
    divisors = [d for d in range(1, effective + 1) if effective % (d * cfg.world_size) == 0]
    forms = ", ".join(f"{d}x{effective // (d * cfg.world_size)}" for d in divisors)
    if not forms:  # no split at all: what would make one
        sizes = ", ".join(str(w) for w in range(1, effective + 1) if effective % w == 0)
        forms = (
            f"no split at world_size {cfg.world_size}, which does not divide batch.effective {effective}; a "
            f"world_size that does ({sizes}), or batch.effective={product} with this split"
        )
    return (
        f"'{cfg.batch.split}' x world_size {cfg.world_size} gives {product}, not batch.effective {effective}; "
        f"accepted: {forms}"
    )


def check_choices(cfg: DictConfig) -> None:
    """Every field with a fixed set of values (the schema's enums) holds one of them; a speed knob's are its own
    (`check_values`: its aliases too)."""
    knob_keys = knobs.by_key()
    for key, (enum, _) in field_choices().items():
        if key not in knob_keys:
            choice(key, OmegaConf.select(cfg, key), tuple(m.value for m in enum))
    for section in ("model", "train"):
        check_values(section, cfg[section])


def check_world_size(cfg: DictConfig) -> None:
    """Several ranks run under torchrun, one per device: a CUDA device each (as many as are visible), or a CPU
    core each on a machine measured without CUDA (ranks sharing a core would measure the scheduler)."""
    if cfg.world_size > 1 and cfg.launcher.kind != LauncherKind.TORCHRUN:
        raise ConfigError(
            "world_size",
            f"{cfg.world_size} processes need launcher.kind=torchrun; accepted with {cfg.launcher.kind}: 1",
        )
    ranks = cfg.world_size
    if on_cuda(cfg.gpu):
        devices = cuda_device_count()
        need = f"{ranks} ranks need a CUDA device each, and this machine has {devices}"
    else:
        devices = cpu_cores()
        need = f"{ranks} ranks on the CPU need a core each, and this process may use {devices}"
    if ranks > devices:
        raise ConfigError("world_size", f"{need}; accepted here: 1 to {devices}")


MODEL_FORM = "a hub model id such as Qwen/Qwen3-0.6B, or a folder with a saved model (its config.json and weights)"


def check_model(m: DictConfig) -> None:
    if m.source == ModelSource.PRETRAINED:
        if not m.name_or_path:
            raise ConfigError("model.name_or_path", "required with model.source=pretrained; a hub id or a directory")
        path = str(m.name_or_path)
        looks_local = path.startswith(("/", ".", "~")) or os.path.exists(path)
        if looks_local and not ((folder := Path(path).expanduser()) / "config.json").is_file():
            problem = (
                "has no config.json" if folder.is_dir() else "is not a folder" if folder.exists() else "does not exist"
            )
            raise ConfigError("model.name_or_path", f"'{path}' {problem}; accepted: {MODEL_FORM}")
        return
    for name in ARCH_FIELDS:
        at_least(f"model.{name}", m[name], 1)
    if m.num_attention_heads % m.num_key_value_heads:
        raise ConfigError(
            "model.num_key_value_heads",
            f"{m.num_key_value_heads} does not divide num_attention_heads {m.num_attention_heads}",
        )


def check_lora(lora: DictConfig) -> None:
    at_least("lora.r", lora.r, 1)
    at_least("lora.alpha", lora.alpha, 1)
    in_range("lora.dropout", lora.dropout, 0.0, 1.0)
    if not lora.target_modules:
        raise ConfigError("lora.target_modules", "empty; accepted: [all-linear] or module names like [q_proj, v_proj]")


def check_gpu(gpu: DictConfig) -> None:
    if gpu.memory_gib is not None and gpu.memory_gib <= 0:
        raise ConfigError("gpu.memory_gib", f"got {gpu.memory_gib}; accepted: a number of GiB > 0")
    if gpu.peak_tflops is not None and gpu.peak_tflops <= 0:
        raise ConfigError("gpu.peak_tflops", f"got {gpu.peak_tflops}; accepted: a number > 0")


def check_device(gpu: DictConfig) -> None:
    """A card profile emulates that card's memory on a CUDA device: without one it would measure nothing real."""
    if gpu.name not in ("auto", CPU) and cuda_device_count() == 0:
        raise ConfigError(
            "gpu",
            f"gpu={gpu.name} emulates a {gpu.name.upper()}'s memory on a CUDA device, and this machine has none; "
            "accepted here: gpu=auto or gpu=cpu",
        )


MAX_STEPS = 10**8  # a hundred million optimizer steps: far beyond a measurement, far below any overflow


def max_positions(m: DictConfig) -> int | None:
    """The model's longest sequence: from the group, or from a local pretrained model's config.json."""
    if m.source == ModelSource.CONFIG:
        return m.max_position_embeddings
    config = Path(str(m.name_or_path)).expanduser() / "config.json"
    if config.is_file():
        return json.loads(config.read_text(encoding="utf-8")).get("max_position_embeddings")
    return None


def check_train(t: DictConfig, measure: DictConfig, m: DictConfig) -> None:
    at_least("train.steps", t.steps, 1)
    at_most("train.steps", t.steps, MAX_STEPS)
    at_least("train.max_length", t.max_length, 2)
    positions = max_positions(m)
    if positions and t.max_length > positions:
        raise ConfigError(
            "train.max_length",
            f"{t.max_length} exceeds the model's max_position_embeddings {positions}; accepted: 2 to {positions}",
        )
    if t.learning_rate <= 0:
        raise ConfigError("train.learning_rate", f"got {t.learning_rate}; accepted: a number > 0")
    at_least("train.warmup_steps", t.warmup_steps, 0)
    at_least("train.weight_decay", t.weight_decay, 0, "a number")
    at_least("train.max_grad_norm", t.max_grad_norm, 0, "a number")
    at_least("measure.warmup_steps", measure.warmup_steps, 0)
    if measure.warmup_steps >= t.steps:
        raise ConfigError(
            "measure.warmup_steps",
            f"{measure.warmup_steps} leaves no steady step of train.steps={t.steps}; accepted: 0 to {t.steps - 1}, "
            f"or train.steps={measure.warmup_steps + 1} or more",
        )
    if measure.cpu_threads is not None:
        at_least("measure.cpu_threads", measure.cpu_threads, 1)
    if not (0.5 <= measure.confidence < 1.0):
        raise ConfigError("measure.confidence", f"got {measure.confidence}; accepted: a number in [0.5, 1)")


def check_profile(measure: DictConfig, t: DictConfig) -> None:
    """The profiled steps come right after the warm-up and are no steady steps: some must be left after them."""
    if measure.profile:
        at_least("measure.profile_steps", measure.profile_steps, 1)
        needed = measure.warmup_steps + 1 + measure.profile_steps + 3
        if t.steps < needed:
            raise ConfigError(
                "train.steps",
                f"{t.steps} leaves too few steady steps around the profiler's; accepted with "
                f"measure.profile=true: {needed} or more",
            )


def validate(cfg: DictConfig) -> JobConfig:
    """Check every rule; return the config parsed (`config.job`). Raises ConfigError on the first bad field."""
    check_choices(cfg)
    check_model(cfg.model)
    check_lora(cfg.lora)
    check_gpu(cfg.gpu)
    split = check_split(cfg)
    check_train(cfg.train, cfg.measure, cfg.model)
    check_knobs(cfg.train, cfg.model, cfg.gpu, split.accumulation)
    check_device(cfg.gpu)
    check_data(cfg.data, cfg.train.max_length, cfg.batch.effective)
    check_profile(cfg.measure, cfg.train)
    if "optimize" in cfg:
        check_optimize(cfg.optimize, cfg)
    job = parse(cfg)  # its memory cap is checked here
    at_least("repeats", cfg.repeats, 1)
    check_world_size(cfg)
    for key in ("timeout_s", "stall_s"):
        if cfg.launcher[key] is not None and cfg.launcher[key] <= 0:
            raise ConfigError(f"launcher.{key}", f"got {cfg.launcher[key]}; accepted: seconds > 0 or null")
    check_name(
        "tracking.experiment",
        cfg.tracking.experiment,
        MAX_EXPERIMENT_NAME,
        "",
        f"a name of 1 to {MAX_EXPERIMENT_NAME} characters (MLflow's limit) without control characters, "
        "e.g. batch-split",
    )
    if not str(cfg.tracking.uri).strip():
        raise ConfigError(
            "tracking.uri",
            "empty; accepted: a tracking URI like sqlite:///mlruns/mlflow.db or http://host:port",
        )
    return job
