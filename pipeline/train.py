"""Train one LoRA job per config, each in its own process, and record it in MLflow.

python -m pipeline.train                                   # one job on the default (tiny model, CPU)
python -m pipeline.train -m batch.split=1x4,2x2,4x1        # a sweep: one isolated job per split
python -m pipeline.train -m experiment=seed-t4 batch.split=1x4,2x2,4x1 repeats=3
"""

from __future__ import annotations

from omegaconf import DictConfig

from pipeline import exits
from pipeline.cli import run_entry


def train(cfg: DictConfig) -> float | None:
    from pipeline.jobs import task  # after the precheck: bad input never pays for this import

    outcome = task.run(cfg)
    exits.ExitCode.set(*exits.jobs_exit_code([(outcome.status, outcome.summary.fit)]))
    return outcome.summary.median


def main() -> None:
    run_entry("pipeline.train", "config", train, __doc__)


if __name__ == "__main__":
    main()
