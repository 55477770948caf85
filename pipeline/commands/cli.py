"""What every entry point does around Hydra: validate the whole command line first, then hand over to `hydra.main`.

Bad input ends here with one line on stderr and exit code 2, before Hydra creates a folder or MLflow a run.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
from collections.abc import Callable
from typing import Any, NoReturn

import hydra

from pipeline import exits
from pipeline.adapters.hydra_args import args_parser
from pipeline.commands import BEFORE_ANYTHING
from pipeline.commands.interrupts import Interrupts, interrupted, terminate
from pipeline.config.choices import LauncherKind
from pipeline.config.compose import CONF_DIR
from pipeline.config.errors import ConfigError
from pipeline.config.globs import expand_globs
from pipeline.config.help import help_text
from pipeline.config.plan import PRECHECKED, check_repeats, plan_sweep
from pipeline.config.schema import register_configs
from pipeline.config.store_checks import check_stores
from pipeline.jobs import context, runner
from pipeline.measure.estimate import long_cpu_job_warning

VERBOSE_FLAGS = ("-v", "--verbose")
VERBOSE = ["launcher.verbose=true"]  # what -v means: every job's whole output on the console as it comes


def _with_repeats(overrides: list[str], multirun: bool) -> tuple[list[str], bool]:
    """`repeats=N` becomes a leading `repeat=0,..,N-1` sweep: Hydra's basic sweeper makes the first override the
    outer loop, so every config runs once before any runs twice (interleaved repeats)."""
    repeats = [o for o in overrides if o.split("=", 1)[0] == "repeats"]
    if not repeats or any(o.split("=", 1)[0] == "repeat" for o in overrides):
        return overrides, multirun
    value = repeats[-1].split("=", 1)[1]
    check_repeats(value)  # before it becomes a list of that many values
    if not value.isdigit() or int(value) <= 1:
        return overrides, multirun
    return [f"repeat={','.join(str(i) for i in range(int(value)))}", *overrides], True


def _refuse(err: ConfigError) -> NoReturn:
    """Bad input: its one line, exit code 2 (1 for a store the machine cannot give: `StoreUnavailable`). Where a
    Ctrl-C was heard first, the error is the interrupt's doing (`Interrupts.signalled`) and the interrupt is said."""
    if Interrupts.signalled:
        raise KeyboardInterrupt("an error after an interrupt") from err
    print(f"error: {err}", file=sys.stderr)
    _exit(err.exit_code)


def _exit(code: int) -> NoReturn:
    """Flush what was printed while a closed output can still be caught (`_output_closed`), then exit."""
    Interrupts.stopping = True  # the exit handlers end runs: an interrupt now must not break them off
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(code)


