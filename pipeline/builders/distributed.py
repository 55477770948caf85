"""The process group of a torchrun job's ranks, made here before the Trainer would make it: NCCL on CUDA (bound to the
rank's device at once, so its communicator's memory is there when the job measures its CUDA context), gloo on the
CPU, and on both the timeout of the job (`launcher.timeout_s`). The Trainer passes its `ddp_timeout` to NCCL only,
never to gloo; accelerate takes a process group that exists as it is."""

from __future__ import annotations

import datetime
import os
import sys
from typing import NoReturn

import torch

DEFAULT_TIMEOUT_S = 1800  # PyTorch's and the Trainer's (ddp_timeout) default


def world_size() -> int:
    """The ranks of this job, as torchrun says (1 outside torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


def init_process_group(cuda: bool, timeout_s: float | None) -> str | None:
    """Join this job's ranks (a no-op for one rank); the backend, or None. A collective that waits longer than
    `timeout_s` for a rank that stopped answering raises on the others, so no rank outlives the job's timeout."""
    if world_size() <= 1:
        return None
    if torch.distributed.is_initialized():
        return torch.distributed.get_backend()
    timeout = datetime.timedelta(seconds=timeout_s or DEFAULT_TIMEOUT_S)
    if cuda:
        device = torch.device("cuda", local_rank())
        torch.cuda.set_device(device)
        torch.distributed.init_process_group("nccl", timeout=timeout, device_id=device)
    else:
        torch.distributed.init_process_group("gloo", timeout=timeout)
    return torch.distributed.get_backend()


def leave_process_group() -> None:
    """Leave the ranks' process group together, and end this rank at once (several ranks only). A group torn down
    by the interpreter's exit, while a peer is still leaving or gloo's threads still hold work, was seen to abort a
    rank of a finished gloo job ("terminate called without an active exception", SIGABRT) after its record was
    written, failing the job; a barrier and destroy_process_group alone made it rarer, not gone. So the rank leaves
    the group beside its peers, flushes its output and exits without the interpreter's finalization. Only for ranks
    that ended together (a finished job, or a stop they agreed on): a rank whose job failed exits at once."""
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
        exit_rank()


def exit_rank(code: int = 0) -> NoReturn:
    """End a rank whose work and records are done: output flushed, no interpreter finalization (see above)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
