"""train.gradient_checkpointing: each layer keeps only its input and recomputes the rest in the backward pass, which
trades compute for activation memory."""

from __future__ import annotations

from typing import Any

from pipeline.knobs.base import Knob, KnobRole, Memory

# The recomputed layer at the peak: what it keeps, and half as much again in its backward's gradients; fitted to the
# seed's checkpointed probes (fp16, the Qwen3-1.7B shape, 512 tokens: 0.311 MB a token of growth, fastest-h200-fixed),
# one shape only.
RECOMPUTED = 1.5


class GradientCheckpointingKnob(Knob):
    key = "train.gradient_checkpointing"
    default = False
    help = "recompute each layer's activations in the backward pass: less memory, more compute"
    short = "ckpt"
    searched = (True, False)
    role = KnobRole.CHECKPOINTING
    term_text = ("each layer keeps its input, one is recomputed (the shares then apply to nothing)", "")
    card = (3, "checkpointing {}")

    def memory(self, value: bool) -> Memory:
        return Memory(checkpointed=value)

    @staticmethod
    def kept_bytes(layers: int, element: int, hidden: int, layer: float) -> float:
        """What checkpointed layers keep per token (`search._formula`): each layer its input (`element` bytes x
        `hidden`), and the one recomputed in the backward all it keeps without checkpointing (`layer`) and its
        backward's gradients of that: RECOMPUTED times it (BENCHMARKS.md, "What a decoder layer keeps")."""
        return layers * element * hidden + RECOMPUTED * layer

    def recomputes(self, train: Any) -> bool:
        return bool(train.gradient_checkpointing)

    def sft_kwargs(self, train: Any, dtype: str, device: str) -> dict[str, Any]:
        on = train.gradient_checkpointing
        return {
            "gradient_checkpointing": on,
            "gradient_checkpointing_kwargs": {"use_reentrant": False} if on else None,
        }


KNOB = GradientCheckpointingKnob()
