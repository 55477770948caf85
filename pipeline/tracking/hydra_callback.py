"""Hydra callback: a multirun becomes an MLflow parent run with its jobs nested, with progress and a summary.

on_multirun_start opens the parent run and puts its id in the environment (the task nests each job under it);
on_job_end prints "jobs done of total, elapsed, ETA"; on_multirun_end ranks the jobs, prints the table, logs the
comparison (loss deviation from the reference split, verdicts) and ends the parent run. If the sweep is interrupted
the store's exit handler ends the parent run KILLED.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

from hydra.core.utils import JobReturn
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from pipeline.reporting.table import comparison_rows, format_table
from pipeline.tracking.store import PARENT_ENV, STATUS_TAG, SWEEP_ENV, SWEEP_TAG, Tracker


def _count_jobs(config: DictConfig) -> int:
    from pipeline.config.compose import expand_jobs

    try:
        return len(expand_jobs(list(config.hydra.overrides.task), multirun=True))
    except Exception:  # noqa: BLE001 - only the progress line depends on it
        return 0


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class SweepTracker(Callback):
    def __init__(self) -> None:
        self.tracker: Tracker | None = None
        self.parent_id: str | None = None
        self.done = 0
        self.total = 0
        self.started = 0.0

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.sweep_id = time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
        self.total = _count_jobs(config)
        self.started = time.time()
        self.tracker = Tracker(config.tracking.uri, config.tracking.experiment, config.tracking.artifact_root)
        overrides = " ".join(config.hydra.overrides.task)
        self.parent_id = self.tracker.start(
            f"sweep {self.sweep_id}",
            tags={SWEEP_TAG: self.sweep_id, "kind": "sweep", "overrides": overrides, STATUS_TAG: "running"},
        )
        self.tracker.params(self.parent_id, {"overrides": overrides, "jobs": self.total})
        os.environ[PARENT_ENV] = self.parent_id
        os.environ[SWEEP_ENV] = self.sweep_id
        print(f"[sweep] {self.sweep_id}: {self.total} jobs, MLflow parent run {self.parent_id}", flush=True)
        if "BasicLauncher" in str(OmegaConf.select(config, "hydra.launcher._target_")):
            from pipeline.jobs import runner

            runner.warm_up(config.launcher.kind)  # jobs run in this process: start the fork server once, now

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        if self.parent_id is None:
            return
        self.done += 1
        done = self.done
        elapsed = time.time() - self.started
        eta = elapsed / done * (self.total - done) if self.total >= done else 0.0
        print(
            f"[sweep] {done}/{self.total or '?'} jobs done | elapsed {_clock(elapsed)} | ETA {_clock(eta)}",
            flush=True,
        )

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if self.tracker is None or self.parent_id is None:
            return
        from pipeline.reporting.report import collect

        # read back from MLflow: with a launcher that runs jobs elsewhere (submitit), they never return here
        results, _ = collect(self.tracker, self.tracker.run(self.parent_id))
        rows = comparison_rows(results)
        for row in rows:
            if row.get("run_id") and row.get("loss_dev") is not None:
                self.tracker.metrics(row["run_id"], {"loss_max_rel_dev": row["loss_dev"]})
            if row.get("run_id") and row.get("rank"):
                self.tracker.tags(row["run_id"], {"rank": row["rank"]})
        table = format_table(rows)
        print(table, flush=True)
        self.tracker.artifact_text(self.parent_id, "summary.md", table + "\n")
        ok = sum(1 for r in results if r.get("status") == "ok")
        self.tracker.metrics(self.parent_id, {"jobs_ok": ok, "jobs_total": len(results)})
        self.tracker.tags(self.parent_id, {STATUS_TAG: "done"})
        self.tracker.end(self.parent_id, "FINISHED")
        os.environ.pop(PARENT_ENV, None)
        os.environ.pop(SWEEP_ENV, None)
        self.parent_id = None
