"""Typed schemas of every config group, registered in Hydra's ConfigStore, with the choices of every field that
has a fixed set of values.

Each YAML option in conf/<group>/ starts its defaults list with `<group>_schema`, so OmegaConf checks its keys and
types against the dataclass here. A field with a fixed set of values keeps them on the field, as an enum with its
help (`chosen(...)`, in the manner of TRL's `SFTConfig` metadata; the enums are in `config.choices`, and a speed
knob's field, with its enum, comes from its module in `pipeline.knobs`): validation
(`config.accepted`), `--help` and the test of the YAML comments read them from there. The fields stay strings for
OmegaConf, so a value is written as the user types it (`reduce-overhead`). Rules that
span fields (split against effective batch, cap format, ranges) live in `pipeline.config.validate`, checked once
before anything runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

from pipeline import knobs
from pipeline.config.choices import (
    ConfirmMode,
    DataKind,
    Distribution,
    FitOver,
    LauncherKind,
    LoraBias,
    ModelSource,
    Sampler,
    Scheduler,
    chosen,
)


def knob_fields(section: str):
    """A class decorator, under `@dataclass`: the section's speed knobs (`pipeline.knobs`) as fields after the
    class's own, each with its default, help and choices."""

    def add(cls: type) -> type:
        for knob in knobs.in_section(section):
            cls.__annotations__[knob.name] = "bool" if knob.choices is None else "str"
            setattr(cls, knob.name, knob.field())
        return cls

    return add


@dataclass
@knob_fields("model")
class ModelConfig:
    """An architecture and where its weights come from.

    `source: config` builds the exact architecture with random weights in the target dtype (speed and memory do not
    depend on weight values); `source: pretrained` loads `name_or_path` (hub id or local directory).
    """

    name: str = MISSING
    source: str = chosen(
        ModelSource.CONFIG, "config: the architecture with random weights; pretrained: from_pretrained"
    )
    name_or_path: str | None = None
    model_type: str = "qwen3"
    hidden_size: int | None = None
    intermediate_size: int | None = None
    num_hidden_layers: int | None = None
    num_attention_heads: int | None = None
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    vocab_size: int | None = None
    max_position_embeddings: int | None = None
    rope_theta: float = 1_000_000.0
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = True


ARCH_FIELDS = (  # a model built from its config needs each (>= 1)
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
)
# what a model built from its config passes to AutoConfig
ARCH_KEYS = ("model_type", *ARCH_FIELDS, "max_position_embeddings", "rope_theta", "rms_norm_eps", "tie_word_embeddings")


@dataclass
class LoraConfig:
    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: list[str] = field(default_factory=lambda: ["all-linear"])
    bias: str = chosen(LoraBias.NONE, "which biases train beside the adapters")


@dataclass
class GpuConfig:
    """A card profile. `memory_gib` is what the card reports as total memory; a profile smaller than the real device
    becomes the memory cap (capacity is emulated, speed never is)."""

    name: str = MISSING
    memory_gib: float | None = None
    bf16: bool | None = None
    peak_tflops: float | None = None


@dataclass
class BatchConfig:
    effective: int = 4
    split: str = "4x1"


@dataclass
class DataConfig:
    """`kind` picks the source: synthetic token ids, a local jsonl file, or a hub dataset (id or local folder)."""

    kind: str = field(
        default=MISSING, metadata={"choices": DataKind, "help": "where the samples come from", "aliases": ()}
    )
    num_samples: int | None = None
    length: int = 128
    min_length: int | None = None
    distribution: str = chosen(Distribution.FIXED, "synthetic lengths: all `length`, or uniform from min_length")
    path: str | None = None
    name: str | None = None
    subset: str | None = None
    split: str = "train"


@dataclass
@knob_fields("train")
class TrainConfig:
    """The training run; its speed knobs (dtype, checkpointing, optimizer, padding, compilation, ...) are added as
    fields from `pipeline.knobs`."""

    steps: int = 30
    max_length: int = 128
    learning_rate: float = 2e-4
    lr_scheduler: str = chosen(Scheduler.LINEAR, "the Trainer's `lr_scheduler_type`")
    warmup_steps: int = 5
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    seed: int = 42
    progress_bar: bool = False


@dataclass
class MeasureConfig:
    """How steps are timed: the first `warmup_steps` optimizer steps are left out of every statistic."""

    warmup_steps: int = 5  # optimizer steps left out of every statistic (and any step that compiled)
    confidence: float = 0.95  # of every interval and paired comparison
    max_drift: float = 0.10  # flag a job whose last third of steady steps is this much off its first third
    max_cv: float = 0.25  # flag a job whose steady steps vary more than this (coefficient of variation)
    busy_threshold: float = 0.5  # flag a job whose GPU is busy less than this share of its steady steps
    profile: bool = False  # a torch.profiler trace of a few steady steps, with a summary, on the job's MLflow run
    profile_steps: int = 3  # steps the profiler records after the warm-up (they leave the statistics)
    cpu_threads: int | None = 1  # torch's threads in a job on the CPU (null: torch's own, one a core)
    pin_cpu: bool = False  # pin the training thread to the CPU fastest at host work when the warm-up ends


