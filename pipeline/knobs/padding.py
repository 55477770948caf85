"""train.padding: how a micro-batch's sequences are laid out: padded to the longest, padded to max_length (one
shape for every batch, which CUDA graphs need), concatenated without padding (padding_free), or packed into
sequences of max_length (packing, which reads the records that fill them: `builders.dataset`)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pipeline.knobs.base import Knob


class Padding(StrEnum):
    LONGEST = "longest"
    MAX_LENGTH = "max_length"
    PADDING_FREE = "padding_free"
    PACKING = "packing"


class PaddingKnob(Knob):
    key = "train.padding"
    default = Padding.LONGEST
    help = "longest: to the batch's longest; max_length: every batch one shape"
    searched = (Padding.LONGEST, Padding.MAX_LENGTH, Padding.PADDING_FREE)  # packing trains on other sequences

    def searched_in(self, lengths_vary: bool, cuda: bool) -> tuple[Any, ...]:
        """Nothing where every record has one length: each layout is then the same batch."""
        return self.searched if lengths_vary else ()

    def sft_kwargs(self, train: Any, dtype: str, device: str) -> dict[str, Any]:
        padding = train.padding
        return {
            # padding-free without packing: TRL enforces no max_length itself and refuses one, so the job's data comes
            # truncated already (`builders.dataset.truncated`)
            "max_length": None if padding == Padding.PADDING_FREE else train.max_length,
            "padding_free": padding == Padding.PADDING_FREE,
            "packing": padding == Padding.PACKING,
            "pad_to_multiple_of": train.max_length if padding == Padding.MAX_LENGTH else None,
        }


KNOB = PaddingKnob()
