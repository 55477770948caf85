"""train.gradient_checkpointing: each layer keeps only its input and recomputes the rest in the backward pass, which
trades compute for activation memory."""

from __future__ import annotations

from typing import Any

from pipeline.knobs.base import Knob, KnobRole, Memory


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
        `hidden`), and the one recomputed in the backward all it keeps without checkpointing (`layer`)."""
        return layers * element * hidden + layer

    def recomputes(self, train: Any) -> bool:
        return bool(train.gradient_checkpointing)

    def sft_kwargs(self, train: Any, dtype: str, device: str) -> dict[str, Any]:
        on = train.gradient_checkpointing
        return {
            "gradient_checkpointing": on,
            "gradient_checkpointing_kwargs": {"use_reentrant": False} if on else None,
        }


KNOB = GradientCheckpointingKnob()
