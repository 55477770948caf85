"""How jobs, sweeps and studies are laid out in MLflow: the tags and params they carry, written in one place and read
back into records.

A job's run is opened before its process starts (so it is visible, and ended truthfully whatever happens), then
written once, when its result is in: params, metrics, per-step series, tags, the result as an artifact, its end
status.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable
from pathlib import Path

from omegaconf import OmegaConf

from pipeline.liveness import Owner
from pipeline.records import GIB, Fit, JobResult, JobSpec, RunKind, RunState, Status
from pipeline.summaries import JobSummary, RecordedJob
from pipeline.tracking import figures
from pipeline.tracking.store import HEARTBEAT_TAG, OWNER_TAG, Tracker, flatten

STATUS = "status"
KIND = "kind"
SWEEP = "sweep_id"
STUDY = "study"
CONFIG_ID = "config_id"
REPEAT = "repeat"
ROUND = "round"  # a confirmation run's round
BEST_CONFIG = "best_config_id"  # on a study's parent run: the config id of its answer
ANSWER_COMMAND = "answer"  # on a study's parent run: the command line that runs its answer
FIT = "fit"
FIT_BEFORE = "verdict"  # the same tag in stores written before 2026-12-01
NAME = "display_name"
PREDICTED = "predicted_gib"
OVERRIDES = "overrides"  # a job's own overrides (its command line in a sweep); a sweep's or study's whole command
BASELINE = "baseline"  # a study's run: the config its answer's speed-up is over
BASELINE_CONFIG = "baseline_config_id"  # ... and its config id: every config's loss deviation is from its losses
CLAIM = "claim"  # a study's run: the answer's speed-up over the baseline, or why there is none
NOTE = "note"  # what the runs table shows: why a run stopped, and its config's notes on its steps once ranked
STALL_NOTE = "stall_note"  # the steady steps left out as stalls (`jobs.stall`), and the limit they were over
REASON = "reason"  # why it stopped alone, where NOTE says more (`render.runs_table`)
RANK, TIME_VS = "rank", "time_vs_fastest"  # a ranked run's config: its rank, its time over the fastest's
PARENT = "mlflow.parentRunId"
GROUP = "group"  # the sweep or study a run belongs to, as its parent run is named: what the MLflow view groups by
SINGLE_JOBS = "single jobs"  # the group of jobs run on their own, outside any sweep or study
SUBGROUPS = {RunKind.PROBE: "probes", RunKind.CONFIRM: "confirm"}  # a study's runs apart from its trials
OVER_CAP = "over cap"  # a job or trial that did not fit, measured or predicted: apart too
ORDER = "order"  # what the MLflow view sorts by: newest sweep or study first, its own run first in its group
POSITION = {"parent": 0, RunKind.JOB: 1, RunKind.TRIAL: 1, RunKind.CONFIRM: 2, OVER_CAP: 3, RunKind.PROBE: 4}
LATEST_MS = 10**13 - 1  # start times are counted down from here, so that an ascending sort puts the newest first


ABANDONED = {STATUS: Status.KILLED, NOTE: "interrupted: the process recording it ended first"}


class FilterValueError(ValueError):
    """A value that cannot go into an MLflow filter string."""


def quoted(value: object) -> str:
    """`value` as a quoted literal of an MLflow filter string; quotes and backslashes are refused, since MLflow's
    filter parser has no escape for them."""
    text = str(value)
    if any(c in text for c in "'\"\\"):
        raise FilterValueError(f"'{text}' contains a quote or backslash")
    return f"'{text}'"


def group_of(tags: dict[str, object], over_cap: bool = False) -> str:
    """The group of a run with these tags: its sweep's or study's parent run name (`sweep <id>`, `study <name>`), or
    SINGLE_JOBS; a study's probes and confirmation runs (shorter jobs, not contenders) and whatever did not fit
    (`over_cap`) in groups of their own beside it, so that the group row's minimum of each figure is one over
    comparable runs. The role comes first (`confirm · <study>`): the UI cuts a long name at its end."""
    role = OVER_CAP if over_cap else SUBGROUPS.get(str(tags.get(KIND)))
    if tags.get(SWEEP):
        name = f"sweep {tags[SWEEP]}"
    elif tags.get(STUDY):
        name = f"study {tags[STUDY]}" if role is None else str(tags[STUDY])
    else:
        return SINGLE_JOBS
    return name if role is None else f"{role} · {name}"


def order_of(since_ms: int, tags: dict[str, object], over_cap: bool = False) -> str:
    """The `order` tag of a run with these tags in a group whose sweep or study started at `since_ms`: groups newest
    first, and in a sweep's or study's groups its own run first (its answer), then its jobs or trials, confirmation
    runs, what did not fit, probes."""
    kind = str(tags.get(KIND))
    position = POSITION["parent"] if kind in (RunKind.SWEEP, RunKind.STUDY) else POSITION.get(kind, 1)
    return f"{LATEST_MS - since_ms:013d}.{POSITION[OVER_CAP] if over_cap else position}"


def placed(tracker: Tracker, tags: dict[str, object], parent_id: str | None, over_cap: bool = False) -> dict:
    """The tags that place a run in the MLflow view: its `group` and its `order` (by its parent's start: one read)."""
    since = tracker.run(parent_id).info.start_time if parent_id else int(time.time() * 1000)
    return {GROUP: group_of(tags, over_cap), ORDER: order_of(since, tags, over_cap)}


def open_parent(tracker: Tracker, name: str, tags: dict[str, object]) -> str:
    """A sweep's or study's own run, placed first in its group."""
    start_ms = int(time.time() * 1000)
    placing = {GROUP: group_of(tags), ORDER: order_of(start_ms, tags)}
    return tracker.start(name, tags={**tags, **placing}, abandon_tags=ABANDONED, start_ms=start_ms)


def start_job(
    tracker: Tracker,
    spec: JobSpec,
    kind: RunKind,
    parent_id: str | None,
    repeat: int = 0,
    tags: dict[str, object] | None = None,
    run_name: str | None = None,
) -> str:
    """Open a job's run (status running), with its config as params and as config.yaml."""
    run_tags = {
        STATUS: Status.RUNNING,
        KIND: kind,
        CONFIG_ID: spec.config_id,
        NAME: spec.name,
        REPEAT: repeat,
        "model": spec.config.model.name,
        "split": f"{spec.micro}x{spec.accumulation}",
        **(tags or {}),
    }
    run_tags.update(placed(tracker, run_tags, parent_id))
    run_id = tracker.start(run_name or spec.name, tags=run_tags, parent_id=parent_id, abandon_tags=ABANDONED)
    config = dataclasses.asdict(spec.config)
    tracker.params(run_id, {**flatten(config), CONFIG_ID: spec.config_id})
    tracker.artifact_text(run_id, "config.yaml", OmegaConf.to_yaml(OmegaConf.create(config)))
    return run_id


def end_job(
    tracker: Tracker,
    run_id: str,
    spec: JobSpec,
    result: JobResult,
    summary: JobSummary,
    steady: set[int],
    files: dict[str, list[Path]],
) -> None:
    """Write a finished job in one go (`steady`: the step numbers its statistics use; `files`: more artifacts, by
    the folder they go in, '' for the run's own) and end its run with the status its result says."""
    run = tracker.run(run_id)
    apart = run.data.tags.get(KIND) == RunKind.CONFIRM
    tracker.params(run_id, figures.derived_params(spec, result))
    tracker.metrics(run_id, figures.metrics(summary, result.profile, apart), figures.series(result, steady))
    for folder, paths in files.items():
        for path in paths:
            tracker.artifact_file(run_id, path, folder=folder or None)
    tags: dict[str, object] = {STATUS: result.status, FIT: summary.fit}
    tags[figures.DESCRIPTION] = figures.description(spec.name, summary)
    if summary.fit in (Fit.OVER_CAP, Fit.OOM):  # apart from the runs that fit: their group row shows no figure of it
        tags.update(placed(tracker, run.data.tags, run.data.tags.get(PARENT), over_cap=True))
    note = result.stopped or result.error
    if note:
        tags[NOTE] = note[:500]
    if result.error:
        tags["error"] = result.error[:5000]
    if result.compile_note:
        tags["compile_note"] = result.compile_note[:500]
    if result.host:
        tags["host"] = figures.host_text(result.host)
    if result.stalled_steps:
        tags[STALL_NOTE] = figures.stall_note(result)[:500]
    if result.placement and result.placement.emulated:
        tags["memory_note"] = (
            f"memory emulated as {result.placement.emulated}, speed measured on {result.placement.device_name}"
        )
    tracker.tags(run_id, tags)
    tracker.artifact_json(run_id, "result.json", dataclasses.asdict(result))
    tracker.end(run_id, result.status.run_state)


def end_interrupted(tracker: Tracker, run_id: str, reason: str = "interrupted") -> None:
    tracker.tags(run_id, {STATUS: Status.KILLED, NOTE: reason})
    tracker.end(run_id, RunState.KILLED)


def fail(tracker: Tracker, run_id: str, reason: str) -> None:
    """End a run FAILED with its reason."""
    tracker.tags(run_id, {STATUS: Status.FAILED, "error": reason, NOTE: reason[:500]})
    tracker.end(run_id, RunState.FAILED)


def log_skip(
    tracker: Tracker,
    parent_id: str,
    run_name: str,
    spec: JobSpec,
    reason: str,
    predicted_bytes: float,
    tags: dict[str, object],
) -> str:
    """A study's trial decided without a job (predicted over the cap): a finished run that says so."""
    run_id = start_job(tracker, spec, RunKind.TRIAL, parent_id, tags={**tags, PREDICTED: predicted_bytes / GIB})
    summary = JobSummary(status=Status.SKIPPED, fit=Fit.PREDICTED_OVER_CAP)
    tracker.metrics(run_id, {**figures.metrics(summary), "predicted_gib": figures.shown(predicted_bytes / GIB, 3)})
    placing = placed(tracker, {**tags, KIND: RunKind.TRIAL}, parent_id, over_cap=True)
    tracker.tags(run_id, {STATUS: Status.SKIPPED, FIT: Fit.PREDICTED_OVER_CAP, NOTE: reason, **placing})
    tracker.end(run_id, RunState.FINISHED)
    return run_id


def end_orphans(tracker: Tracker, dead: Iterable[str] = ()) -> int:
    """End the RUNNING runs of this experiment whose owner is gone (killed outright: no handler ran), with the
    reason; return how many. A sweep or study is ended KILLED, a job FAILED. Runs of live owners are left alone;
    `dead` names owners already known to be gone (their study trials were found stale), whatever their runs'
    heartbeats say."""
    dead = set(dead)
    ended = 0
    for run in tracker.search(f"attributes.status = {quoted(RunState.RUNNING)}"):
        tags = run.data.tags
        owner = Owner.parse(tags.get(OWNER_TAG, ""))
        heartbeat = float(tags[HEARTBEAT_TAG]) if HEARTBEAT_TAG in tags else None
        if owner is None or (str(owner) not in dead and owner.alive(heartbeat)):
            continue
        reason = f"its process ({owner}) ended without closing it"
        if tags.get(KIND) in (RunKind.SWEEP, RunKind.STUDY):
            end_interrupted(tracker, run.info.run_id, reason)
        else:
            fail(tracker, run.info.run_id, reason)
        ended += 1
    return ended


def find_parents(tracker: Tracker, kind: RunKind, name: str | None = None, limit: int | None = None) -> list:
    """The parent runs of sweeps or studies (`kind`), of the one named `name` (sweep id, study name) if given,
    newest first."""
    query = f"tags.{KIND} = {quoted(kind)}"
    if name:
        query += f" and tags.{SWEEP if kind is RunKind.SWEEP else STUDY} = {quoted(name)}"
    return tracker.search(query, newest_first=True, limit=limit)


def open_study(tracker: Tracker, name: str, command: str, params: dict[str, object]) -> str:
    """The study's parent run: reopened when the study resumes, else created with its settings as params."""
    found = find_parents(tracker, RunKind.STUDY, name, limit=1)
    if found:
        return tracker.reopen(found[0].info.run_id, ABANDONED, {STATUS: Status.RUNNING}, drop=(NOTE,))
    tags = {KIND: RunKind.STUDY, STUDY: name, STATUS: Status.RUNNING, "overrides": command}
    run_id = open_parent(tracker, group_of(tags), tags)  # named as its group: "study <name>"
    tracker.params(run_id, params)
    return run_id


MEASURED_KINDS = (RunKind.JOB, RunKind.TRIAL, RunKind.CONFIRM)


def paired_round(kind: RunKind, tags: dict[str, str]) -> int | None:
    """The paired round a run belongs to: a sweep job's repeat, a confirmation run's round; a trial stands alone."""
    if kind is RunKind.JOB:
        return int(tags.get(REPEAT, 0))
    if kind is RunKind.CONFIRM and ROUND in tags:
        return int(tags[ROUND])
    return None


def read_jobs(tracker: Tracker, parent_id: str, kinds: tuple[RunKind, ...] = MEASURED_KINDS) -> list:
    """The runs nested under a sweep or study, as RecordedJob, oldest first (probes left out by default)."""
    jobs = []
    for run in tracker.search(f"tags.mlflow.parentRunId = {quoted(parent_id)}"):
        tags, metrics = run.data.tags, figures.restored(run.data.metrics)
        kind = RunKind(tags.get(KIND, RunKind.JOB))
        if kind not in kinds:
            continue
        status = Status(tags.get(STATUS, Status.FAILED))
        if status is Status.RUNNING and run.info.status != RunState.RUNNING:
            status = Status.KILLED if run.info.status == RunState.KILLED else Status.FAILED
        fit_tag = tags.get(FIT) or tags.get(FIT_BEFORE)
        summary = JobSummary.from_metrics(status, Fit(fit_tag) if fit_tag else Fit.FAILED, metrics)
        jobs.append(
            RecordedJob(
                run_id=run.info.run_id,
                name=tags.get(NAME, run.info.run_name),
                config_id=tags.get(CONFIG_ID, run.info.run_id),
                repeat=int(tags.get(REPEAT, 0)),
                kind=kind,
                summary=summary,
                losses=tuple(value for _, value in tracker.history(run.info.run_id, "loss")),
                predicted_gib=float(tags[PREDICTED]) if PREDICTED in tags else None,
                note=tags.get(REASON, "" if TIME_VS in tags else tags.get(NOTE, "")),
                round=paired_round(kind, tags),
            )
        )
    return jobs
