"""train.padding: how a micro-batch's sequences are laid out: padded to the longest, padded to its longest rounded up
to a length bucket (a quarter of max_length: at most four shapes per micro-batch size, which compiled layers and CUDA
graphs see as a bounded set), padded to max_length (one shape for every batch), concatenated without padding
(padding_free), or packed into sequences of max_length (packing, which reads the records that fill them:
`builders.dataset`). Under a CUDA-graph compile mode, padding to the longest pads to the buckets: a graph is recorded
per shape."""

from __future__ import annotations

import math
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from pipeline.knobs.base import CUDA_GRAPH_MODE_VALUES, Knob, KnobRole

BUCKETS = 4  # length buckets per max_length


class Padding(StrEnum):
    LONGEST = "longest"
    MAX_LENGTH = "max_length"
    PADDING_FREE = "padding_free"
    PACKING = "packing"
    BUCKETS = "buckets"


def bucket_width(max_length: int) -> int:
    """The multiple a bucketed micro-batch is padded to: its longest record rounded up to a quarter of max_length."""
    return math.ceil(max_length / BUCKETS)


def pad_to(train: Any) -> int | None:
    """TRL's `pad_to_multiple_of` for a config's padding (and compile mode)."""
    padding = train.padding
    if padding == Padding.MAX_LENGTH:
        return train.max_length
    graphs = padding == Padding.LONGEST and train.compile_mode in CUDA_GRAPH_MODE_VALUES
    return bucket_width(train.max_length) if padding == Padding.BUCKETS or graphs else None


def layout(padding: str, compile_mode: str) -> str:
    """The layout a padding gives a micro-batch under a compile mode: padded to the longest is bucketed under CUDA
    graphs (`pad_to`)."""
    graphs = compile_mode in CUDA_GRAPH_MODE_VALUES
    return Padding.BUCKETS.value if padding == Padding.LONGEST and graphs else str(padding)


class PaddingKnob(Knob):
    key = "train.padding"
    default = Padding.LONGEST
    help = "longest: to the batch's longest; buckets: rounded up to a quarter of max_length; max_length: one shape"
    searched = (Padding.LONGEST, Padding.MAX_LENGTH, Padding.PADDING_FREE, Padding.BUCKETS)  # packing: other sequences
    screen = 5  # first of the knobs: where lengths vary, a padding with few shapes is what compiled layers need (a
    # compiled config padded to the longest recompiles for each new length: 68-72 s of its first steps on the chats)
    role = KnobRole.LAYOUT
    card = (1, "padding {}")

    def dropped_in(self, lengths_vary: bool, cuda: bool) -> dict[Any, str]:
        """Every layout where every record has one length: each is then the same batch."""
        why = "every record has one length here, so each layout is the same batch"
        return {} if lengths_vary else dict.fromkeys(self.searched, why)

    def unmodelled(self, value: str, setting: Mapping[str, Any]) -> str:
        """Its layout (the allocator keeps blocks of the micro-batches trained before the longest, which differ
        by layout: on the chats grid, the compiled loss kept 6.2-19.5 bytes per token and vocabulary entry by
        padding, record-h200/grid-chats-optuna.db)."""
        return layout(value, str(setting.get("train.compile_mode", "default")))

    def packs(self, train: Any) -> bool:
        return train.padding == Padding.PACKING

    def truncates(self, train: Any) -> bool:
        """Padding-free: TRL's collator enforces no max_length (`sft_kwargs`)."""
        return train.padding == Padding.PADDING_FREE

    def one_shape(self, train: Any) -> bool:
        return train.padding == Padding.MAX_LENGTH

    def sft_kwargs(self, train: Any, dtype: str, device: str) -> dict[str, Any]:
        padding = train.padding
        return {
            # padding-free without packing: TRL enforces no max_length itself and refuses one, so the job's data comes
            # truncated already (`builders.dataset.truncated`)
            "max_length": None if padding == Padding.PADDING_FREE else train.max_length,
            "padding_free": padding == Padding.PADDING_FREE,
            "packing": padding == Padding.PACKING,
            "pad_to_multiple_of": pad_to(train),
        }


KNOB = PaddingKnob()
