"""Deciding one trial and telling Optuna: skipped by prediction, or measured by a job (stopped early when over the
cap or slow), then told with its value and its memory constraint.

How a trial is stored (read right by optuna-dashboard and `optuna best-trial`, README "Finding the fastest config"):
- measured under the cap: COMPLETE with its step time, constraint (peak minus cap, GiB) <= 0;
- over the cap, measured or predicted, or out of memory: COMPLETE with its step time (measured, or the probes'
  estimate) and a positive constraint, so the dashboard plots it and marks it infeasible; PRUNED where no step time
  is known at all;
- stopped as slow: PRUNED, its constraint where a peak was measured;
- a job that failed (the installed stack refused the config): FAIL with status `failed`, decided once;
- a proposal of a config already decided: told as that decision was, labelled `repeat_of` with its number.
The constraint is written both as Optuna 5 writes it (`constraints:memory_gib`) and in the list form
optuna-dashboard reads (`constraints`). The baseline is never skipped nor pruned, and runs uncapped.
"""

from __future__ import annotations

import dataclasses
import statistics

import optuna
from optuna.trial import FrozenTrial, TrialState

from pipeline import knobs as speed_knobs
from pipeline.adapters import optuna_storage
from pipeline.jobs import task
from pipeline.measure.summary import steady_steps
from pipeline.records import GIB, RunKind, Status, StopRule
from pipeline.search import _trials as trials
from pipeline.search import _workers as workers
from pipeline.search._formula import Knobs
from pipeline.search._opening import StudyContext
from pipeline.search._space import Candidate
from pipeline.search._trials import Role
from pipeline.summaries import Interval
from pipeline.tracking import figures, runs

MEASURED_STATUSES = (Status.OK, Status.OVER_CAP, Status.OOM, Status.PRUNED)  # the job answered the question


