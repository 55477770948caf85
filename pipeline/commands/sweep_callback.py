"""A multirun as one sweep: an MLflow parent run with its jobs nested, named after what varies, with progress, the
comparison table and the exit status.

Hydra calls `SweepCallback`: on_multirun_start opens the parent run and puts the sweep context (parent run, sweep id,
the keys that vary across the jobs) in the environment, where every job's task finds it, in this process or in a
launcher's (submitit copies the environment); on_job_end prints progress; on_multirun_end reads the jobs back from
MLflow (a remote launcher's jobs never return here), prints the table, logs it, ends the parent run and sets the exit
status. An interrupted sweep's parent is ended KILLED by the command's interrupt path (`cli.run_hydra`).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from hydra.core.utils import JobReturn
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from pipeline import exits
from pipeline.answer import results
from pipeline.answer.code import export_winner
from pipeline.config.identity import parse_override, varying_keys
from pipeline.config.plan import checked_job, expand_jobs
from pipeline.jobs import runner, task
from pipeline.jobs.context import COMMAND, SweepContext
from pipeline.records import RunKind, RunState, Status
from pipeline.render import runs_table
from pipeline.render.compact import compact_table
from pipeline.render.rows import Criteria, Row, comparison_rows
from pipeline.render.table import format_table
from pipeline.summaries import RecordedJob
from pipeline.tracking import runs
from pipeline.tracking.store import Tracker


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class SweepCallback(Callback):
    def __init__(self) -> None:
        self.tracker: Tracker | None = None
        self.context: SweepContext | None = None
        self.done = 0
        self.total = 0
        self.started = 0.0
        self.warm = True  # the fork server is ready, or not this process's to wait for

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        with exits.guard_stores(exits.store_uris(config)):
            self._start(config)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        with exits.guard_stores(exits.store_uris(config)):
            self._end(config)

    def _start(self, config: DictConfig) -> None:
        sweep_id = time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
        overrides = list(config.hydra.overrides.task)
        jobs = expand_jobs(overrides, multirun=True)
        self.total = len(jobs) - COMMAND.left_out  # the precheck named those it left out
        COMMAND.left_out = 0
        self.started = time.time()
        self.tracker = Tracker(config.tracking.uri, config.tracking.experiment, config.tracking.artifact_root)
        task.clean_up(self.tracker)
        shown = " ".join(o for o in overrides if parse_override(o)[0] != "repeat")
        tags = {runs.SWEEP: sweep_id, runs.KIND: RunKind.SWEEP, "overrides": shown, runs.STATUS: Status.RUNNING}
        parent_id = runs.open_parent(self.tracker, f"sweep {sweep_id}", tags)
        self.tracker.params(parent_id, {"overrides": shown, "jobs": self.total})
        self.context = SweepContext(sweep_id, parent_id, tuple(varying_keys(jobs)))
        self.context.start()
        print(f"[sweep] {sweep_id}: {self.total} jobs, MLflow parent run {parent_id}", flush=True)
        self.warm = "BasicLauncher" not in str(OmegaConf.select(config, "hydra.launcher._target_"))

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Before the first job's task, once Hydra has composed and saved its config (a second or two, spent beside
        the fork server's imports): wait for the fork server, started with the command, so that the job's spawn is a
        fork. Jobs a launcher runs in other processes start their own."""
        if not self.warm:
            self.warm = True
            runner.warm_up(config.launcher.kind)

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        if self.context is None or checked_job(config) is None:  # left out of a world-size sweep: no job ran
            return
        self.done += 1
        elapsed = time.time() - self.started
        eta = elapsed / self.done * (self.total - self.done) if self.total >= self.done else 0.0
        print(f"[sweep] {self.done}/{self.total} jobs done | elapsed {_clock(elapsed)} | ETA {_clock(eta)}", flush=True)

    def _end(self, config: DictConfig) -> None:
        if self.tracker is None or self.context is None:
            return
        parent_id = self.context.parent_run_id
        jobs = runs.read_jobs(self.tracker, parent_id)
        criteria = Criteria.of(config)
        rows = comparison_rows(jobs, criteria)
        runs_table.tag_runs(self.tracker, parent_id, rows, criteria)  # each run's rank and notes; the winner's
        winner, script = export_winner(self.tracker, rows)
        answer = results.sweep_answer(self.tracker, rows, jobs, criteria.confidence)
        below = [*pairs_lines(rows, jobs), *self._answer(rows, answer), *winner]
        table = "\n".join([format_table(rows, criteria), *below])  # in full: what MLflow and `wide=true` hold
        if script is not None:
            self.tracker.artifact_text(parent_id, script.path.name, script.text)
        code, line = exits.jobs_exit_code((j.status, j.summary.fit) for j in jobs)
        baseline = next((r for r in rows if r.config_id == jobs[0].config_id), None) if jobs else None
        shown = compact_table(rows, criteria, baseline, "the sweep's first config")
        print(table if config.wide else "\n".join([shown, *below]), flush=True)
        print(f"[sweep] {line}", flush=True)
        self.tracker.artifact_text(parent_id, "summary.md", table + "\n")
        ok = sum(1 for j in jobs if j.status is Status.OK)
        self.tracker.metrics(parent_id, {"jobs_ok": ok, "jobs_total": len(jobs), **claim_metrics(answer)})
        if answer.config is not None:
            self.tracker.tags(parent_id, {runs.CLAIM: answer.claim})
        self.tracker.tags(parent_id, {runs.STATUS: Status.OK if code == exits.OK else Status.FAILED, runs.NOTE: line})
        self.tracker.end(parent_id, RunState.FINISHED)
        exits.ExitCode.set(code, line)
        SweepContext.clear()
        self.context = None

    @staticmethod
    def _answer(rows: list[Row], answer: results.Answer) -> list[str]:
        """The sweep's answer in one line, as its report and `pipeline.sweep` give it (a tie's too), and, where the
        configs were ranked, its speed-up over the baseline or why none is claimed."""
        ranked = any(r.judgement is not None for r in rows)
        return [answer.text, *([f"  {answer.claim}"] if ranked and answer.config else [])]


def claim_metrics(answer: results.Answer) -> dict[str, float]:
    """The claimed speed-up as the parent run's metrics, named as a study's: none where none is claimed."""
    if answer.speedup is None:
        return {}
    return {"speedup_vs_baseline": answer.speedup, "speedup_low": answer.low, "speedup_high": answer.high}


def pairs_lines(rows: list[Row], jobs: list[RecordedJob]) -> list[str]:
    """How many paired rounds each rank stands on, where some round gave no pair (a run failed, was killed, or ran
    over its cap): `tiny 1x4 is ranked from 3 of 4 rounds ...`; one line for all when every round paired."""
    rounds = sorted({j.round for j in jobs if j.round is not None})
    reference = next((r for r in rows if r.judgement is not None and r.comparison is None), None)
    if len(rounds) < 2 or reference is None:
        return []
    lines = []
    for row in rows:
        if row is reference or not row.fit.feasible:
            continue
        pairs = row.rounds.keys() & reference.rounds.keys()
        if len(pairs) < len(rounds):
            missing = ", ".join(
                f"{who.name} #{n}" for n in rounds if n not in pairs for who in (row, reference) if n not in who.rounds
            )
            ranked = f"ranked from {len(pairs)}" if row.judgement else f"not ranked: {len(pairs)}"
            lines.append(
                f"[sweep] {row.name} is {ranked} of {len(rounds)} paired rounds with {reference.name} (no figure "
                f"from {missing})"
            )
    return lines or [f"[sweep] every rank is from {len(rounds)} paired rounds"]
