"""train.liger_kernel: Liger's fused Triton kernels for the model's layers (RMSNorm, RoPE, SwiGLU) and its loss, set
by the Trainer (`use_liger_kernel`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.knobs.base import Compile, Knob, Memory, Setting, installed

# What eager layers keep with Liger's kernels, as a share of the formula's activations (its RMSNorm and SwiGLU keep
# less for the backward than eager's): 0.82 MB a token less at 4x1 on the Qwen3-1.7B shape, 512 tokens, of the
# formula's 2.98 with PEFT's adapters (9.11 against 10.68 GiB: bench/results/fastest-h200, 2026-12-03) and 2.42 with
# the adapters in bf16 (8.04 against 9.60: fastest-h200-fixed/optuna.db, seed 2). Compiled layers replace those kernels
# with Inductor's and keep what they keep without Liger: 8.43 against 8.27 GiB with regional compilation and CUDA
# graphs (fastest-h200-fixed, seeds 1 and 3). The loss is `train.loss`'s either way (`loss.LOGIT_BYTES`).
LIGER_ACTIVATIONS = 0.70


class LigerKernelKnob(Knob):
    key = "train.liger_kernel"
    default = False
    help = "Liger's fused kernels (needs the liger-kernel package and a GPU)"
    short = "liger"
    searched = (False, True)
    term_text = ("0.70 of the layers' activations", "eager layers only (compiled layers keep the same with it)")

    def memory_in(self, value: bool, setting: Mapping[str, Any]) -> Memory:
        eager = Compile.of(str(setting.get("train.torch_compile", "off"))) is Compile.OFF
        return Memory(activations=LIGER_ACTIVATIONS) if value and eager else Memory()

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
