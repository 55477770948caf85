"""train.optimizer: the Trainer's optimizer (`optim`); the fused AdamW updates every weight in one kernel."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pipeline.knobs.base import Knob


class Optimizer(StrEnum):
    ADAMW_TORCH = "adamw_torch"
    ADAMW_TORCH_FUSED = "adamw_torch_fused"
    ADAFACTOR = "adafactor"
    SGD = "sgd"


class OptimizerKnob(Knob):
    key = "train.optimizer"
    default = Optimizer.ADAMW_TORCH
    help = "the Trainer's `optim`"
    short = "optim"
    searched = (Optimizer.ADAMW_TORCH, Optimizer.ADAMW_TORCH_FUSED)  # the others train something else

    def sft_kwargs(self, train: Any, dtype: str, device: str) -> dict[str, Any]:
        return {"optim": train.optimizer}


KNOB = OptimizerKnob()
