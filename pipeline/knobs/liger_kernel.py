"""train.liger_kernel: Liger's fused Triton kernels for the model's layers (RMSNorm, RoPE, SwiGLU) and its loss, set
by the Trainer (`use_liger_kernel`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.knobs.base import Compile, Knob, Memory, Setting, installed

# What eager layers do not keep with Liger's kernels, a token and layer: its RMSNorm keeps no normalized output (two
# norms a layer: 2h) and its SwiGLU neither the gate's activation nor the product (2i), 0.9 of that as measured. On the
# Qwen3-1.7B shape, 512 tokens, 4x1, eager layers kept 0.82 MB a token less with them (9.11 against 10.68 GiB with
# PEFT's adapters: bench/results/fastest-h200, 2026-12-03; 8.04 against 9.60 with the adapters in bf16:
# fastest-h200-fixed/optuna.db, seed 2), 0.30 of eager's b (6h + 4q + 4k + 4i), which is 0.9 (2h + 2i) there. A fixed
# share (0.70) of eager's count read the Qwen3-0.6B's chats 7.5-7.6% under the measured peak in three studies on an
# H100 (accept-h100-1206b, c, d), whose h and i are a smaller part of eager's count. Compiled layers replace those
# kernels with Inductor's and keep what they keep without Liger: 8.43 against 8.27 GiB with regional compilation and
# CUDA graphs (fastest-h200-fixed, seeds 1 and 3). The loss is `train.loss`'s either way (`loss.LOGIT_BYTES`).
LIGER_UNKEPT = (1.8, 1.8)  # (of hidden size, of intermediate size)


class LigerKernelKnob(Knob):
    key = "train.liger_kernel"
    default = False
    help = "Liger's fused kernels (needs the liger-kernel package and a GPU)"
    short = "liger"
    searched = (False, True)
    term_text = (
        "eager layers keep 1.8 h + 1.8 i fewer elements a token (the norms' outputs, SwiGLU's intermediates)",
        "eager layers only (compiled layers keep the same with it)",
    )

    def memory_in(self, value: bool, setting: Mapping[str, Any]) -> Memory:
        eager = Compile.of(str(setting.get("train.torch_compile", "off"))) is Compile.OFF
        return Memory(unkept=LIGER_UNKEPT) if value and eager else Memory()

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
