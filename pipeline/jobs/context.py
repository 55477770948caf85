"""The sweep a job belongs to, passed from the sweep callback to each job's task through the environment (where a
launcher running the jobs in other processes, or on other machines, finds it too)."""

from __future__ import annotations

import dataclasses
import json
import os

from hydra.core.hydra_config import HydraConfig

from pipeline.config.identity import parse_override

CONTEXT_ENV = "BATCH_SPLIT_SWEEP"


@dataclasses.dataclass(frozen=True)
class SweepContext:
    sweep_id: str
    parent_run_id: str
    varying: tuple[str, ...]  # config keys whose values differ between the sweep's jobs

    def to_env(self) -> None:
        os.environ[CONTEXT_ENV] = json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_env(cls) -> SweepContext | None:
        text = os.environ.get(CONTEXT_ENV)
        if not text:
            return None
        data = json.loads(text)
        return cls(data["sweep_id"], data["parent_run_id"], tuple(data["varying"]))

    @staticmethod
    def clear() -> None:
        os.environ.pop(CONTEXT_ENV, None)


def job_overrides() -> list[tuple[str, str]]:
    """This Hydra job's own overrides as (key, value text); none outside a Hydra job."""
    if not HydraConfig.initialized():
        return []
    return [parse_override(o) for o in HydraConfig.get().overrides.task]


def job_command() -> list[str]:
    """This Hydra job's own overrides as the command line gave them, its repeat index aside (bookkeeping): with
    `python -m pipeline.train`, they rebuild the job's config. None outside a Hydra job."""
    if not HydraConfig.initialized():
        return []
    return [o for o in HydraConfig.get().overrides.task if parse_override(o)[0] not in ("repeat", "repeats")]
