"""train.adapter_dtype: the LoRA weights in fp32 (PEFT's default, which casts every adapter's input and output at
every step) or in the compute dtype (`compute`: the job builds the PeftModel itself, without the casts)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pipeline.knobs.base import Knob, Setting
from pipeline.knobs.dtype import Dtype, resolve


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
