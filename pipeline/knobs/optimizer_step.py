"""train.optimizer_step: the optimizer step eager, compiled (`torch.compile` of `optimizer.step`: the update of every
adapter weight fused into a few kernels), or recorded as a CUDA graph (`graph`). The learning rate becomes a CPU
tensor, so the scheduler's new value is no recompilation; a step at learning rate 0 runs at 1e-30, since capturable
AdamW divides by it and turns weights with zero gradients into NaN (pytorch/pytorch#126514)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pipeline.knobs.base import Compile, Knob, Setting
from pipeline.knobs.compile_mode import CUDA_GRAPH_MODES
from pipeline.knobs.optimizer import Optimizer


class OptimizerStep(StrEnum):
    EAGER = "eager"
    COMPILED = "compiled"
    GRAPH = "graph"  # a CUDA graph


COMPILED_OPTIMIZERS = (Optimizer.ADAMW_TORCH, Optimizer.SGD)  # torch.optim's own steps, which Dynamo traces


def compile_optimizer_step(trainer, mode: str) -> None:
    """Compile the optimizer step of a built trainer (`mode`: eager, compiled, or graph: a CUDA graph). The optimizer
    is made here, before training (the Trainer keeps one it already has)."""
    import torch

    if mode == OptimizerStep.EAGER:
        return
    optimizer = trainer.create_optimizer()
    for group in optimizer.param_groups:
        group["lr"] = torch.tensor(float(group["lr"]))  # a new value each step is no recompilation
        if any(p.is_cuda for p in group["params"]):
            group["capturable"] = True  # what Dynamo sets on CUDA; also for a step it would leave eager
    step = torch.compile(optimizer.step, mode="reduce-overhead" if mode == OptimizerStep.GRAPH else None)

    def compiled_step(*args, **kwargs):
        idle = [group["lr"] for group in optimizer.param_groups if group["lr"] == 0]
        for lr in idle:
            lr.fill_(1e-30)  # capturable AdamW divides by the learning rate (pytorch/pytorch#126514)
        try:
            return step(*args, **kwargs)
        finally:
            for lr in idle:
                lr.fill_(0.0)

    optimizer.step = compiled_step


class OptimizerStepKnob(Knob):
    key = "train.optimizer_step"
    default = OptimizerStep.EAGER
    help = "the optimizer step: eager, compiled, or a CUDA graph"
    short = "optim_step"
    searched = tuple(OptimizerStep)

    def refuses(self, s: Setting) -> str | None:
        step, optimizer = s.train.optimizer_step, s.train.optimizer
        if step == OptimizerStep.EAGER:
            return None
        if optimizer not in COMPILED_OPTIMIZERS:
            fused = " (the fused step is one kernel already)" if optimizer == Optimizer.ADAMW_TORCH_FUSED else ""
            return (
                f"{step} compiles torch.optim's own step, not {optimizer}'s{fused}; accepted with "
                f"train.optimizer={optimizer}: eager (or train.optimizer={' or '.join(COMPILED_OPTIMIZERS)})"
            )
        if step == OptimizerStep.GRAPH and not s.cuda:
            return "graph records a CUDA graph; accepted on the CPU: eager, compiled"
        t = s.train
        if (
            step == OptimizerStep.GRAPH
            and Compile.of(t.torch_compile) is not Compile.OFF
            and t.compile_mode in CUDA_GRAPH_MODES
        ):
            # the layers' graph trees and the step's graph share Inductor's pool: a replay of one overwrites the other's
            # outputs ("accessing tensor output of CUDAGraphs that has been overwritten by a subsequent run")
            return (
                f"graph beside CUDA-graph layers (train.compile_mode={t.compile_mode}) is overwritten by their next "
                "replay; accepted with it: eager, compiled (or train.compile_mode=default)"
            )
        return None

    def compiles(self, train: Any) -> bool:
        return train.optimizer_step != OptimizerStep.EAGER

    def trainer(self, trainer: Any, train: Any) -> str | None:
        compile_optimizer_step(trainer, train.optimizer_step)
        return None if train.optimizer_step == OptimizerStep.EAGER else f"optimizer step {train.optimizer_step}"

    def helpers(self, train: Any) -> list[str]:
        return (
            []
            if train.optimizer_step == OptimizerStep.EAGER
            else [self.source("OptimizerStep", "compile_optimizer_step")]
        )

    def trainer_lines(self, train: Any) -> list[str]:
        if train.optimizer_step == OptimizerStep.EAGER:
            return []
        return [f"    compile_optimizer_step(trainer, {train.optimizer_step!r})"]


KNOB = OptimizerStepKnob()
