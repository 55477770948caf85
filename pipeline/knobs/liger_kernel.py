"""train.liger_kernel: Liger's fused Triton kernels for the model's layers (RMSNorm, RoPE, SwiGLU) and its loss, set
by the Trainer (`use_liger_kernel`)."""

from __future__ import annotations

from typing import Any

from pipeline.knobs.base import Knob, Memory, Setting, installed

# What the layers keep with Liger's kernels, as a share of the formula's activations (its RMSNorm and SwiGLU keep
# less for the backward than eager's). Measured on one H200 (BENCHMARKS.md).
LIGER_ACTIVATIONS = 0.76


class LigerKernelKnob(Knob):
    key = "train.liger_kernel"
    default = False
    help = "Liger's fused kernels (needs the liger-kernel package and a GPU)"
    short = "liger"
    searched = (False, True)

    def memory(self, value: bool) -> Memory:
        return Memory(activations=LIGER_ACTIVATIONS) if value else Memory()

    def refuses(self, s: Setting) -> str | None:
        if not s.train.liger_kernel:
            return None
        if not installed("liger_kernel"):
            return "true needs the liger-kernel package (pip install liger-kernel); accepted: false"
        if not s.cuda:
            return f"Liger kernels need a CUDA device; accepted with gpu={s.gpu.name} here: false"
        return None

    def sft_kwargs(self, train: Any, dtype: str, device: str) -> dict[str, Any]:
        return {"use_liger_kernel": train.liger_kernel}

    def needs(self, train: Any) -> tuple[str, ...]:
        return ("liger-kernel",) if train.liger_kernel else ()


KNOB = LigerKernelKnob()
