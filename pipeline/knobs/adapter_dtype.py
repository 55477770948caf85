"""train.adapter_dtype: the LoRA weights in fp32 (PEFT's default, which casts every adapter's input and output at
every step) or in the compute dtype (`compute`: the job builds the PeftModel itself, without the casts)."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from pipeline.knobs.base import Compile, Knob, Memory, Setting
from pipeline.knobs.dtype import Dtype, resolve

# What the layers keep with PEFT's fp32 adapters against adapters in the compute dtype (the formula's count, which
# `search._formula` gives), as a share of it: PEFT casts each adapter's input, and the copies stay for the backward.
# Counted by `bench.saved_bytes` on six shapes: eager layers 1.13-1.17 (1.16-1.17 on the Qwen3 0.6B, 1.7B and 4B
# shapes; exactly 2 (3h + q) bytes a token more), compiled layers 1.06-1.09 (2q more). On the device: the 1.7B shape's
# eager layers grew 3.44 MB a token with fp32 adapters and 2.88 in the compute dtype, 1.20 apart (fastest-h200-fixed).
FP32_EAGER, FP32_COMPILED = 1.16, 1.07


class AdapterDtype(StrEnum):
    FP32 = "fp32"
    COMPUTE = "compute"


def in_compute_dtype(train: Any, dtype: str) -> bool:
    """Whether the adapters live in the compute dtype `dtype` (in fp32 both ways are one)."""
    return train.adapter_dtype == AdapterDtype.COMPUTE and dtype != Dtype.FP32


class AdapterDtypeKnob(Knob):
    key = "train.adapter_dtype"
    default = AdapterDtype.FP32
    help = "compute: LoRA weights in the compute dtype, no casts"
    short = "adapters"
    searched = tuple(AdapterDtype)
    term_text = (
        "`fp32` (PEFT's casts kept): 1.16 times the layers' activations, compiled layers 1.07; `compute` none",
        "bf16/fp16 (in fp32 both are one)",
    )

    def memory_in(self, value: str, setting: Mapping[str, Any]) -> Memory:
        if value == AdapterDtype.COMPUTE or setting.get("train.dtype") == Dtype.FP32:  # fp32: both one
            return Memory()
        eager = Compile.of(str(setting.get("train.torch_compile", "off"))) is Compile.OFF
        return Memory(activations=FP32_EAGER if eager else FP32_COMPILED)

    def same_job_as(self, value: Any, s: Setting) -> tuple[Any, str] | None:
        if value == AdapterDtype.COMPUTE and not in_compute_dtype(s.train, resolve(s.train.dtype, s.cuda, s.gpu.bf16)):
            return AdapterDtype.FP32, "in fp32 the adapters are fp32 either way"
        return None

    def refuses(self, s: Setting) -> str | None:
        if s.train.adapter_dtype == AdapterDtype.COMPUTE and resolve(s.train.dtype, s.cuda, s.gpu.bf16) == Dtype.FP16:
            return (
                "compute with fp16 cannot train: the gradient scaler of fp16 training refuses fp16 weights, and "
                "AdamW's epsilon is 0 in fp16; accepted with fp16: fp32 (or train.dtype=bf16)"
            )
        return None

    def adapters(self, model: Any, lora: Any, train: Any, dtype: str) -> tuple[Any, Any]:
        if not in_compute_dtype(train, dtype):
            return model, lora
        from peft import get_peft_model

        return get_peft_model(model, lora, autocast_adapter_dtype=False), None

    def adapter_lines(self, train: Any, dtype: str) -> list[str]:
        if not in_compute_dtype(train, dtype):
            return []
        return [
            "    # adapters in the compute dtype (PEFT keeps them in fp32 otherwise, and casts at every step)",
            "    model, lora = get_peft_model(model, lora, autocast_adapter_dtype=False), None",
        ]


KNOB = AdapterDtypeKnob()
