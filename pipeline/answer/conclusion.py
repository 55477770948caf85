"""The study's end, by the command that ran it: its answer computed from what the study holds (`answer.study`),
finished or stopped; then printed, its rank and time ratio written onto every run, and logged on the study's MLflow
run (answer.md, summary metrics, the reproduce command and the claim as tags). The study's loop (`search.study`)
ends before it, so the search never reads its own answer."""

from __future__ import annotations

import math

from pipeline.answer.gains import KNOB_ESTIMATE
from pipeline.answer.slack import AnswerSlack
from pipeline.answer.study import StudyAnswer, StudyFacts, decide
from pipeline.config.choices import ConfirmMode
from pipeline.config.schema import typed
from pipeline.records import RunState, Status
from pipeline.render import runs_table
from pipeline.render.rows import Criteria
from pipeline.search import (
    ANSWER,
    CALIBRATION,
    Decided,
    StudyContext,
    StudyDriver,
    TrialRecord,
    coverage,
    decided_configs,
)
from pipeline.tracking import runs
from pipeline.tracking.store import Tracker


def answered(driver: StudyDriver) -> StudyAnswer:
    """The study started and run to its end, then its answer: also where its loop stopped (interrupted, or a job's
    failure raised), so that what it decided is said and logged before the stop goes on."""
    driver.start()
    finished = False
    try:
        driver.run()
        finished = True
    finally:
        answer = conclude(driver.ctx, finished)
    return answer


def conclude(ctx: StudyContext, finished: bool) -> StudyAnswer:
    """The answer of what the study holds, printed and logged; a finished study's best trial marked for
    optuna-dashboard and its runs ranked against the answer."""
    decided = Decided.of(ctx.study, ctx.cfg.optimize.max_loss_dev)
    answer = decide(decided, facts(ctx, decided.best, finished))
    if finished and answer.best is not None:
        ctx.study.set_user_attr(ANSWER, answer.best.number)  # what optuna-dashboard shows as best
    print(answer.text if ctx.cfg.wide else answer.compact, flush=True)  # answer.md: the full text
    if finished:  # the runs table's rank and time ratio of every run, against the answer
        best, base = (r.config_id if r else None for r in (answer.best, answer.baseline))
        runs_table.tag_study(ctx.tracker, ctx.parent, Criteria.of(ctx.cfg), best, base)
    log_answer(ctx.tracker, ctx.parent, answer, finished)
    return answer


def facts(ctx: StudyContext, best: TrialRecord | None, finished: bool) -> StudyFacts:
    """What the answer says of the study beside its trials: its command, cap, settings and the space's coverage
    (what the prior said of the configs not measured, against `best`)."""
    o = ctx.cfg.optimize
    covered = None
    if CALIBRATION in ctx.study.user_attrs:
        covered = coverage(ctx, set(decided_configs(ctx.study)), best.config_id if best else None)
    return StudyFacts(
        ctx.name,
        ctx.command,
        ctx.cap,
        ctx.cfg.measure.confidence,
        baseline=bool(o.baseline),
        confirm_off=o.confirm == ConfirmMode.NEVER,
        stopped=not finished,
        coverage=covered,
        left_out=tuple(ctx.left_out),
        run=ctx.batches.text(typed(ctx.cfg)) if ctx.batches else "",
        busy_threshold=ctx.cfg.measure.busy_threshold,
        slack=answer_slack(ctx, best),
    )


def answer_slack(ctx: StudyContext, best: TrialRecord | None) -> AnswerSlack | None:
    """What a process of the answer may keep unused over its trial's peak (`answer.slack`), on the run's longest
    micro-batch of it and beside that peak; None on the CPU, which has no caching allocator."""
    candidate = ctx.candidate(best.config_id) if best is not None else None
    found = ctx.slack(candidate) if candidate is not None else None
    if found is None:
        return None
    return AnswerSlack.of(found[0], found[1], ctx.predictor.shape.vocab, best.peak_gib or 0.0)


CLAIM_METRICS = ("speedup_vs_baseline", "speedup_low", "speedup_high")


def withdrawn(before: dict[str, float], now: dict[str, float]) -> dict[str, float]:
    """The claim's figures an earlier answer of this study logged and this one does not give (a resumed study whose
    round no longer decides, or whose answer moved other knobs): NaN, MLflow's figure of none, so that the run, and
    the card and `pipeline.study` read from it, never keep a figure the answer no longer says."""
    stale = [k for k in before if (k in CLAIM_METRICS or k.startswith(KNOB_ESTIMATE)) and k not in now]
    return dict.fromkeys(stale, math.nan)


def log_answer(tracker: Tracker, parent: str, answer: StudyAnswer, finished: bool) -> None:
    """The answer on the study's MLflow run: answer.md, summary metrics, the reproduce command as a tag."""
    tracker.artifact_text(parent, "answer.md", answer.text + "\n")
    metrics = {"trials_decided": answer.decided, "gpu_seconds": answer.gpu_seconds}
    if answer.best is not None:
        metrics.update(best_step_time_median_s=answer.best.median, best_peak_gib=answer.best.peak_gib)
        tracker.tags(parent, {runs.ANSWER_COMMAND: answer.command, runs.BEST_CONFIG: answer.best.config_id})
    if answer.script is not None:
        tracker.artifact_text(parent, answer.script.path.name, answer.script.text)
        tracker.tags(parent, {"answer_script": str(answer.script.path)})
    if answer.speedup is not None:
        c = answer.speedup.comparison
        metrics.update(speedup_vs_baseline=c.speedup, speedup_low=c.low, speedup_high=c.high)
    if answer.baseline is not None:
        tracker.tags(parent, {runs.BASELINE: answer.baseline.label, runs.BASELINE_CONFIG: answer.baseline.config_id})
    if answer.claim is not None:
        tracker.tags(parent, {runs.CLAIM: "\n".join(line.strip() for line in answer.claim.lines())})
    metrics.update(answer.gains.metrics())
    if answer.best is not None:
        metrics.update(best_world_size=answer.best.world_size)
    if answer.scaling is not None:
        c, (efficiency, low, high) = answer.scaling.comparison, answer.scaling.efficiency
        metrics.update(speedup_vs_one_device=c.speedup, scaling_efficiency=efficiency)
        metrics.update(scaling_efficiency_low=low, scaling_efficiency_high=high)
    if answer.predictor_errors:
        errors = answer.predictor_errors
        metrics.update(predictor_error_max=max(errors), predictor_error_mean=sum(errors) / len(errors))
    tracker.metrics(parent, {**withdrawn(tracker.run(parent).data.metrics, metrics), **metrics})
    tracker.tags(parent, {runs.STATUS: Status.OK if finished else Status.KILLED})
    tracker.end(parent, RunState.FINISHED if finished else RunState.KILLED)
