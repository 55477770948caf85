"""Sweeps and studies from Python (a notebook, a script, standard input): the command line's overrides in, a
`Result` out.

    import pipeline
    result = pipeline.sweep(["batch.split=1x4,2x2,4x1", "repeats=3"])   # python -m pipeline.train -m ...
    result.table      # pandas DataFrame, one row per config, as the console's table
    result.answer     # the config, its reproduce line, its paired speed-up with the interval
    result.run_id     # the MLflow parent run
    found = pipeline.study(["mem_cap=14GiB", "optimize.trials=8"])     # python -m pipeline.optimize ...

Each runs what its command line runs: the same check of every job's config before anything starts, the same Hydra
multirun or study, every job in a fresh process, the same MLflow records and printed lines; the result is read back
from those records. Neither exits the interpreter: bad input raises `BadInput`, whose message is the line the
command prints after `error: `, and nothing is recorded; a store that fails raises `PipelineError` with its line;
Ctrl-C (a notebook's interrupt) raises KeyboardInterrupt once the runs in progress are ended KILLED. A sweep whose
jobs failed, or a study where nothing fits, is a result: its `exit_code` and `line` say so, as the command's would.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pipeline import exits, progress
from pipeline.answer.results import Result
from pipeline.liveness import Owner
from pipeline.records import RunKind

ACCEPTED = "accepted: a list of overrides as on the command line, e.g. ['batch.split=1x4,2x2,4x1', 'repeats=3']"


class PipelineError(RuntimeError):
    """A sweep or study that did not run to its end: `line` is what the command line prints after `error: `,
    `exit_code` what it exits with."""

    def __init__(self, line: str, exit_code: int = exits.FAILED) -> None:
        super().__init__(line)
        self.line, self.exit_code = line, exit_code


class BadInput(PipelineError, ValueError):
    """Refused before anything ran (the command line's exit code 2): the field and the accepted form."""


@dataclass(frozen=True)
class _Entry:
    """An entry point as `cli.run_entry` takes it."""

    prog: str
    task: Callable[[Any], Any]
    doc: str
    kind: RunKind
    extra_check: Callable[[Any, Any], None] | None = None
    config: str = "config"  # the entry's primary config (conf/<config>.yaml)

    @property
    def multirun(self) -> bool:
        return self.kind is RunKind.SWEEP


def sweep(overrides: Sequence[str]) -> Result:
    """Run `python -m pipeline.train -m OVERRIDES` (every combination of the swept values, `repeats=N` in paired
    rounds) and return its table and answer."""
    from pipeline.commands import train

    return _run(_Entry("pipeline.train", train.train, train.__doc__, RunKind.SWEEP), _checked(overrides))


def study(overrides: Sequence[str]) -> Result:
    """Run `python -m pipeline.optimize OVERRIDES` (an Optuna study for the fastest config under `mem_cap`) and return
    its table of configs and its answer."""
    from pipeline.commands import optimize

    entry = _Entry(
        "pipeline.optimize",
        optimize.optimize,
        optimize.__doc__,
        RunKind.STUDY,
        optimize.check_study,
        optimize.CONFIG,
    )
    return _run(entry, _checked(overrides))


def _checked(overrides: Sequence[str]) -> list[str]:
    """Overrides only: no command-line flag (`-m`, `--help`, `--cfg`): the function says what runs."""
    if isinstance(overrides, str) or not all(isinstance(o, str) for o in overrides):
        raise BadInput(f"overrides: {overrides!r} is not a list of strings; {ACCEPTED}", exits.BAD_INPUT)
    for text in overrides:
        if text.startswith("-"):
            raise BadInput(
                f"overrides: '{text}' is a command-line flag; {ACCEPTED} (pipeline.sweep is the multirun, "
                "`python -m pipeline.train --help` lists the keys)",
                exits.BAD_INPUT,
            )
    return list(overrides)


def _run(entry: _Entry, overrides: list[str]) -> Result:
    """The command line's path: its precheck (`cli.checked_argv`), then Hydra (`cli.run_hydra`); then the record."""
    from pipeline.commands import cli
    from pipeline.config.plan import PRECHECKED, expand_jobs
    from pipeline.jobs.context import COMMAND

    argv = ["--multirun", *overrides] if entry.multirun else overrides
    with _kept_process_state():
        with _refused_as_exception():
            argv = cli.checked_argv(entry.prog, entry.config, entry.doc, argv, entry.extra_check, entry.multirun)
        jobs = expand_jobs([a for a in argv if not a.startswith("-")], entry.multirun)
        cfg = PRECHECKED.plan.checked[0].config  # where it records: the same for every job that passed the precheck
        total = len(jobs) - COMMAND.left_out if entry.multirun else 0
        with _stores_as_exception(), _counted(entry.task, total) as task:
            code = cli.run_hydra(entry.config, task, argv)
    if code == exits.INTERRUPTED:
        raise KeyboardInterrupt("interrupted: runs in progress were marked KILLED")
    return _result(cfg, entry.kind, code)


def _result(cfg, kind: RunKind, code: int) -> Result:
    from pipeline.answer import results
    from pipeline.tracking.readback import last_parent
    from pipeline.tracking.store import Tracker

    tracker = Tracker(cfg.tracking.uri, cfg.tracking.experiment, cfg.tracking.artifact_root)
    parent = last_parent(tracker, kind, str(Owner.current()))
    if parent is None:
        raise PipelineError(f"the {kind} ended without a record in {tracker.uri}", code or exits.FAILED)
    result = results.read(tracker, parent.info.run_id)
    return dataclasses.replace(result, exit_code=code, line=exits.ExitCode.line or result.answer.text)


@contextlib.contextmanager
def _counted(task: Callable, total: int) -> Iterator[Callable]:
    """`task` as Hydra calls it, counting a sweep's jobs on a progress bar (a notebook's widget; none for a study,
    whose own bar counts its trials)."""
    from pipeline.config.plan import checked_job

    if not total:
        yield task
        return
    bar = progress.bar(total=total, desc="jobs", unit="job")

    def counted(cfg: Any) -> Any:
        try:
            return task(cfg)
        finally:
            if checked_job(cfg) is not None:  # left out of a world-size sweep: no job ran
                bar.update(1)

    counted.__module__, counted.__qualname__ = task.__module__, task.__qualname__  # Hydra names the job after it
    try:
        yield counted
    finally:
        bar.close()


@contextlib.contextmanager
def _refused_as_exception() -> Iterator[None]:
    """The command line's precheck, whose refusal (its `error: ...` line on stderr, then an exit) becomes BadInput
    with that line; what else it writes to stderr (a warning) is passed on."""
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            yield
    except SystemExit as stop:
        lines = captured.getvalue().splitlines()
        said = next((line for line in reversed(lines) if line.startswith("error: ")), None)
        if said is None:
            raise PipelineError(f"the command line's check ended with exit code {stop.code}", stop.code) from None
        code = stop.code if isinstance(stop.code, int) else exits.FAILED
        error = BadInput if code == exits.BAD_INPUT else PipelineError
        raise error(said[len("error: ") :], code) from None
    finally:
        sys.stderr.write(
            "".join(f"{line}\n" for line in captured.getvalue().splitlines() if not line.startswith("error: "))
        )


class _Tee(io.TextIOBase):
    """stderr as it is, remembering the last `error: ...` line written to it."""

    def __init__(self, out) -> None:
        self.out, self.error, self.pending = out, None, ""

    def write(self, text: str) -> int:
        self.out.write(text)
        *lines, self.pending = (self.pending + text).split("\n")
        self.error = next((line for line in reversed(lines) if line.startswith("error: ")), self.error)
        return len(text)

    def flush(self) -> None:
        self.out.flush()


@contextlib.contextmanager
def _stores_as_exception() -> Iterator[None]:
    """A store that fails at run time ends the command line with its line and exit code 1: here, PipelineError; an
    input only the run could find bad (exit code 2), BadInput."""
    tee = _Tee(sys.stderr)
    try:
        with contextlib.redirect_stderr(tee):
            yield
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else exits.FAILED
        line = tee.error[len("error: ") :] if tee.error else f"stopped with exit code {code}"
        raise (BadInput if code == exits.BAD_INPUT else PipelineError)(line, code) from None


@contextlib.contextmanager
def _kept_process_state() -> Iterator[None]:
    """What a command line's run changes in its process, put back for the caller's next cell: sys.argv (Hydra reads
    it), the SIGTERM handler, HYDRA_FULL_ERROR, Hydra's global state, and logging (Hydra's quiet logging config
    disables every logger that exists and raises the root's level: the caller's own, and the libraries' they
    watch, would go silent)."""
    from hydra.core.global_hydra import GlobalHydra

    argv, handler, full_error = sys.argv, signal.getsignal(signal.SIGTERM), os.environ.get("HYDRA_FULL_ERROR")
    root = logging.getLogger()
    kept = {
        name: (lg.disabled, lg.level)
        for name, lg in logging.Logger.manager.loggerDict.items()
        if isinstance(lg, logging.Logger)
    }
    root_state = root.level, list(root.handlers)
    try:
        yield
    finally:
        for name, (disabled, level) in kept.items():
            logger = logging.getLogger(name)
            logger.disabled, logger.level = disabled, level
        root.setLevel(root_state[0])
        root.handlers[:] = root_state[1]
        sys.argv = argv
        with contextlib.suppress(ValueError):  # not the main thread: the handler was never changed either
            signal.signal(signal.SIGTERM, handler)
        if full_error is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = full_error
        GlobalHydra.instance().clear()
