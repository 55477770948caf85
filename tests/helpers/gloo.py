"""A function run on several real processes joined by a gloo process group, as the ranks of a job are: each rank's
return value comes back (as JSON) to the test."""

from __future__ import annotations

import json
import multiprocessing
from collections.abc import Callable
from pathlib import Path


def _rank_main(fn: Callable, rank: int, world_size: int, folder: str, args: tuple) -> None:
    import torch.distributed as dist

    from pipeline.builders.distributed import leave_process_group

    dist.init_process_group("gloo", init_method=f"file://{folder}/rendezvous", rank=rank, world_size=world_size)
    value = fn(rank, *args)
    (Path(folder) / f"rank-{rank}.json").write_text(json.dumps(value), encoding="utf-8")
    leave_process_group()  # as a job's ranks leave: together, and without the interpreter's finalization


def on_ranks(fn: Callable, world_size: int, folder: Path, *args, timeout: float = 120) -> list:
    """`fn(rank, *args)` on `world_size` fresh processes (spawned, gloo); their return values by rank."""
    context = multiprocessing.get_context("spawn")
    processes = [
        context.Process(target=_rank_main, args=(fn, rank, world_size, str(folder), args)) for rank in range(world_size)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout)
        if process.is_alive():
            process.kill()
    codes = [p.exitcode for p in processes]
    assert codes == [0] * world_size, f"ranks ended with {codes}"
    return [json.loads((folder / f"rank-{rank}.json").read_text(encoding="utf-8")) for rank in range(world_size)]
