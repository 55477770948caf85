"""One job on several processes of this machine (`launcher.kind=torchrun`), and which of them failed first.

python -m pipeline.jobs.ranks WORLD_SIZE SPEC.json WORKDIR

PyTorch's elastic launcher starts the ranks as `torchrun --standalone --nproc-per-node=N` would, with three
differences that keep a failure to one line:

- every rank's output goes to `ranks/` in the job's work folder (removed with it), not to the terminal nor to a
  `torchelastic_*` folder in the temp folder that nothing removes; rank 0's also goes to this launcher's own output,
  which is the job's log (`jobs.joblog`);
- the launcher's own log lines and its page-long ChildFailedError stay unprinted: `ranks.json` keeps how each
  failed rank ended (signal or exit code);
- a rank whose job fails, or runs out of memory, writes `rank-<r>.json` (its error, its status, and when) and exits
  with code 1, so the others stop (ranks that stop early do so together, at a step's end: `measure.collective`).

The parent (`runner.run_job`) calls `first_failure`, which names the rank that failed first and why: a rank killed by
a signal other than SIGTERM (the launcher stops the survivors with SIGTERM), else the rank that reported its error
first (a survivor's error, e.g. gloo's "Connection reset by peer", comes after the error that caused it), else the
first rank the launcher saw end. The parent side imports nothing from torch.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from pipeline.records import Status

RANKS_FILE = "ranks.json"  # written by this launcher when a rank failed
RANK_ERROR = "rank-{rank}.json"  # written by a rank whose job failed (jobs.child)
LOG_DIR = "ranks"


def exit_reason(code: int | None) -> str:
    """How a process ended, for a person: `killed by SIGKILL (...)`, `exited with code 3`."""
    if code is None:
        return "did not exit"
    if code < 0:
        name = signal.Signals(-code).name if -code in {s.value for s in signal.Signals} else str(-code)
        hint = " (killed: out of host memory, or by a user)" if -code == signal.SIGKILL else ""
        return f"killed by {name}{hint}"
    return f"exited with code {code}"


def report_error(workdir: Path, rank: int, error: str, status: Status = Status.FAILED) -> None:
    """In a rank whose job failed (or ran out of memory): its error and the time it is known, for `first_failure`."""
    record = {"rank": rank, "time": time.time(), "error": error, "status": status.value}
    (workdir / RANK_ERROR.format(rank=rank)).write_text(json.dumps(record), encoding="utf-8")


@dataclass(frozen=True)
class RankFailure:
    """The rank that failed first: why, in a line, and what the job's status becomes (`oom` when that rank ran out
    of memory, a result like any other; else `failed`)."""

    rank: int
    text: str
    status: Status = Status.FAILED


@dataclass(frozen=True)
class RankError:
    """A rank's own report of its failure (RANK_ERROR, `report_error`); a status missing: FAILED."""

    rank: int
    time: float
    error: str
    status: Status = Status.FAILED

    @classmethod
    def from_json(cls, data: dict) -> RankError:
        return cls(
            int(data["rank"]), float(data["time"]), str(data["error"]), Status(data.get("status", Status.FAILED))
        )


def _read(path: Path) -> dict | list | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def first_failure(workdir: Path, world_size: int) -> RankFailure | None:
    """The rank that failed first and why; None when no rank failed."""
    ended = _read(workdir / RANKS_FILE) or []
    reported = [RankError.from_json(r) for r in (_read(p) for p in workdir.glob(RANK_ERROR.format(rank="*"))) if r]
    killed = [e for e in ended if e["exitcode"] < 0 and -e["exitcode"] != signal.SIGTERM]
    if killed:
        first = min(killed, key=lambda e: e["rank"])
        text = f"rank {first['rank']} of {world_size} (pid {first['pid']}) was {exit_reason(first['exitcode'])}"
        return RankFailure(first["rank"], text)
    if reported:
        report = min(reported, key=lambda r: r.time)
        text = f"rank {report.rank} of {world_size} failed first: {report.error}"
        return RankFailure(report.rank, text, report.status)
    if ended:
        first = ended[0]
        text = f"rank {first['rank']} of {world_size} (pid {first['pid']}) {exit_reason(first['exitcode'])}"
        return RankFailure(first["rank"], text)
    return None


def launch(world_size: int, spec_path: str, workdir: Path) -> int:
    """Run the ranks to their end; the exit code: 0, 1 when a rank failed, 128 + N when this launcher got signal N."""
    import logging

    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    logging.getLogger("torch.distributed.elastic").setLevel(logging.CRITICAL)
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # what torchrun sets for several processes, without its banner
    logs = DefaultLogsSpecs(
        log_dir=str(workdir / LOG_DIR),
        redirects=Std.ALL,
        tee=Std.ALL,
        local_ranks_filter={0},
    )
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=world_size,
        run_id=f"job-{os.getpid()}",
        rdzv_backend="c10d",
        rdzv_endpoint="localhost:0",
        max_restarts=0,
        logs_specs=logs,
    )
    try:
        elastic_launch(config, sys.executable)("-u", "-m", "pipeline.jobs.child", spec_path, str(workdir))
    except ChildFailedError as err:
        ended = [
            {"rank": rank, "pid": failure.pid, "exitcode": failure.exitcode}
            for rank, failure in sorted(err.failures.items(), key=lambda item: item[1].timestamp)
        ]
        (workdir / RANKS_FILE).write_text(json.dumps(ended), encoding="utf-8")
        return 1
    except SignalException as err:
        return 128 + int(err.sigval)
    return 0


if __name__ == "__main__":
    world, spec_file, folder = int(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    sys.exit(launch(world, spec_file, folder))
