"""The meter's clocks: CUDA events (read after the step's one synchronisation) or perf_counter on the CPU, the
seconds this process has spent compiling, and the sequences of a padding-free batch."""

from __future__ import annotations

import time
from typing import Any

import torch

from pipeline.adapters import dynamo


class Clock:
    """Marks on the device timeline (CUDA events) or the host clock (CPU). The events are kept and recorded again
    each step (`reuse`, once the step's figures are read): no event is created or destroyed per micro-batch."""

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self._events: list[Any] = []
        self._used = 0

    def mark(self) -> Any:
        if not self.cuda:
            return time.perf_counter()
        if self._used == len(self._events):
            self._events.append(torch.cuda.Event(enable_timing=True))
        event = self._events[self._used]
        self._used += 1
        event.record()
        return event

    def seconds(self, start: Any, end: Any) -> float:
        if self.cuda:
            return start.elapsed_time(end) / 1000.0
        return end - start

    def reuse(self) -> None:
        """Every event may be recorded again: the figures of those recorded so far have been read."""
        self._used = 0


CUDAGRAPH_RECORDING = "CUDAGraphNode.record"  # Inductor's timer of recording one CUDA graph (reduce-overhead)


def compile_seconds() -> float:
    """Seconds this process has spent compiling so far: Dynamo frames (their graphs' backend compile included),
    lazily compiled backward graphs, and recording CUDA graphs (under reduce-overhead the step after the first records
    the graphs later steps replay: a one-off cost like compiling, seconds for a model's layers, which would otherwise
    look like a slow step to the pruning clock). Dynamo's own timers (`adapters.dynamo`); 0.0 without them."""
    spent = dynamo.seconds_spent()
    return float(spent.get("total_wall_time", 0.0) + spent.get(CUDAGRAPH_RECORDING, 0.0))


def samples_from_positions(kwargs: dict, ids: torch.Tensor) -> torch.Tensor | int:
    """Padding-free batches are one flattened row; count sequences by position ids restarting at 0 (a tensor,
    read after the step's synchronisation), up to the row's last record (`real_tokens`)."""
    positions = kwargs.get("position_ids")
    if positions is None:
        return ids.shape[0]
    row = positions.reshape(-1)
    return ((row == 0) & (_index(row) < real_tokens(kwargs, ids))).sum()


def real_tokens(kwargs: dict, ids: torch.Tensor) -> torch.Tensor | int:
    """A micro-batch's own tokens, padding left out: its attention mask's ones, or, in a padding-free row (position
    ids, no mask), the tokens up to its last position past 0 (a row padded to a multiple ends in positions 0); a
    tensor, read after the step's synchronisation."""
    mask, positions = kwargs.get("attention_mask"), kwargs.get("position_ids")
    if mask is not None:
        return mask.sum()
    if positions is None:
        return ids.numel()
    row = positions.reshape(-1)
    return torch.where(row > 0, _index(row), -1).max() + 1


def _index(row: torch.Tensor) -> torch.Tensor:
    return torch.arange(row.numel(), device=row.device)
