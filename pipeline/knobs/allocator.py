"""train.allocator: how PyTorch's CUDA caching allocator holds the job's memory. `cached`: as the environment's
PYTORCH_CUDA_ALLOC_CONF sets it (PyTorch's default: each request no cached block fits gets a segment of its own from
the device, and a block stays in the segment it was cut from), so micro-batches of varying shapes leave segments
behind that a later, larger block cannot use: the reserved peak then depends on the order of the shapes (on the chats
grid, padded to the longest or to buckets, 1.3-5.8 GiB over one shape of as many tokens). `expandable`:
`expandable_segments:True`, one segment per stream that grows by mapping pages, which a larger block extends rather
than leaving the smaller ones behind; the environment's other settings are kept."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from pipeline.knobs.base import Knob

ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"


class Allocator(StrEnum):
    CACHED = "cached"
    EXPANDABLE = "expandable"


def with_expandable_segments(settings: str) -> str:
    """PYTORCH_CUDA_ALLOC_CONF's `settings` with expandable segments on, its other settings kept."""
    parts = (part.strip() for part in settings.split(","))
    kept = [part for part in parts if part and part.partition(":")[0].strip() != "expandable_segments"]
    return ",".join([*kept, "expandable_segments:True"])


class AllocatorKnob(Knob):
    key = "train.allocator"
    default = Allocator.CACHED
    help = "cached: as PYTORCH_CUDA_ALLOC_CONF sets it; expandable: expandable segments, less left behind by shapes"
    short = "alloc"

    def unmodelled(self, value: str, setting: Mapping[str, Any]) -> str | None:
        """Expandable segments change what the allocator keeps of the micro-batches before the longest."""
        return str(value) if value == Allocator.EXPANDABLE else None

    def process(self, train: Any, environ: dict) -> None:
        """Before the job touches the device: the allocator reads its settings once, at its first allocation."""
        if train.allocator == Allocator.EXPANDABLE:
            environ[ALLOC_CONF] = with_expandable_segments(environ.get(ALLOC_CONF, ""))

    def helpers(self, train: Any) -> list[str]:
        expandable = train.allocator == Allocator.EXPANDABLE
        return [self.source("ALLOC_CONF", "with_expandable_segments")] if expandable else []

    def process_lines(self, train: Any) -> list[str]:
        if train.allocator != Allocator.EXPANDABLE:
            return []
        return [
            "    # the CUDA allocator's expandable segments, set before the first allocation reads them",
            '    os.environ[ALLOC_CONF] = with_expandable_segments(os.environ.get(ALLOC_CONF, ""))',
        ]


KNOB = AllocatorKnob()