def _output_closed() -> NoReturn:
    """Whoever read the output went away (`--help | head -1`): stop without a word, as Unix tools do (exit code 141,
    128 + SIGPIPE), and send what is still buffered nowhere, so the interpreter's exit does not complain either."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(devnull, stream.fileno())
        except (OSError, ValueError):
            pass
    sys.exit(exits.OUTPUT_CLOSED)


def run_entry(
    prog: str,
    config_name: str,
    task: Callable[[Any], Any],
    doc: str,
    argv: list[str] | None = None,
    extra_check: Callable[[Any, Any], None] | None = None,
    sweeps: bool = True,
) -> None:
    """Precheck `argv` (default sys.argv[1:]) for the primary config `config_name` (conf/<config_name>.yaml; and
    `extra_check` on every job's config, composed and as its check parsed it), then run `task` through hydra.main,
    as `python -m prog`. `doc` (the entry module's docstring: a summary, a blank line, example commands) is the
    start of `--help`.
    `sweeps`: whether the entry takes -m (a study searches its own space: it does not)."""
    Interrupts.install()
    try:
        argv = checked_argv(prog, config_name, doc, argv, extra_check, sweeps)
    except BrokenPipeError:
        _output_closed()
    except BaseException as err:
        if not interrupted(err):
            raise
        _interrupted_before_anything_ran()
    try:
        _exit(run_hydra(config_name, task, argv))
    except BrokenPipeError:
        _output_closed()


def _interrupted_before_anything_ran() -> NoReturn:
    """The checks wrote nothing and opened no run: the fork server goes, the line is said, and the process ends
    here, with no exit handlers to run (a command stopped by Ctrl-C in its first seconds once ended killed by the
    signal, status -2, in place of 130)."""
    runner.stop_server()
    print(BEFORE_ANYTHING, file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exits.INTERRUPTED)


def checked_argv(
    prog: str,
    config_name: str,
    doc: str,
    argv: list[str] | None,
    extra_check: Callable[[Any, Any], None] | None,
    sweeps: bool,
) -> list[str]:
    """The command line Hydra gets: --help answered here, every job's config checked, repeats expanded, -v made
    its override."""
    argv = list(sys.argv[1:] if argv is None else argv)
    verbose = [a for a in argv if a in VERBOSE_FLAGS]
    argv = [a for a in argv if a not in VERBOSE_FLAGS]
    register_configs()
    args, unknown = args_parser().parse_known_args(argv)
    if args.help:
        print(help_text(prog, doc, sweeps))
        _exit(exits.OK)
    if unknown:
        _refuse(
            ConfigError(
                unknown[0], f"not an option of python -m {prog}; accepted: key=value overrides and the flags of --help"
            )
        )
    informational = args.hydra_help or args.cfg or args.info or args.shell_completion
    try:
        overrides, multirun = _with_repeats(list(args.overrides), bool(args.multirun))
        overrides = (expand_globs(overrides) if multirun else overrides) + (VERBOSE if verbose else [])
    except ConfigError as err:
        _refuse(err)
    if multirun and not sweeps:
        _refuse(
            ConfigError(
                "-m",
                f"{prog} runs one study, which searches optimize.space itself; accepted: the command without -m "
                "and without repeats, once per study",
            )
        )
    rest = [a for a in argv if a not in args.overrides]
    if informational and multirun:
        flags = (("--cfg", args.cfg), ("--info", args.info), ("--hydra-help", args.hydra_help))
        flag = next((f for f, on in flags if on), "--shell-completion")
        _refuse(
            ConfigError(flag, "shows one job's config, not a sweep's; accepted: the command without -m and repeats")
        )
    if informational:
        return [*rest, *overrides]
    runner.start_server(_launcher(overrides))  # its imports run beside the checks
    _check_plan(args.config_name or config_name, overrides, multirun, extra_check)
    return [*rest, *(["--multirun"] if multirun and not args.multirun else []), *overrides]


def _check_plan(
    config_name: str, overrides: list[str], multirun: bool, extra_check: Callable[[Any, Any], None] | None
) -> None:
    """Every config of the command composed and checked, the stores it writes to too; bad input ends here. The fork
    server started for it stops again when no job will use it."""
    try:
        plan = plan_sweep(config_name, overrides, multirun)
        PRECHECKED.plan = plan  # each job's config checked once: what its task receives
        configs = plan.configs
        if all(c.launcher.kind != LauncherKind.FORKSERVER for c in configs) or _launcher(overrides) is None:
            runner.stop_server()
        for root, uri in dict.fromkeys((c.paths.root, c.tracking.uri) for c in configs):
            check_stores(root, uri)
        for cfg, job in zip(configs, plan.checked, strict=True):
            if extra_check is not None:
                extra_check(cfg, job)
    except ConfigError as err:
        _refuse(err)
    _announce_left_out(plan.left_out)
    warning = long_cpu_job_warning(max(configs, key=lambda c: c.train.steps * c.batch.effective))
    if warning:
        print(warning, file=sys.stderr, flush=True)


def _launcher(overrides: list[str]) -> str | None:
    """The launcher kind the command line asks for, as far as it says (`launcher.kind`, else the default); None
    where Hydra's launcher runs the jobs in other processes (`hydra/launcher=`), which start their own."""
    kind = "forkserver"
    for override in overrides:
        key, _, value = override.partition("=")
        if key.lstrip("+~") == "hydra/launcher":
            return None
        if key.lstrip("+~") == "launcher.kind":
            kind = value
    return kind


def _announce_left_out(left_out: list[str]) -> None:
    """A world-size sweep's combinations that do not make the effective batch: named once, and counted out of the
    sweep's jobs (`commands.sweep_callback` reads the count)."""
    context.COMMAND.left_out = len(left_out)
    if left_out:
        names = ", ".join(dict.fromkeys(left_out))
        print(f"[sweep] left out {len(left_out)} job(s) whose split x world_size is not batch.effective: {names}")


def run_hydra(config_name: str, task: Callable[[Any], Any], argv: list[str]) -> int:
    """Run `task` through hydra.main with `argv`; the exit code. Hydra's own report of a failure (a trimmed
    traceback, exit code 1) is turned off, so that a store failing outside the task (Hydra saving its config on a
    disk that filled up) and a closed output end here with their one line or none."""
    if signal.getsignal(signal.SIGTERM) != Interrupts.heard:  # a caller's process (pipeline.api), not run_entry's
        signal.signal(signal.SIGTERM, terminate)
    sys.argv = [sys.argv[0], *argv]
    os.environ["HYDRA_FULL_ERROR"] = "1"
    exits.ExitCode.reset()

    @functools.wraps(task)
    def guarded(cfg: Any) -> Any:
        with exits.guard_stores(exits.store_uris(cfg)):
            try:
                return task(cfg)
            except ConfigError as err:  # what only the run can find (a study name another command took meanwhile)
                _refuse(err)

    main = hydra.main(config_path=str(CONF_DIR), config_name=config_name, version_base="1.3")(guarded)
    before, made = _open_runs(), _runs_kept()
    try:
        with exits.guard_stores({}, "Hydra's output folder"):
            main()
    except BaseException as err:
        if not interrupted(err):
            raise
        recorded = bool(_runs_kept() - made or _open_runs() - before)
        _end_interrupted(before, recorded)
        said = "runs in progress were marked KILLED" if recorded else "no run was recorded yet"
        print(f"interrupted: {said}", file=sys.stderr)
        return exits.INTERRUPTED
    return exits.ExitCode.code


def _end_interrupted(before: set[str], recorded: bool) -> None:
    """What an interrupted command opened is ended here, before it says so, not only by the exit handlers: the
    process may live on (a notebook's kernel, whose next cell runs another sweep). Its runs still open (the sweep's
    parent: its job's run ended with the job) end KILLED, its sweep is no one's any more, and its fork server stops
    (its jobs are gone already). Where it opened no run, MLflow is left unimported: a Ctrl-C in Hydra's start can
    cut MLflow's own import in half, and importing it again raised from the half-made module."""
    if recorded:
        from pipeline.records import Status
        from pipeline.tracking import runs, store

        store.end_open_runs(keep=before, tags={runs.STATUS: Status.KILLED, runs.NOTE: "interrupted"})
    context.SweepContext.clear()
    runner.stop_server()


def _open_runs() -> set[str]:
    """The runs this process has open already (a caller's earlier work): none where MLflow's side of the package is
    not even imported (left so, for the commands that never record: `--cfg`, `--help`)."""
    return getattr(sys.modules.get("pipeline.tracking.store"), "open_runs", set)()


def _runs_kept() -> set[str]:
    """Every run this process has opened (as `_open_runs`: none where MLflow's side is not imported, or half)."""
    return getattr(sys.modules.get("pipeline.tracking.store"), "runs_kept", set)()