@dataclass
class OptimizeConfig:
    """The Optuna study of `python -m pipeline.optimize`: splits are always searched (the divisors of
    effective / world_size, or those `space` names under `batch.split`); `space` adds knobs as config keys with their
    candidate values (empty: fixed), the world size among them (`world_size: [1, 2]`: the splits of each world size, every one checked against the devices)."""

    trials: int = 12
    sampler: str = chosen(Sampler.MODEL, "model: each knob screened, then what each gains combined; or Optuna's")
    seed: int = 0
    storage: str = MISSING
    study_name: str | None = None
    space: dict[str, list[Any]] = field(default_factory=dict)
    every_knob: bool = False  # the space holds every speed knob's values too (the knobs' `searched`); `space` wins
    probe_steps: int = 4
    prune_steps: int = 3
    prune_factor: float = 1.3
    skip_margin: float = 0.1
    baseline: bool = True  # measure the base config in full, never pruned: the answer is a ratio against it
    max_loss_dev: float = 0.05  # a config whose losses deviate more from the baseline's is no answer
    fit_over: str = chosen(  # where records vary in length: the micro-batch of that run with the most tokens decides
        FitOver.STEPS, "the run whose every step must fit: train.steps (steps), or one pass over every record (epoch)"
    )
    confirm: str = chosen(  # auto: the best, the baseline and the close challengers in paired rounds
        ConfirmMode.AUTO, "auto: the best, the baseline, the close challengers; always: every eligible one; never"
    )
    confirm_k: int = 3  # finalists at most, the best included, the baseline not counted
    confirm_within: float = 0.3  # challengers: search median within this of the best's (drift reaches 15-30%)
    confirm_share: float = 0.25  # of the study's device time (the round's own included) the round may spend
    confirm_budget_s: float | None = None  # device seconds at most, besides the share (null: the share alone)
    confirm_floor_s: float = 30.0  # device seconds the round may spend whatever the share (a small study's)
    confirm_steps: int = 30  # steady steps of a confirmation run at most (the plan picks the length from the noise)
    confirm_rounds: int = 20  # rounds at most (each runs every open finalist once, in a rotated order)
    tie_tolerance: float = 0.05  # a comparison is settled as equal once its interval lies within this


@dataclass
class TrackingConfig:
    uri: str = MISSING
    experiment: str = "batch-split"
    artifact_root: str = MISSING


@dataclass
class LauncherConfig:
    """How each job gets its own process. `forkserver` forks from a server that has imported the training stack
    once (never touching CUDA); `subprocess` starts a fresh interpreter per job. What a job prints goes to its log,
    `job.log` on its run; `verbose` shows it on the console too."""

    kind: str = chosen(LauncherKind.FORKSERVER, "forkserver: forked from a server that imported the stack once")
    timeout_s: float | None = None  # a job still running after this is killed (null: never)
    stall_s: float | None = None  # a steady step longer is a stall, left out and noted (null: 10x the median, >= 30 s)
    verbose: bool = False  # every line a job prints, on the console as it comes (-v); its job.log keeps them anyway


@dataclass
class PathsConfig:
    root: str = "mlruns"


@dataclass
class Config:
    model: ModelConfig = MISSING
    lora: LoraConfig = MISSING
    gpu: GpuConfig = MISSING
    batch: BatchConfig = MISSING
    data: DataConfig = MISSING
    train: TrainConfig = MISSING
    optimize: OptimizeConfig = MISSING
    measure: MeasureConfig = field(default_factory=MeasureConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    launcher: LauncherConfig = field(default_factory=LauncherConfig)
    paths: PathsConfig = field(default_factory=PathsConfig)
    world_size: int = 1
    repeats: int = 1
    repeat: int = 0
    mem_cap: str | None = None
    wide: bool = False
    sweep_id: str | None = None


INTERNAL_KEYS = ("repeat", "sweep_id")  # set by the tool itself (repeats, the sweep callback), never by a user

GROUPS: dict[str, type] = {
    "model": ModelConfig,
    "lora": LoraConfig,
    "gpu": GpuConfig,
    "batch": BatchConfig,
    "data": DataConfig,
    "train": TrainConfig,
    "optimize": OptimizeConfig,
}

# every section of the config with a schema, the groups and those config.yaml sets itself: a key of one must be a field
SECTIONS: dict[str, type] = {
    **GROUPS,
    "measure": MeasureConfig,
    "tracking": TrackingConfig,
    "launcher": LauncherConfig,
    "paths": PathsConfig,
}


def typed(cfg: Any) -> Config:
    """The config (a composed DictConfig, or the plain data a job's spec file holds) as the schema's dataclasses,
    every interpolation resolved: what a job receives, and what its builders read section by section."""
    register_resolvers()
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(Config), cfg))


def register_resolvers() -> None:
    """The `div` resolver the configs interpolate with (idempotent)."""
    if not OmegaConf.has_resolver("div"):
        OmegaConf.register_new_resolver("div", lambda a, b: int(a) // max(1, int(b)))


def register_configs() -> None:
    """Store the primary schema and one `<group>_schema` node per group (idempotent), and the resolvers."""
    register_resolvers()
    cs = ConfigStore.instance()
    cs.store(name="config_schema", node=Config)
    for group, schema in GROUPS.items():
        cs.store(group=group, name=f"{group}_schema", node=schema)
