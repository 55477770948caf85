"""train.loss: what computes the LM head and loss. `trl` is TRL's fused head, which also logs entropy and token
accuracy and reads the device back several times per micro-batch (each read idles a launch-bound GPU); `model` is
the model's own loss, which reads nothing back; `compiled` is that with its cross-entropy compiled; `liger` is
Liger's fused linear cross-entropy (the logits never whole). The three also drop the Trainer's NaN filter of the
logged loss (two more reads per micro-batch), and log neither entropy nor token accuracy."""

from __future__ import annotations

import inspect
import types
from enum import StrEnum
from typing import Any

from pipeline.knobs.base import Compile, Knob, Memory, Setting, installed


class Loss(StrEnum):
    TRL = "trl"
    MODEL = "model"
    COMPILED = "compiled"
    LIGER = "liger"


def model_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
    """`SFTTrainer.compute_loss` without TRL's LM head and metrics: the model's own loss over the labels, normalised by
    the step's label count as TRL's is (so the losses agree), scaled for DDP's gradient average as TRL's is."""
    inputs = {**inputs, "use_cache": False}
    if num_items_in_batch is not None:
        inputs["num_items_in_batch"] = num_items_in_batch
    outputs = model(**inputs)
    loss = outputs.loss
    if self.args.average_tokens_across_devices and num_items_in_batch is not None:
        loss = loss * self.accelerator.num_processes
    return (loss, outputs) if return_outputs else loss


def capture_loss(trainer, mode: str) -> None:
    """Set the LM head and loss `mode` (one of trl, model, compiled, liger) on a built SFTTrainer."""
    import torch

    if mode == Loss.TRL:
        return
    trainer.compute_loss = types.MethodType(model_loss, trainer)
    base = trainer.model.get_base_model() if hasattr(trainer.model, "get_base_model") else trainer.model
    if mode == Loss.COMPILED:
        base.loss_function = torch.compile(base.loss_function)
    elif mode == Loss.LIGER:
        import liger_kernel.transformers

        # the fused linear cross-entropy alone, on this model only (the layer kernels are train.liger_kernel's); it
        # replaces the forward TRL patched in for its own fused head
        model_type = base.config.model_type
        apply = getattr(liger_kernel.transformers, f"apply_liger_kernel_to_{model_type}", None)
        if apply is None:
            raise ValueError(f"Liger has no kernels for model type {model_type}; use train.loss=model or compiled")
        kernels = inspect.signature(apply).parameters
        off = {k: False for k in ("rope", "cross_entropy", "rms_norm", "layer_norm", "swiglu", "geglu") if k in kernels}
        apply(model=base, fused_linear_cross_entropy=True, **off)


# What a loss keeps of the logits, in bytes per token and vocabulary entry, beyond TRL's fused head (which computes
# log-probabilities in tiles and keeps none whole), whatever else the job runs: `train.liger_kernel` applies Liger's
# layer kernels only (TRL turns its fused linear cross-entropy off), so beside it `model` and `compiled` build the full
# logits as they do without it. `compiled` keeps them upcast to fp32 for its backward: 9.4, measured on the seed's grid
# (bench/results/grid-h200-seed.json: 9.0-9.5 at 2x2 and 4x1, eager and compiled layers, with CUDA graphs or not) and
# 9.2-9.5 on the chats grid's one-shape layout (record-h200/grid-chats-optuna.db, max_length). `model` keeps about
# twice that (the fp32 copy, its log-softmax and their gradients): 17.4, measured in fastest-h200-fixed/optuna.db
# (seed 1: 13.33 GiB against 8.27 for `trl` at 4x1, 2,048 tokens, compiled layers with CUDA graphs; seed 3: 8.0 more
# than `compiled` beside the optimizer step's graph), where an eager 4x1 ran out of memory asking for one more fp32
# copy of the logits (1.16 GiB) at 13.4 GiB.
LOGIT_BYTES = {Loss.TRL: 0.0, Loss.MODEL: 17.4, Loss.COMPILED: 9.4, Loss.LIGER: 0.0}


class LossKnob(Knob):
    key = "train.loss"
    default = Loss.TRL
    help = "the LM head and loss: trl, the model's own, compiled, or Liger's fused kernel"
    searched = tuple(Loss)
    term_text = (
        "the logits it keeps: `compiled` 9.4 bytes a token and vocabulary entry (fp32), `model` 17.4 (and its "
        "log-softmax and gradients), `trl` and `liger` none",
        "Liger's kernels too: TRL applies their layer kernels only",
    )

    def memory(self, value: str) -> Memory:
        return Memory(logit_bytes=LOGIT_BYTES[Loss(value)])

    def refuses(self, s: Setting) -> str | None:
        loss = s.train.loss
        if loss == Loss.LIGER and not installed("liger_kernel"):
            return "liger needs the liger-kernel package (pip install liger-kernel); accepted: trl, model, compiled"
        if loss == Loss.LIGER and not s.cuda:
            return "liger runs Triton kernels on a CUDA device; accepted on the CPU: trl, model, compiled"
        if loss == Loss.COMPILED and Compile.of(s.train.torch_compile) is Compile.WHOLE:
            return (
                "compiled is part of the model that train.torch_compile=whole compiles already; accepted with whole: "
                "trl, model, liger"
            )
        return None

    def sft_kwargs(self, train: Any, dtype: str, device: str) -> dict[str, Any]:
        return {"logging_nan_inf_filter": train.loss == Loss.TRL}  # two reads of the device per micro-batch

    def compiles(self, train: Any) -> bool:
        return train.loss == Loss.COMPILED

    def trainer(self, trainer: Any, train: Any) -> str | None:
        capture_loss(trainer, train.loss)
        return "loss compiled" if train.loss == Loss.COMPILED else None

    def helpers(self, train: Any) -> list[str]:
        return [] if train.loss == Loss.TRL else [self.source("Loss", "model_loss", "capture_loss")]

    def trainer_lines(self, train: Any) -> list[str]:
        return [] if train.loss == Loss.TRL else [f"    capture_loss(trainer, {train.loss!r})  # the LM head and loss"]

    def needs(self, train: Any) -> tuple[str, ...]:
        return ("liger-kernel",) if train.loss == Loss.LIGER else ()


KNOB = LossKnob()
