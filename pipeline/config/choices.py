"""The fixed sets of values of the config's fields, as enums: the one list validation, `--help`, the schema's fields
(`chosen`) and the code that branches on a value all read. Members are strings, so a value compares equal to the
text the user typed (`reduce-overhead`)."""

from __future__ import annotations

from dataclasses import field
from enum import StrEnum
from typing import Any

CPU = "cpu"  # the gpu profile (and device) of a job measured on the CPU


class Dtype(StrEnum):
    AUTO = "auto"
    FP32 = "fp32"
    FP16 = "fp16"
    BF16 = "bf16"


class Padding(StrEnum):
    LONGEST = "longest"
    MAX_LENGTH = "max_length"
    PADDING_FREE = "padding_free"
    PACKING = "packing"


class Optimizer(StrEnum):
    ADAMW_TORCH = "adamw_torch"
    ADAMW_TORCH_FUSED = "adamw_torch_fused"
    ADAFACTOR = "adafactor"
    SGD = "sgd"


class Scheduler(StrEnum):
    LINEAR = "linear"
    COSINE = "cosine"
    CONSTANT = "constant"
    CONSTANT_WITH_WARMUP = "constant_with_warmup"


class CompileMode(StrEnum):
    DEFAULT = "default"
    REDUCE_OVERHEAD = "reduce-overhead"
    MAX_AUTOTUNE_NO_CUDAGRAPHS = "max-autotune-no-cudagraphs"
    MAX_AUTOTUNE = "max-autotune"


class Loss(StrEnum):
    """What computes the LM head and loss (`pipeline.builders.step`)."""

    TRL = "trl"
    MODEL = "model"
    COMPILED = "compiled"
    LIGER = "liger"


class OptimizerStep(StrEnum):
    EAGER = "eager"
    COMPILED = "compiled"
    GRAPH = "graph"  # a CUDA graph


class AdapterDtype(StrEnum):
    FP32 = "fp32"
    COMPUTE = "compute"


class Attention(StrEnum):
    EAGER = "eager"
    SDPA = "sdpa"
    FLEX_ATTENTION = "flex_attention"
    FLASH_ATTENTION_2 = "flash_attention_2"
    FLASH_ATTENTION_3 = "flash_attention_3"


class ModelSource(StrEnum):
    CONFIG = "config"
    PRETRAINED = "pretrained"


class LoraBias(StrEnum):
    NONE = "none"
    ALL = "all"
    LORA_ONLY = "lora_only"


class DataKind(StrEnum):
    SYNTHETIC = "synthetic"
    JSONL = "jsonl"
    HUB = "hub"


class Distribution(StrEnum):
    FIXED = "fixed"
    UNIFORM = "uniform"


class Sampler(StrEnum):
    MODEL = "model"  # screening, then a model of what each knob gains (`search.sampler`)
    TPE = "tpe"
    RANDOM = "random"
    BRUTEFORCE = "bruteforce"
    GP = "gp"  # Optuna's Gaussian-process sampler


class ConfirmMode(StrEnum):
    AUTO = "auto"
    ALWAYS = "always"
    NEVER = "never"


class LauncherKind(StrEnum):
    FORKSERVER = "forkserver"
    SUBPROCESS = "subprocess"
    TORCHRUN = "torchrun"


def chosen(default: StrEnum, help: str, aliases: tuple[str, ...] = ()) -> Any:
    """A field whose value is one of `type(default)`'s members (or one of `aliases`, which its reader resolves)."""
    return field(default=default.value, metadata={"choices": type(default), "help": help, "aliases": aliases})
