"""Parent side of a job: start it in a fresh process, wait, and collect its record whatever happened to it.

Hydra's basic launcher runs multirun jobs one after another in one process, where CUDA peaks, allocator caches and
leaked tensors would carry over and one OOM would end the sweep. Here every job gets its own process:

- `forkserver` (default): a server process imports torch/transformers/trl/peft once (it never touches CUDA) and
  forks a fresh child per job, so jobs do not pay the imports again. The entry point starts it with the command,
  so that its imports run beside the command's own, and it is killed when the command exits;
- `subprocess`: a new interpreter per job (`python -m pipeline.jobs.child`), e.g. under a debugger or profiler;
- `torchrun`: `world_size` processes of one job under PyTorch's elastic launcher, as `torchrun --standalone` starts
  them (DDP; `jobs.ranks`); rank 0 writes the record, and a failed job names the rank that failed first.

The fork server and its jobs, and a `subprocess` job, ignore SIGINT (a Ctrl-C reaches every process of its
group, and this process ends the job itself). Every job's output goes to its log (`jobs.joblog`), not the console.
A child that crashes, is killed or times out still yields a record (status `failed`, its signal or exit code, and
the steps it logged before dying, read back from its steps.jsonl).
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import multiprocessing
import multiprocessing.util
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing import forkserver, resource_tracker
from pathlib import Path

import psutil

from pipeline import whole
from pipeline.adapters.forkserver import forget_server, server_pid
from pipeline.config.choices import LauncherKind
from pipeline.jobs import joblog, ranks, watchdog, workdirs
from pipeline.jobs.files import JOB_LOG, PROCESS_FILE, RESULT_FILE, SPEC_FILE, STEPS_FILE
from pipeline.records import JobResult, JobSpec, Status, Step

_CONTEXT: multiprocessing.context.BaseContext | None = None
PRELOAD = ["pipeline.jobs.child"]


def _forkserver() -> multiprocessing.context.BaseContext:
    global _CONTEXT
    if _CONTEXT is None:
        _CONTEXT = multiprocessing.get_context("forkserver")
        _CONTEXT.set_forkserver_preload(PRELOAD)
        workdirs.place_socket_folder()
        _claim(Path(multiprocessing.util.get_temp_dir()))
        atexit.register(stop_server)
    return _CONTEXT


def _claim(folder: Path) -> None:
    """Mark multiprocessing's temp folder of this process (pymp-*, where the fork server listens) as ours: removed at
    a normal exit, it stays when this process is killed outright, and `remove_orphan_workdirs` then knows whose it
    was."""
    (folder / PROCESS_FILE).write_text(json.dumps({"pid": os.getpid(), "owner_pid": os.getpid()}), encoding="utf-8")


@contextlib.contextmanager
def _main_left_out():
    """Every fork server child imports the parent's `__main__` again, by its module name (`python -m ...`) or from
    its file (multiprocessing's preparation of a child); a job needs nothing from it (its target and spec are
    pickled by reference to `pipeline.jobs`). Left in, `pipeline.optimize` brought Optuna and SQLAlchemy into each
    job (75 MiB more resident on CPU), and code read from standard input (file `<stdin>`) failed every job. While a
    child is started, `__main__` has neither name nor file (as a notebook kernel's or `python -c`'s)."""
    main = sys.modules.get("__main__")
    saved = {name: getattr(main, name) for name in ("__spec__", "__file__") if hasattr(main, name)}
    if main is not None:
        main.__spec__ = None
        with contextlib.suppress(AttributeError):
            del main.__file__
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(main, name, value)


@contextlib.contextmanager
def _ctrl_c_left_to_this_process():
    """Processes started within begin with SIGINT blocked (a mask that fork and exec keep), and ignore it from the
    import of `jobs.child` on. A terminal's Ctrl-C goes to its whole foreground process group: a job that heard it
    would print its own KeyboardInterrupt traceback while this process ends it (`run_job`), and the fork server would
    do the same during its imports. This process keeps its handler: a Ctrl-C meanwhile is heard, by another of its
    threads or here once unblocked (ignoring it here while a child started lost it)."""
    if threading.current_thread() is not threading.main_thread():  # the child is forked from this thread's mask
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)  # as it was: a caller's own block stays


def start_server(kind: str) -> None:
    """Start the fork server without waiting for it: it imports the training stack (seconds) while this process
    goes on with its own imports and checks. Nothing happens for the other launchers."""
    if kind != LauncherKind.FORKSERVER or watchdog.alive(server_pid()):
        return  # (a server that died is started again here, by the next job)
    _forkserver()
    resource_tracker.ensure_running()  # it blocks and unblocks SIGINT itself: not inside the window below
    with _ctrl_c_left_to_this_process():
        forkserver.ensure_running()  # spawns the server and returns; the server imports on its own


def stop_server() -> None:
    """Kill the fork server, and reap it, before this process exits. Left to itself, it would see this process gone
    only once its imports are done and then tear down torch (1.5 s or more), holding the output it shares with this
    process: `... | tee` would wait for it. Its jobs are over by now (`run_job` ends them); one still running would
    notice its parent gone (`jobs.watchdog`)."""
    if (pid := server_pid()) is None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        forget_server()  # closes its pipe, reaps it (dead already) and removes its socket


def warm_up(kind: str) -> None:
    """Wait until the fork server has finished its imports (starting it if it was not), so that the first job's spawn
    time is a fork."""
    if kind == LauncherKind.FORKSERVER:
        start_server(kind)
        probe = _forkserver().Process(target=_noop)
        _start_whole(probe)  # returns once the server has finished its imports
        probe.join()


def _noop() -> None:
    return None


def _child_main(spec: JobSpec, workdir: str) -> None:
    """Runs in the forked child: its output to its log, then the job. Importing the job module here keeps torch out
    of the parent (the fork server has already imported it, so this costs nothing in the child)."""
    if not joblog.redirect(Path(workdir) / JOB_LOG):
        return  # its command ended it as it was forked
    from pipeline.jobs import child

    child.main(spec, workdir)


class _Handle:
    """A started child of either kind: pid, wait, kill, exit code."""

    def __init__(self, process) -> None:
        self.process = process

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait(self, timeout: float | None) -> bool:
        if isinstance(self.process, subprocess.Popen):
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                return False
            return True
        self.process.join(timeout)
        return self.process.exitcode is not None

    def kill(self) -> None:
        """SIGKILL the child and every process under it: a torchrun job's ranks run in sessions of their own (out of
        reach of a group's signal), and a rank that is stopped or hung would never notice its launcher gone."""
        try:
            family = psutil.Process(self.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            family = []
        self.process.kill()
        for process in family:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        self.wait(10)

    @property
    def exitcode(self) -> int | None:
        if isinstance(self.process, subprocess.Popen):
            return self.process.returncode
        return self.process.exitcode


def start(kind: str, spec: JobSpec, workdir: Path) -> _Handle:
    """Start one job's process. A Ctrl-C never lands inside the start (it is held until the child runs); landing
    once the child runs, it kills the child before it is raised, since the caller never gets the handle."""
    workdir.mkdir(parents=True, exist_ok=True)
    spec = dataclasses.replace(spec, owner_pid=os.getpid())  # the job dies with this process (jobs/watchdog.py)
    made: list[_Handle] = []
    try:
        _start(kind, spec, workdir, made.append)
    except KeyboardInterrupt:
        for handle in made:
            if handle.pid is not None:
                handle.kill()
        raise
    return made[0]


def _start(kind: str, spec: JobSpec, workdir: Path, made: Callable[[_Handle], None]) -> None:
    if kind in (LauncherKind.SUBPROCESS, LauncherKind.TORCHRUN):
        spec_path = workdir / SPEC_FILE
        spec_path.write_text(json.dumps(spec.to_json()), encoding="utf-8")
        job = ["-m", "pipeline.jobs.child", str(spec_path), str(workdir)]
        if kind == LauncherKind.TORCHRUN:  # one process per device, PyTorch's own elastic launcher
            job = ["-m", "pipeline.jobs.ranks", str(spec.config.world_size), str(spec_path), str(workdir)]
        # SIGINT blocked in this thread may still land in another, and Python raises it here between any two
        # bytecodes: held until the handle is made, so that `start` can kill the child it names
        with open(workdir / JOB_LOG, "ab") as log, _ctrl_c_left_to_this_process(), whole.call(patience=2):
            made(_Handle(subprocess.Popen([sys.executable, *job], stdout=log, stderr=log)))
        return
    start_server(kind)  # started at once by the entry point; here for a caller that did not
    process = _forkserver().Process(target=_child_main, args=(spec, str(workdir)), name="batch-split-job")
    made(_Handle(process))
    _start_whole(process)


def _start_whole(process: multiprocessing.process.BaseProcess) -> None:
    """Start a fork-server child with the first two Ctrl-Cs held until it is started (a third acts at once). Cut
    between connecting and sending its request, a start left the server reading half a request: it died printing
    EOFError on the console (a Ctrl-C as the job's line is printed lands here)."""
    with _main_left_out(), whole.call(patience=2):
        process.start()


def read_steps(workdir: Path) -> tuple[Step, ...]:
    path = workdir / STEPS_FILE
    if not path.exists():
        return ()
    steps = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            steps.append(Step.from_json(json.loads(line)))
        except json.JSONDecodeError:
            break  # a line cut off by the kill
    return tuple(steps)


def _no_result(code: int | None) -> str:
    reason = ranks.exit_reason(code)
    return reason if code is None or code < 0 else f"{reason} without a result"


def _blame_rank(result: JobResult, workdir: Path, world_size: int, recorded: bool) -> JobResult:
    """A job of several ranks that failed: its error names the rank that failed first and why, then what rank 0
    stopped with if it wrote its record (usually the consequence, e.g. a connection reset by the dead peer)."""
    cause = ranks.first_failure(workdir, world_size)
    if cause is None:
        return result
    own = ""
    if recorded and result.error and cause.rank != 0:
        own = f"; rank 0 stopped with: {result.error[:160]}"
    return dataclasses.replace(result, status=cause.status, error=cause.text + own)


def run_job(
    kind: str,
    spec: JobSpec,
    workdir: Path,
    timeout_s: float | None = None,
    on_start: Callable[[int], None] | None = None,
) -> JobResult:
    """Run one job to its end and return its result (never raises for the child's sake)."""
    launched = time.time()
    handle = start(kind, spec, workdir)
    try:
        (workdir / PROCESS_FILE).write_text(json.dumps({"pid": handle.pid, "owner_pid": os.getpid()}), encoding="utf-8")
        if on_start is not None:
            on_start(handle.pid)
        finished = handle.wait(timeout_s)
    except BaseException:
        handle.kill()  # Ctrl-C or SIGTERM of the parent: take the child down with it
        raise
    timed_out = not finished
    if timed_out:
        handle.kill()
    result_path = workdir / RESULT_FILE
    recorded = result_path.exists() and not timed_out
    if recorded:
        result = JobResult.from_json(json.loads(result_path.read_text(encoding="utf-8")))
    else:
        reason = f"timed out after {timeout_s:g} s" if timed_out else _no_result(handle.exitcode)
        result = JobResult(status=Status.FAILED, error=reason, steps=read_steps(workdir), pid=handle.pid)
    if kind == LauncherKind.TORCHRUN and not timed_out:
        result = _blame_rank(result, workdir, spec.config.world_size, recorded)
    timings = {**result.timings, "wall_s": time.time() - launched}
    if "child_start" in timings:
        timings["spawn_s"] = timings.pop("child_start") - launched
    return dataclasses.replace(result, exitcode=handle.exitcode, timings=timings)
