"""What the ranks of one DDP job (torchrun) tell each other at every step's end, and how long DDP's gradient
all-reduce takes.

The ranks train in lockstep, so they must also stop together: a rank that stopped alone (its peak over the cap, its
steps slow, its owner gone) would leave the others waiting in their next all-reduce. So at each step's end every rank
gives its peak memory, the tokens and samples it trained on, and its own stop decision (`exchange`), and all take
the same: the most serious stop any rank asked for. Each rank's peak is judged against the cap on its own device;
the step's peak is the largest, its tokens and samples the sum over the ranks (the job's work, for tokens/s).

DDP reduces the adapters' gradients once per optimizer step, during the last micro-batch's backward (accumulation
steps run under `no_sync`), bucket by bucket as gradients become ready, overlapped with the backward that is still
computing. `AllReduceClock` wraps DDP's default all-reduce in a communication hook that marks each bucket's launch
and completion (CUDA events on a GPU, whose completion mark is queued after the all-reduce's kernel; the host clock
on gloo, whose future completes when the data is there); a step's all-reduce time is from its first bucket's launch
to its last bucket's completion. It overlaps the backward phase, so it is no sixth phase of the step's sum.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from transformers import TrainerCallback

from pipeline.records import Status

STOPS = (None, Status.PRUNED, Status.OVER_CAP, Status.KILLED)  # by seriousness: the ranks take the last any asked


def distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


@dataclass(frozen=True)
class Exchange:
    """One step as every rank saw it."""

    peaks: tuple[int, ...]  # by rank: peak bytes (reserved + context on CUDA, resident memory on CPU)
    tokens: int  # summed over the ranks
    padded_tokens: int
    samples: int
    stop: Status | None  # the most serious stop any rank asked for


def exchange(peak: int, tokens: int, padded_tokens: int, samples: int, stop: Status | None) -> Exchange:
    """Every rank's figures of this step, in one all-gather (a CUDA tensor under NCCL)."""
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    mine = torch.tensor([peak, tokens, padded_tokens, samples, STOPS.index(stop)], dtype=torch.int64, device=device)
    every = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(every, mine)
    rows = torch.stack(every).tolist()
    return Exchange(
        peaks=tuple(int(r[0]) for r in rows),
        tokens=sum(int(r[1]) for r in rows),
        padded_tokens=sum(int(r[2]) for r in rows),
        samples=sum(int(r[3]) for r in rows),
        stop=STOPS[max(int(r[4]) for r in rows)],
    )


class AllReduceClock(TrainerCallback):
    """Times DDP's gradient all-reduce: a communication hook around its default one, registered on the wrapped model
    once training begins (the Trainer wraps it in DDP then). `take` gives a step's seconds and starts the next."""

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self.trainer = None
        self._marks: list[tuple[Any, Any]] = []
        self.attached = False

    def bind(self, trainer) -> None:
        self.trainer = trainer

    def _mark(self) -> Any:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def _hook(self, state, bucket):
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        start = self._mark()
        future = allreduce_hook(state, bucket)

        def done(reduced):
            # on a GPU this runs on a stream that waits for the all-reduce: the mark lands after it
            self._marks.append((start, self._mark()))
            return reduced.value()

        return future.then(done)

    def on_train_begin(self, args, state, control, **kwargs):
        model = self.trainer.model_wrapped if self.trainer is not None else None
        if isinstance(model, torch.nn.parallel.DistributedDataParallel):
            model.register_comm_hook(None, self._hook)
            self.attached = True

    def take(self) -> float:
        """Seconds from the step's first bucket launched to its last reduced (0.0 without an all-reduce); read after
        the step's synchronisation, so every mark has happened."""
        marks, self._marks = self._marks, []
        if not marks:
            return 0.0
        first = marks[0][0]
        if self.cuda:
            return max(first.elapsed_time(end) for _, end in marks) / 1000.0
        return max(end for _, end in marks) - first
