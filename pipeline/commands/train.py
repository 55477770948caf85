"""Train one LoRA job per config, each in its own process, and record it in MLflow.

python -m pipeline.train                                   # one job on the default (tiny model, CPU)
python -m pipeline.train -m batch.split=1x4,2x2,4x1        # a sweep: one isolated job per split
python -m pipeline.train -m experiment=seed-t4 batch.split=1x4,2x2,4x1 repeats=3
python -m pipeline.train -m launcher.kind=torchrun world_size=1,2 batch.split=1x4,2x2,4x1,1x2,2x1   # effective 4
"""

from __future__ import annotations

from omegaconf import DictConfig

from pipeline import exits
from pipeline.commands.cli import run_entry
from pipeline.config.plan import checked_job
from pipeline.records import Status

CONFIG = "config"  # conf/config.yaml: one group per experiment axis


def train(cfg: DictConfig) -> float | None:
    from pipeline.jobs import task  # after the precheck: bad input never pays for this import

    job = checked_job(cfg)  # as the precheck checked it
    if job is None:  # a combination of a world-size sweep that the precheck left out, and said so
        return None
    outcome = task.run(job)
    code, line = exits.jobs_exit_code([(outcome.status, outcome.summary.fit)])
    if code != exits.OK and outcome.status is Status.OK:  # the job's line said ok: the exit code says why not
        print(f"[train] {line}", flush=True)
    exits.ExitCode.set(code, line)
    return outcome.summary.median


def main() -> None:
    run_entry("pipeline.train", CONFIG, train, __doc__)
