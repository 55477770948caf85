"""model.attn_implementation: the attention kernels the model is built with (transformers' `attn_implementation`);
the flash-attention ones need their package and a CUDA device."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pipeline.knobs.base import Knob, Memory, Setting, installed


class Attention(StrEnum):
    EAGER = "eager"
    SDPA = "sdpa"
    FLEX_ATTENTION = "flex_attention"
    FLASH_ATTENTION_2 = "flash_attention_2"
    FLASH_ATTENTION_3 = "flash_attention_3"


PACKAGES = {  # the implementations that need a package beyond torch and transformers
    Attention.FLASH_ATTENTION_2: "flash_attn",
    Attention.FLASH_ATTENTION_3: "flash_attn_interface",
}


class AttentionKnob(Knob):
    key = "model.attn_implementation"
    default = Attention.SDPA
    help = "the attention kernels (flash_attention_*: their package, a GPU)"
    short = "attn"
    searched = tuple(a for a in Attention if a != Attention.EAGER)  # eager attention is sdpa unfused

    def dropped_in(self, lengths_vary: bool, cuda: bool) -> dict[Any, str]:
        """sdpa alone on the CPU: its fused kernel is the CPU's, flex attention compiles a slower one there, and the
        flash-attention kernels need a CUDA device."""
        if cuda:
            return {}
        why = {Attention.FLEX_ATTENTION: "compiles a slower kernel than sdpa's fused one on the CPU"}
        return {a: why.get(a, "needs a CUDA device") for a in self.searched if a != Attention.SDPA}

    def memory(self, value: Any) -> Memory:
        """Eager attention keeps its probabilities, a score per head and pair of positions of a row; the fused
        kernels keep none."""
        return Memory(scores=1.0) if value == Attention.EAGER else Memory()

    def refuses(self, s: Setting) -> str | None:
        attention = s.model.attn_implementation
        package = PACKAGES.get(attention)
        if package and not installed(package):
            here = [a for a in Attention if a not in PACKAGES or installed(PACKAGES[a])]
            return f"{attention} needs the {package} package, which is not installed; accepted here: {', '.join(here)}"
        if package and not s.cuda:
            return f"{attention} needs a CUDA device"
        return None


KNOB = AttentionKnob()
