"""The fixed sets of values of the config's fields that are no speed knob, as enums (a knob's are in its module of
`pipeline.knobs`): the one list validation, `--help`, the schema's fields (`chosen`) and the code that branches on a
value all read. Members are strings, so a value compares equal to the text the user typed."""

from __future__ import annotations

from enum import StrEnum

from pipeline.knobs.base import CPU, chosen  # noqa: F401 - the config's modules read them from here


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
    MODEL = "model"  # screening, then a model of what each knob gains (`search._sampler`)
    TPE = "tpe"
    RANDOM = "random"
    BRUTEFORCE = "bruteforce"
    GP = "gp"  # Optuna's Gaussian-process sampler


class ConfirmMode(StrEnum):
    AUTO = "auto"
    ALWAYS = "always"
    NEVER = "never"


class FitOver(StrEnum):
    """The run whose every step a study's answer must fit: its micro-batch with the most tokens is measured first."""

    STEPS = "steps"  # train.steps optimizer steps, as the study's jobs read the data
    EPOCH = "epoch"  # one pass over every record of the data, as a full run reads it


class LauncherKind(StrEnum):
    FORKSERVER = "forkserver"
    SUBPROCESS = "subprocess"
    TORCHRUN = "torchrun"
