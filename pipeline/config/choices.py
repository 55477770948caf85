"""The fixed sets of values of the config's fields, as enums: the one list validation, `--help`, the schema's fields
(`chosen`) and the code that branches on a value all read. Members are strings, so a value compares equal to the
text the user typed (`reduce-overhead`)."""

from __future__ import annotations

from enum import StrEnum

# the speed knobs' choices are in their modules (pipeline.knobs); named here too while the config reads them from here
from pipeline.knobs.adapter_dtype import AdapterDtype  # noqa: F401
from pipeline.knobs.attn_implementation import Attention  # noqa: F401
from pipeline.knobs.base import CPU, chosen  # noqa: F401
from pipeline.knobs.compile_mode import CompileMode  # noqa: F401
from pipeline.knobs.dtype import Dtype  # noqa: F401
from pipeline.knobs.loss import Loss  # noqa: F401
from pipeline.knobs.optimizer import Optimizer  # noqa: F401
from pipeline.knobs.optimizer_step import OptimizerStep  # noqa: F401
from pipeline.knobs.padding import Padding  # noqa: F401


class Scheduler(StrEnum):
    LINEAR = "linear"
    COSINE = "cosine"
    CONSTANT = "constant"
    CONSTANT_WITH_WARMUP = "constant_with_warmup"


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
    TPE = "tpe"
    RANDOM = "random"
    BRUTEFORCE = "bruteforce"


class ConfirmMode(StrEnum):
    AUTO = "auto"
    ALWAYS = "always"
    NEVER = "never"


class LauncherKind(StrEnum):
    FORKSERVER = "forkserver"
    SUBPROCESS = "subprocess"
    TORCHRUN = "torchrun"