class TrialTeller:
    """Decides the trials of one study, one at a time, and tells Optuna each outcome."""

    def __init__(self, ctx: StudyContext) -> None:
        self.ctx = ctx

    def evaluate(self, trial: optuna.Trial, candidate: Candidate) -> None:
        """Decide one candidate: skipped when predicted over the cap by more than the predictor's error so far
        (`trials.skip_margin`; never the baseline), else measured."""
        ctx = self.ctx
        knobs = ctx.knobs(candidate)
        ctx.predictor.measured = self._measurements()
        predicted = ctx.predictor.predict(knobs)
        trials.write(
            trial,
            {
                trials.OVERRIDES: candidate.overrides,
                trials.WORLD_SIZE: int(candidate.config.world_size),
                trials.PREDICTED: _shown(predicted / GIB, 3),
                trials.KNOBS: {"micro": knobs.micro, "dtype": knobs.dtype, "checkpointing": knobs.checkpointing},
                trials.LONGEST: self._longest(candidate),
            },
        )
        run_name = f"trial {trial.number}: {candidate.label}"
        tags = {runs.STUDY: ctx.name, "trial": trial.number, runs.PREDICTED: f"{predicted / GIB:.3f}"}
        baseline = trial.user_attrs.get(trials.ROLE) == Role.BASELINE
        margin = trials.skip_margin(ctx.study, ctx.cfg.optimize.skip_margin)
        if trials.skipped(predicted, ctx.cap, margin, ctx.slack_bytes(candidate)) and not baseline:
            self._skip(trial, candidate, run_name, tags, predicted)
        else:
            self._measure(trial, candidate, run_name, tags, baseline)

    def _skip(self, trial, candidate: Candidate, run_name: str, tags: dict, predicted: float) -> None:
        """Decided without a job: an infeasible trial, its value the step time the probes predict."""
        reason = f"predicted {predicted / GIB:.2f} GiB > cap {self.ctx.cap / GIB:.2f} GiB"
        spec = task.job_spec(candidate.job, name=candidate.label)
        run_id = runs.log_skip(self.ctx.tracker, self.ctx.parent, run_name, spec, reason, predicted, tags)
        trials.write(trial, {trials.STATUS: Status.SKIPPED, trials.NOTE: reason, trials.RUN_ID: run_id})
        trials.write(trial, {trials.FEASIBLE: False})
        self.constrain(trial, (predicted - self.ctx.cap) / GIB)
        self._tell_infeasible(trial, _shown(self._predicted_step(candidate), 4))

    def _longest(self, candidate: Candidate) -> dict | None:
        """What its fit is judged on: the run's longest micro-batch, trained at step one of its job (`first`), or,
        where every micro-batch of the run is alike, any of them."""
        batches = self.ctx.batches
        if batches is None:
            return None
        batch = batches.longest(candidate.config)
        first = batches.first(candidate.config) is not None
        return {"tokens": batch.tokens, "real": batch.real, "step": batch.step, "first": first}

    def _predicted_step(self, candidate: Candidate) -> float | None:
        split = candidate.job.split
        checkpointing = speed_knobs.recomputes(candidate.config)
        return self.ctx.calibration.step_estimate(split.micro, split.accumulation, checkpointing)

    def _tell_infeasible(self, trial: optuna.Trial, value: float | None) -> None:
        """Over the cap, measured or predicted: COMPLETE with its step time and a positive constraint, so that
        optuna-dashboard shows it as infeasible and plots it; without any step time, PRUNED."""
        if value is None:
            self.ctx.study.tell(trial, state=TrialState.PRUNED)
        else:
            trials.write(trial, {trials.VALUE_NOTE: "infeasible: over the cap"})
            self.ctx.study.tell(trial, value)

    def _stop_rule(self, baseline: bool) -> StopRule:
        """Over the cap always stops a trial, slowness against the best so far any; the baseline runs uncapped."""
        if baseline:
            return StopRule()
        o = self.ctx.cfg.optimize
        best = trials.best(self.ctx.study, o.max_loss_dev)
        if best is None:
            return StopRule(cap_bytes=self.ctx.cap)
        return StopRule(self.ctx.cap, o.prune_steps, best.median * o.prune_factor)

    def _measure(self, trial, candidate: Candidate, run_name: str, tags: dict, baseline: bool) -> None:
        ctx = self.ctx
        spec = task.job_spec(candidate.job, name=candidate.label, stop=self._stop_rule(baseline), uncapped=baseline)
        if ctx.batches is not None:  # the run's longest micro-batch at step one: a config over the cap stops there
            spec = dataclasses.replace(spec, first_batch=ctx.batches.first(candidate.config))
        try:
            outcome = task.run(
                candidate.job, spec=spec, kind=RunKind.TRIAL, parent_id=ctx.parent, tags=tags, run_name=run_name
            )
        except task.JobInterrupted as stop:
            trials.write(trial, {trials.GPU_SECONDS: stop.seconds})  # not decided (no status), but it ran
            raise
        summary, result = outcome.summary, outcome.result
        warmup = candidate.config.measure.warmup_steps
        steady = [s.step_time_s for s in steady_steps(result, warmup)]
        early = [s.step_time_s for s in result.steps if s.step <= warmup and s.steady_candidate]
        left_out = [s.step for s in result.steps if s.step <= warmup and not s.steady_candidate]
        trials.write(
            trial,
            {
                trials.STATUS: result.status,
                trials.GPU_SECONDS: _shown(summary.wall_s, 0),
                trials.COMPILE_S: _shown(result.compile_s, 1),
                trials.PEAK: _shown(summary.peak_gib, 3),
                trials.MEDIAN: _shown(summary.median, 4),
                trials.CI: _interval(summary.step_time.ci) if summary.step_time else None,
                trials.TOKENS: _shown(summary.per_second(summary.tokens_per_step), 0),
                trials.STEP_TIMES: steady,
                trials.WARMUP_TIMES: early,
                trials.WARMUP_LEFT_OUT: left_out,
                trials.LOSSES: [step.loss for step in result.steps],
                trials.RUN_ID: outcome.run_id,
                trials.NOTE: result.stopped or result.error or "",
                trials.SFT: result.sft_kwargs,
                trials.BUSY: _shown(summary.gpu_busy, 3),
                trials.PROFILE: _profile(result.profile),
            },
        )
        ran = [s.step_time_s - s.compile_s for s in result.steps if s.step > 1]
        value = summary.median if summary.median is not None else (statistics.median(ran) if ran else None)
        value = value if ran else self._predicted_step(candidate)
        self._tell(trial, result.status, summary.peak_gib, _shown(value, 4))  # as the console prints it

    def _tell(self, trial: optuna.Trial, status: Status, peak: float | None, value: float | None) -> None:
        """COMPLETE with its step time when it ran under the cap, or over it (infeasible: a positive constraint);
        PRUNED when slow; FAIL when the job failed (or was stopped by the user). The constraint (peak minus cap)
        wherever a peak was measured. `value`: its steady median, or the median of the steps it ran before it was
        stopped (after the first), or the probes' estimate when it stopped in its first step."""
        if status not in MEASURED_STATUSES:
            self.ctx.study.tell(trial, state=TrialState.FAIL)
            return
        over = (peak * GIB - self.ctx.cap) / GIB if peak else 0.0
        if status in (Status.OVER_CAP, Status.OOM):
            over = max(over, 1e-3)
        if status is not Status.PRUNED or peak:
            self.constrain(trial, over)
        trials.write(trial, {trials.FEASIBLE: over <= 0} if peak or over > 0 else {})  # no peak: not known
        if over > 0:
            self._tell_infeasible(trial, value)
        elif status is Status.OK and value is not None:
            self.ctx.study.tell(trial, value)
        else:
            self.ctx.study.tell(trial, state=TrialState.PRUNED)

    def constrain(self, trial: optuna.Trial, over_gib: float) -> None:
        """Peak minus cap, as Optuna 5 stores a constraint and as optuna-dashboard reads one."""
        trial.set_constraint("memory_gib", over_gib)
        optuna_storage.set_system_attr(self.ctx.study, trial, "constraints", [over_gib])

    def _measurements(self) -> list[tuple[Knobs, float]]:
        """Peaks measured so far, by any worker: the probes and every trial that ran a full step."""
        ctx = self.ctx
        found = list(ctx.calibration.probes)
        for record in trials.records(ctx.study):
            candidate = ctx.candidate(record.config_id)
            if record.status in trials.PEAK_MEASURED and record.peak_gib and candidate is not None:
                found.append((ctx.knobs(candidate), record.peak_gib * GIB))
        return found

    def repeat_of(self, trial: optuna.Trial, candidate: Candidate | None, values) -> None:
        """A proposal of a config already decided: told as its decision was (state, value, constraint), labelled
        `repeat_of` with that trial's number, and never measured again; one another worker is measuring (or an
        invalid combination) is FAIL, labelled the same way."""
        study = self.ctx.study
        decided: FrozenTrial | None = workers.decided_configs(study).get(candidate.config_id) if candidate else None
        trial.set_user_attr(trials.REPEAT_OF, decided.number if decided else " ".join(f"{k}={v}" for k, v in values))
        if decided is None:
            study.tell(trial, state=TrialState.FAIL)
            return
        for name, value in decided.system_attrs.items():
            if name.startswith("constraints"):
                optuna_storage.set_system_attr(study, trial, name, value)
        if decided.state is TrialState.COMPLETE:
            study.tell(trial, decided.value)
        else:
            study.tell(trial, state=decided.state)


def _profile(profile: dict | None) -> dict | None:
    """What the answer reads of a profiled job: host and device time and launches per step."""
    if not profile:
        return None
    return {
        k: _shown(profile[k], 3) for k in ("host_ms", "device_ms", "launches_per_step") if profile.get(k) is not None
    }


def _shown(value: float | None, decimals: int) -> float | None:
    """A figure the study keeps (and optuna-dashboard shows) as the console prints it (`tracking.figures.shown`)."""
    return None if value is None else figures.shown(value, decimals)


def _interval(ci: Interval) -> Interval:
    """A trial's step interval as the console prints it."""
    return Interval(figures.shown(ci.low, 4), figures.shown(ci.high, 4), round(ci.level, 4))
