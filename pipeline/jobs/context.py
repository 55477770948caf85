"""What a command passes on to its jobs: the jobs its precheck left out of the sweep, and the sweep a job belongs to (set by the sweep callback, read by each job's task in this
process; the environment carries it only to a launcher running the jobs in other processes or on other machines,
submitit copying it)."""

from __future__ import annotations

import dataclasses
import json
import os

from hydra.core.hydra_config import HydraConfig

from pipeline.config.identity import parse_override

CONTEXT_ENV = "BATCH_SPLIT_SWEEP"  # for jobs a launcher runs in other processes only


@dataclasses.dataclass
class _Command:
    """This process's command: its sweep while one runs, and the jobs its precheck left out of it."""

    sweep: SweepContext | None = None
    left_out: int = 0


COMMAND = _Command()


@dataclasses.dataclass(frozen=True)
class SweepContext:
    sweep_id: str
    parent_run_id: str
    varying: tuple[str, ...]  # config keys whose values differ between the sweep's jobs

    def start(self) -> None:
        """The sweep of this process's jobs from here on (and of jobs a launcher starts elsewhere)."""
        COMMAND.sweep = self
        os.environ[CONTEXT_ENV] = json.dumps(dataclasses.asdict(self))

    @classmethod
    def current(cls) -> SweepContext | None:
        """The sweep a job belongs to: this process's, else (a job a launcher started) the environment's."""
        if COMMAND.sweep is not None:
            return COMMAND.sweep
        text = os.environ.get(CONTEXT_ENV)
        if not text:
            return None
        data = json.loads(text)
        return cls(data["sweep_id"], data["parent_run_id"], tuple(data["varying"]))

    @staticmethod
    def clear() -> None:
        COMMAND.sweep = None
        os.environ.pop(CONTEXT_ENV, None)


def job_overrides() -> list[tuple[str, str]]:
    """This Hydra job's own overrides as (key, value text); none outside a Hydra job."""
    if not HydraConfig.initialized():
        return []
    return [parse_override(o) for o in HydraConfig.get().overrides.task]


def job_command() -> list[str]:
    """This Hydra job's own overrides as the command line gave them, its repeat index and how the console shows the
    table aside (bookkeeping): with `python -m pipeline.train`, they rebuild the job's config. None outside a Hydra
    job."""
    if not HydraConfig.initialized():
        return []
    return [o for o in HydraConfig.get().overrides.task if parse_override(o)[0] not in ("repeat", "repeats", "wide")]
