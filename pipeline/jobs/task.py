"""One job: spec, process, record. The parent never imports torch: it opens the job's MLflow run, starts the child,
waits, summarises what the child returned (or, for a child that died, what it had written so far), and writes it
to MLflow in one go.

Inside a multirun the run is nested under the sweep's parent run and named after what varies across the sweep; both
come from the sweep context the sweep callback (`commands.sweep_callback`) puts in the environment.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import shlex
import shutil
import signal
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from pipeline import knobs
from pipeline.config.choices import CPU, LauncherKind
from pipeline.config.compose import gpu_profiles
from pipeline.config.identity import display_name
from pipeline.config.job import JobConfig
from pipeline.config.schema import Config
from pipeline.jobs import devicelock, joblog, preflight, ranks, runner, stall, workdirs
from pipeline.jobs.context import SweepContext, job_command, job_overrides
from pipeline.jobs.files import JOB_LOG, PROFILE_DIR
from pipeline.measure.summary import steady_steps, summarize_job
from pipeline.records import Fit, JobResult, JobSpec, RunKind, Status, StopRule
from pipeline.summaries import JobSummary
from pipeline.tracking import runs
from pipeline.tracking.figures import stall_note
from pipeline.tracking.store import Tracker


class JobInterrupted(KeyboardInterrupt):
    """A job stopped by an interrupt of this process (Ctrl-C, SIGTERM, a notebook's stop): its run is ended KILLED;
    `seconds` is how long its process had run."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"interrupted after {seconds:.0f} s")
        self.seconds = seconds


@dataclass(frozen=True)
class JobOutcome:
    run_id: str
    spec: JobSpec
    result: JobResult
    summary: JobSummary
    log_note: str = ""  # its log, for its console line: `312 library warnings in its job.log`, `its output in <path>`

    @property
    def status(self) -> Status:
        return self.result.status


def job_spec(job: JobConfig, name: str | None = None, stop: StopRule | None = None, uncapped: bool = False) -> JobSpec:
    """What the child needs, from the config as its check parsed it: the typed config, its identity, the split, the
    cap. `uncapped` lifts the cap from the device (a study's probes and its baseline measure what a config needs
    and how fast it runs); the peak is still judged against it."""
    config = job.config
    if name is None:
        context = SweepContext.current()
        varying = [(k, v) for k, v in job_overrides() if context and k in context.varying]
        name = display_name(config.model.name, config.batch.split, varying)
    compiled = any(knob.compiles(config.train) for knob in knobs.registry())
    env = compile_cache_env(compile_cache_folder(config.paths.root)) if compiled else {}
    stop = stop or StopRule()
    if compiled and stop.prune_after:  # judged once compiled and its CUDA graphs recorded: after its warm-up
        stop = dataclasses.replace(stop, prune_from=max(stop.prune_from, config.measure.warmup_steps))
    return JobSpec(
        config=config,
        config_id=job.config_id,
        name=name,
        micro=job.split.micro,
        accumulation=job.split.accumulation,
        cap_bytes=job.cap_bytes,
        cap_source=job.cap_source,
        gpu_profiles=gpu_profiles(),
        stop=stop,
        env=env,
        enforce_cap=not uncapped,
    )


def compile_cache_folder(root: str | Path) -> Path:
    """The compile cache every compiled job under `root` (`paths.root`: a store and what it ran) shares."""
    return Path(root) / "compile-cache"


def compile_cache_env(folder: Path) -> dict[str, str]:
    """One on-disk compile cache for every job of a sweep or study (Inductor's FX graphs and AOTAutograd artifacts,
    Triton's kernels): a later job with the same shapes loads what an earlier one compiled."""
    root = folder.resolve()
    return {"TORCHINDUCTOR_CACHE_DIR": str(root), "TRITON_CACHE_DIR": str(root / "triton")}


def run(
    job: JobConfig,
    *,
    spec: JobSpec | None = None,
    kind: RunKind = RunKind.JOB,
    parent_id: str | None = None,
    tags: dict[str, object] | None = None,
    run_name: str | None = None,
    keep: Callable[[JobOutcome], None] | None = None,
) -> JobOutcome:
    """Run one job in its own process and record it as one MLflow run (nested under `parent_id`, or the sweep's);
    `keep` records it elsewhere too, before the line that says how it ended. The job's device is held for it alone
    from before its run opens until after it ends (`jobs.devicelock`). Interrupted, it raises JobInterrupted."""
    spec = spec or job_spec(job)
    cfg = job.config
    context = SweepContext.current()
    tracker = Tracker(cfg.tracking.uri, cfg.tracking.experiment, cfg.tracking.artifact_root)
    if context is None and parent_id is None:
        clean_up(tracker)  # a lone job: what earlier commands left behind (a sweep or study does this itself)
    label = run_name or (f"{spec.name} #{cfg.repeat}" if cfg.repeats > 1 else spec.name)
    devices = devicelock.device_keys(job.device != CPU, cfg.world_size)

    def waiting(key: str, holder: str) -> None:
        print(f"[job] {label}: waiting for {key}, in use by {holder}", flush=True)

    with devicelock.hold(devices, f"job {label}", waiting):
        run_tags = {**(tags or {}), **({runs.SWEEP: context.sweep_id} if context else {})}
        if kind is RunKind.JOB and job_command():  # its own command line (a study's runs are its trials')
            run_tags.setdefault(runs.OVERRIDES, shlex.join(job_command()))  # a sweep's winner is printed with them
        parent = parent_id or (context.parent_run_id if context else None)
        run_id = runs.start_job(tracker, spec, kind, parent, cfg.repeat, run_tags, label)
        watch = stall.JobWatch(label, spec.config.train.steps, stall_s=cfg.launcher.stall_s)
        try:
            outcome = _run_job(tracker, run_id, spec, cfg, watch, kind)
        except KeyboardInterrupt as stop:
            runs.end_interrupted(tracker, run_id)
            raise JobInterrupted(watch.seconds) from stop
        if keep is not None:
            keep(outcome)  # a process killed outright from here on has it kept, and said
        _say(outcome, label)
        return outcome


def _run_job(
    tracker: Tracker, run_id: str, spec: JobSpec, cfg: Config, watch: stall.JobWatch, kind: RunKind
) -> JobOutcome:
    error, env = preflight.check_hub(spec.config)
    if error:
        return _finish(tracker, run_id, spec, JobResult(status=Status.FAILED, error=error), cfg)
    spec = dataclasses.replace(spec, env={**spec.env, **env})
    workdir = workdirs.make()
    log = workdir / JOB_LOG
    shown = cfg.launcher.verbose or cfg.train.progress_bar  # the job's output on the console as it comes

    def started(pid: int) -> None:
        watch.started(pid, workdir)
        tracker.tags(run_id, {"pid": pid})

    try:
        print(f"[job] {watch.label}: starting ({cfg.launcher.kind}), MLflow run {run_id}", flush=True)
        try:
            with joblog.follow(log, sys.stderr) if shown else contextlib.nullcontext():
                result = runner.run_job(cfg.launcher.kind, spec, workdir, cfg.launcher.timeout_s, on_start=started)
        except KeyboardInterrupt:
            with contextlib.suppress(Exception):  # a store failing now: the run still ends KILLED, or is cleaned up
                tracker.artifact_file(run_id, log)
            raise
        finally:
            watch.stop()
        result = stall.mark(result, cfg.measure.warmup_steps, cfg.launcher.stall_s)
        if not shown and kind is RunKind.JOB:  # a study's job line names its log instead
            _explain(result, log, cfg.launcher.kind, watch.label)
        files = {"": [log] if log.exists() else [], "profile": profile_files(workdir)}
        if result.status is not Status.OK:
            files["ranks"] = rank_logs(workdir)
        outcome = _finish(tracker, run_id, spec, result, cfg, files)
        return dataclasses.replace(outcome, log_note=_log_note(tracker, run_id, result, files[""]))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


# a job ended by a signal that says what happened itself: its log's last lines are no explanation
TOLD = {-signal.SIGKILL, -signal.SIGTERM, -signal.SIGINT}


def _explain(result: JobResult, log: Path, kind: str, label: str) -> None:
    """A failed job's own words on the console, as its process used to print them there: its traceback, or, for a
    job that died without a result (a crash, an abort), the last lines of its log. Only for `pipeline.train`'s jobs:
    a study's trial, probe or round run that fails is one of its outcomes, and its line names the log (an Inductor
    error of one trial was 150 lines of a study's console). A torchrun job's line names the rank that failed first
    and why (rank 0's traceback is often the other's consequence; each rank's output is on its run, under ranks/)."""
    if result.status is not Status.FAILED or kind == LauncherKind.TORCHRUN:
        return
    if result.traceback:
        print(result.traceback.rstrip(), file=sys.stderr, flush=True)
    elif result.exitcode not in TOLD and (lines := joblog.tail(log)):
        print(f"[job] {label}: the last lines of its output:", *lines, sep="\n", file=sys.stderr, flush=True)


def _log_note(tracker: Tracker, run_id: str, result: JobResult, logged: list[Path]) -> str:
    """`312 library warnings in its job.log` (the job.log artifact of the run its starting line names: a path of 70
    characters on every job's line would wrap each in a terminal), or for a job that failed or ran out of memory
    `its output in <path>`, to open at once; '' otherwise."""
    count = result.library_warnings
    failed = result.status in (Status.FAILED, Status.OOM)
    if not logged or not (count or (failed and logged[0].stat().st_size)):
        return ""
    where = tracker.artifact_place(run_id, JOB_LOG)
    if failed:
        return f"its output in {where}"
    return f"{count} library warning{'s' if count != 1 else ''} in its {JOB_LOG}"


def profile_files(workdir: Path) -> list[Path]:
    """The profiler's summary and its trace (gzipped: a few steps' trace is megabytes of JSON), if the job made them."""
    folder = workdir / PROFILE_DIR
    trace = folder / "trace.json"
    if trace.exists():
        with trace.open("rb") as raw, gzip.open(folder / "trace.json.gz", "wb") as packed:
            shutil.copyfileobj(raw, packed)
        trace.unlink()
    return sorted(folder.glob("*")) if folder.is_dir() else []


def rank_logs(workdir: Path) -> list[Path]:
    """A torchrun job's ranks' output (not shown as it ran), named `<rank>-stdout.log` and `<rank>-stderr.log`."""
    logs = []
    for path in sorted((workdir / ranks.LOG_DIR).glob("*/attempt_*/*/std*.log")):
        if path.stat().st_size:
            named = path.with_name(f"{path.parent.name}-{path.name}")
            path.rename(named)
            logs.append(named)
    return logs


def clean_up(tracker: Tracker, dead: Iterable[str] = ()) -> None:
    """End the runs, and remove the temp folders, that killed commands left behind (`dead`: owners known to be gone);
    say so when there were any."""
    runs_ended, folders = runs.end_orphans(tracker, dead), workdirs.remove_orphans()
    if runs_ended or folders:
        print(
            f"[clean-up] ended {runs_ended} run(s) left RUNNING and removed {folders} temp folder(s) of killed commands"
        )


def _finish(
    tracker: Tracker,
    run_id: str,
    spec: JobSpec,
    result: JobResult,
    cfg: Config,
    files: dict[str, list[Path]] | None = None,
) -> JobOutcome:
    summary = summarize_job(result, cfg.measure.warmup_steps, cfg.measure.confidence)
    steady = {s.step for s in steady_steps(result, cfg.measure.warmup_steps)}
    runs.end_job(tracker, run_id, spec, result, summary, steady, files or {})
    return JobOutcome(run_id, spec, result, summary)


def _say(outcome: JobOutcome, label: str) -> None:
    """The job's last line: how it ended."""
    result, summary = outcome.result, outcome.summary
    if result.status is Status.OK and summary.median is not None:
        line = f"ok, step {summary.median:.4f} s"
        if summary.fit is Fit.OVER_CAP:  # it ran, but the cap it was asked to fit says no
            gib = summary.memory_gib
            line += f", over its cap (peak {gib['peak']:.2f} GiB of {gib['cap']:.2f})"
    else:
        line = f"{result.status}: {result.stopped or result.error or ''}".rstrip(": ")
    if result.compile_note:
        line += f" ({result.compile_note})"
    if result.stalled_steps:
        line += f"; {stall_note(result)}"
    if outcome.log_note:
        line += f"; {outcome.log_note}"
    print(f"[job] {label}: {line}", flush=True)
