"""model.attn_implementation: the attention kernels the model is built with (transformers' `attn_implementation`);
the flash-attention ones need their package and a CUDA device."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from pipeline.knobs.base import Knob, KnobRole, Memory, Setting, installed
from pipeline.knobs.compile_mode import graphs_of_compiled_layers
from pipeline.knobs.loss import LOGIT_BYTES, Loss


class Attention(StrEnum):
    EAGER = "eager"
    SDPA = "sdpa"
    FLEX_ATTENTION = "flex_attention"
    FLASH_ATTENTION_2 = "flash_attention_2"
    FLASH_ATTENTION_3 = "flash_attention_3"


# What flex attention keeps of the logits beside sdpa, in bytes a token and vocabulary entry, inside compiled layers'
# CUDA graphs beside a loss that keeps them (`graphed_logits`): one fp32 copy less, 12.13-12.17 against 13.33 GiB with
# the model's loss, 9.84 against 11.01 with the compiled one, at 4x1 on the Qwen3-1.7B shape (2,048 tokens x 151,936
# entries x 4 bytes = 1.16 GiB: fastest-h200-fixed, fastest-h200-adaptive, record-h200-1205), where the two measure
# alike beside TRL's loss (8.26, 8.27) and in eager layers (9.60 both). Why is not known; measured on that shape only.
FLEX_GRAPHED_LOGIT_BYTES = -4.0
# What SDPA keeps of a micro-batch whose attention takes a mask (padded, or records sharing a row): copies of
# the key and value heads repeated to every query head (transformers' `repeat_kv`: its fused CUDA kernels take grouped
# heads only without a mask), 2 (q - k) elements a token and layer over the grouped heads flex attention keeps. Flex
# attention measured 1.16-1.38 GiB under SDPA's prediction on Qwen3-0.6B's padded chats (8x1, 8,192 tokens: 0.88 GiB
# before the calibration's scale; accept-h100-1206b, -c, -d), and alike on the seed's rows, which take no mask.
SDPA_MASKED_REPEATS = 2.0

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
    role = KnobRole.ATTENTION
    term_text = (
        "`eager`: its scores, growing with a row's squared length; `sdpa`: the key and value heads repeated to every "
        "query head, 2 (q - k) elements a token and layer; `flex_attention`: 4 bytes a token and vocabulary entry less",
        "sdpa: a micro-batch whose attention takes a mask (padded, or records sharing a row); flex: compiled layers "
        "with CUDA graphs beside a loss that keeps the logits",
    )

    def dropped_in(self, lengths_vary: bool, cuda: bool) -> dict[Any, str]:
        """sdpa alone on the CPU: its fused kernel is the CPU's, flex attention compiles a slower one there, and the
        flash-attention kernels need a CUDA device."""
        if cuda:
            return {}
        why = {Attention.FLEX_ATTENTION: "compiles a slower kernel than sdpa's fused one on the CPU"}
        return {a: why.get(a, "needs a CUDA device") for a in self.searched if a != Attention.SDPA}

    def memory_in(self, value: Any, setting: Mapping[str, Any]) -> Memory:
        """Eager attention keeps its probabilities, a score per head and pair of positions of a row; the fused
        kernels keep none; SDPA keeps the key and value heads repeated where a micro-batch's attention takes a mask
        (`SDPA_MASKED_REPEATS`: the formula counts them on such a micro-batch, `Knobs.masked`); flex
        attention under CUDA graphs keeps one copy of the logits less (`FLEX_GRAPHED_LOGIT_BYTES`). Eager attention
        repeats the heads with a mask or without, inside the count its probes measure (it is not searched)."""
        if value == Attention.EAGER:
            return Memory(scores=1.0)
        if value == Attention.SDPA:
            return Memory(repeated_kv=SDPA_MASKED_REPEATS)
        flex = value == Attention.FLEX_ATTENTION and graphed_logits(setting)
        return Memory(logit_bytes=FLEX_GRAPHED_LOGIT_BYTES) if flex else Memory()

    def unmodelled(self, value: Any, setting: Mapping[str, Any]) -> str | None:
        """A flash-attention kernel inside compiled layers' CUDA graphs beside a loss that keeps the logits: flex
        attention moved the peak there by a copy of the logits (`memory_in`), and no flash kernel was measured."""
        flash = value not in (Attention.SDPA, Attention.EAGER, Attention.FLEX_ATTENTION)
        return str(value) if flash and graphed_logits(setting) else None

    @staticmethod
    def score_bytes(element: int) -> int:
        """What attention without a fused kernel keeps of a score (`search._formula`): its fp32 probability, and its
        copy in the compute dtype (`element` bytes) where that is narrower."""
        return 4 + (element if element < 4 else 0)

    def model_kwargs(self, model: Any) -> dict[str, Any]:
        return {"attn_implementation": model.attn_implementation}

    def refuses(self, s: Setting) -> str | None:
        attention = s.model.attn_implementation
        package = PACKAGES.get(attention)
        if package and not installed(package):
            here = [a for a in Attention if a not in PACKAGES or installed(PACKAGES[a])]
            return f"{attention} needs the {package} package, which is not installed; accepted here: {', '.join(here)}"
        if package and not s.cuda:
            return f"{attention} needs a CUDA device"
        return None


def graphed_logits(setting: Mapping[str, Any]) -> bool:
    """Whether `setting` runs compiled layers under CUDA graphs beside a loss that keeps the logits whole."""
    keeps = LOGIT_BYTES[Loss(str(setting.get("train.loss", Loss.TRL)))] > 0
    return keeps and graphs_of_compiled_layers(setting)


KNOB = AttentionKnob()
