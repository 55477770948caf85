"""train.dtype: the precision the model computes in (auto: bf16 where the card has it, fp16 on other GPUs, fp32 on the
CPU)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pipeline.knobs.base import CPU, Knob, KnobRole, Setting


class Dtype(StrEnum):
    AUTO = "auto"
    FP32 = "fp32"
    FP16 = "fp16"
    BF16 = "bf16"


def resolve(value: str, cuda: bool, bf16: bool | None) -> str | None:
    """The dtype a job of `value` computes in, on a CUDA device or not, on a card with bf16 or not (None: not known
    before the device is opened); None for auto on a CUDA card of unknown bf16 support."""
    if value != Dtype.AUTO:
        return value
    if not cuda:
        return Dtype.FP32.value
    return {True: Dtype.BF16.value, False: Dtype.FP16.value, None: None}[bf16]


ELEMENT_BYTES = {Dtype.FP32: 4, Dtype.FP16: 2, Dtype.BF16: 2}  # the bytes of an element in each compute dtype


class DtypeKnob(Knob):
    key = "train.dtype"
    default = Dtype.AUTO
    help = "auto: bf16 where supported, fp16 on other GPUs, fp32 on the CPU"
    searched = (Dtype.BF16, Dtype.FP16)  # fp32 trains the same at twice the bytes; auto is one of the two
    role = KnobRole.DTYPE
    card = (2, "dtype {}")
    resolve = staticmethod(resolve)

    @staticmethod
    def element_bytes(dtype: str) -> int:
        """The bytes of an element computed in `dtype` (resolved: not auto), what the memory formula counts in."""
        return ELEMENT_BYTES[Dtype(dtype)]

    def is_auto(self, value: Any) -> bool:
        """Whether `value` leaves the dtype to the device (what a job resolves when it opens one)."""
        return value == Dtype.AUTO

    def refuses(self, s: Setting) -> str | None:
        dtype, gpu = s.train.dtype, s.gpu
        if dtype == Dtype.BF16 and gpu.bf16 is False and gpu.name != CPU:
            return f"bf16 is not supported by gpu={gpu.name}; accepted: auto, fp16, fp32"
        if dtype == Dtype.FP16 and not s.cuda:
            return f"fp16 needs a CUDA device; accepted with gpu={gpu.name} here: auto, fp32, bf16"
        return None

    def sft_kwargs(self, train: Any, dtype: str, device: str) -> dict[str, Any]:
        return {"bf16": dtype == Dtype.BF16, "fp16": dtype == Dtype.FP16}


KNOB = DtypeKnob()
