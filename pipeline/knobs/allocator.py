"""train.allocator: how PyTorch's CUDA caching allocator holds the job's memory. `cached` (PyTorch's default): each
request no cached block fits gets a segment of its own from the device, and a block stays in the segment it was cut
from, so micro-batches of varying shapes leave segments behind that a later, larger block cannot use: the reserved
peak then depends on the order of the shapes (on the chats grid, padded to the longest or to buckets, 1.3-5.8 GiB
over one shape of as many tokens). `expandable`: `expandable_segments:True`, one segment per stream that grows by
mapping pages, which a larger block extends rather than leaving the smaller ones behind.

The job sets it either way (the config, not the environment, says which ran), in PYTORCH_CUDA_ALLOC_CONF before its
first allocation, the environment's other allocator settings kept (PYTORCH_CUDA_ALLOC_CONF's, else
PYTORCH_ALLOC_CONF's: torch reads the first where both are set)."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from pipeline.knobs.base import Knob, Setting

ALLOC_CONF = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")  # the first wins where both are set


class Allocator(StrEnum):
    CACHED = "cached"
    EXPANDABLE = "expandable"


def allocator_settings(environ: Mapping[str, str], expandable: bool) -> str:
    """The allocator's settings `environ` gives, with expandable segments on or off and its other settings kept."""
    given = next((environ[name] for name in ALLOC_CONF if environ.get(name)), "")
    parts = (part.strip() for part in given.split(","))
    kept = [part for part in parts if part and part.partition(":")[0].strip() != "expandable_segments"]
    return ",".join([*kept, f"expandable_segments:{expandable}"])


class AllocatorKnob(Knob):
    key = "train.allocator"
    default = Allocator.CACHED
    help = "the CUDA allocator: cached (a segment per size), expandable (one segment that grows: expandable_segments)"
    short = "alloc"

    def refuses(self, s: Setting) -> str | None:
        if s.train.allocator == Allocator.EXPANDABLE and not s.cuda:
            return "expandable sets the CUDA allocator's segments; accepted on the CPU: cached"
        return None

    def unmodelled(self, value: str, setting: Mapping[str, Any]) -> str | None:
        """Expandable segments change what the allocator keeps of the micro-batches before the longest."""
        return str(value) if value == Allocator.EXPANDABLE else None

    def process(self, train: Any, environ: dict) -> None:
        """Before the job touches the device: the allocator reads its settings once, at its first allocation."""
        environ[ALLOC_CONF[0]] = allocator_settings(environ, train.allocator == Allocator.EXPANDABLE)

    def helpers(self, train: Any) -> list[str]:
        expandable = train.allocator == Allocator.EXPANDABLE
        return [self.source("ALLOC_CONF", "allocator_settings")] if expandable else []

    def process_lines(self, train: Any) -> list[str]:
        """The default's script leaves the allocator to the environment; expandable's sets it first thing."""
        if train.allocator != Allocator.EXPANDABLE:
            return []
        return [
            "    # the CUDA allocator's expandable segments, before anything touches the device",
            "    os.environ[ALLOC_CONF[0]] = allocator_settings(os.environ, expandable=True)",
        ]


KNOB = AllocatorKnob()
