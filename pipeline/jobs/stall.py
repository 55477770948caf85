"""A running job as its parent watches it: when it started (what an interrupted job cost), and whether it still steps.

A job that has logged no optimizer step for a while, and whose processes meanwhile use next to no CPU (stopped, or
waiting on something that does not come), is said once, `[job] tiny 4x1: no step for 30 s (last at step 7);
waiting`, and once more when it steps again. A while is `launcher.stall_s`, or else `STALL_FACTOR` of the job's own
typical step, at least `STALL_MIN_S`: a slow model's steps are no stall. Its set-up and first step (model build,
compilation) are not watched, and a job that compiles later (a new shape) is busy on the CPU: it is working, not
stalled. Once it ended, its steady steps longer than that limit are marked on its result (`mark`): the stopped time
is in them, not training, so they leave its statistics and its run says so.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from pipeline.jobs.files import STEPS_FILE
from pipeline.measure.summary import steady_steps
from pipeline.records import JobResult

STALL_MIN_S = 30.0
STALL_FACTOR = 10  # of the median of the job's recent steps
IDLE_SHARE = 0.1  # of one core, over the stall window: below it the job's processes are doing nothing
POLL_S = 1.0
RECENT = 20  # steps whose times make the typical step


def limit(times: list[float], stall_s: float | None) -> float:
    """How long a step may take before it is a stall: `stall_s` (launcher.stall_s) where set, else `STALL_FACTOR`
    times the median of `times` (the job's steps), at least `STALL_MIN_S`."""
    if stall_s is not None:
        return stall_s
    return max(STALL_MIN_S, STALL_FACTOR * (statistics.median(times) if times else 0.0))


def mark(result: JobResult, warmup_steps: int, stall_s: float | None) -> JobResult:
    """The result with its steady steps over the stall limit marked (`stalled_steps`), which leaves them out of its
    statistics; unchanged where there are none, or where they would be most of them (a limit under most steps is
    the job's own pace, not a stall)."""
    steady = steady_steps(result, warmup_steps)
    over = limit([s.step_time_s for s in steady], stall_s)
    stalled = tuple(s.step for s in steady if s.step_time_s > over)
    if not stalled or 2 * len(stalled) > len(steady):
        return result
    return dataclasses.replace(result, stalled_steps=stalled, stall_limit_s=over)


class JobWatch:
    """One job, from its start (`started`) to its end (`stop`); `say` prints a line (default: print); `stall_s`:
    launcher.stall_s."""

    def __init__(
        self, label: str, total_steps: int, say: Callable[[str], None] | None = None, stall_s: float | None = None
    ) -> None:
        self.label, self.total, self.stall_s = label, total_steps, stall_s
        self.say = say or (lambda line: print(line, flush=True))
        self.launched: float | None = None
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def seconds(self) -> float:
        """Seconds since the job's process started (0 before)."""
        return time.monotonic() - self.launched if self.launched is not None else 0.0

    def started(self, pid: int, workdir: Path) -> None:
        self.launched = time.monotonic()
        try:
            watched = _Steps(workdir / STEPS_FILE, pid, self.stall_s)
        except psutil.Error:
            return  # gone already: nothing to watch
        self._thread = threading.Thread(target=self._watch, args=(watched,), name="job-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()

    def _watch(self, steps: _Steps) -> None:
        stalled_since: float | None = None
        while not self._done.wait(POLL_S):
            # the job ended meanwhile (`stop` comes next), or a line it wrote as it was killed: nothing to say
            with contextlib.suppress(OSError, ValueError, KeyError, psutil.Error):
                now = time.monotonic()
                new = steps.read(now)
                if new and stalled_since is not None:
                    self.say(f"[job] {self.label}: steps again (step {steps.last}), after {now - stalled_since:.0f} s")
                    stalled_since = None
                if stalled_since is None and steps.stalled(now, self.total):
                    stalled_since = steps.last_at
                    self.say(
                        f"[job] {self.label}: no step for {now - steps.last_at:.0f} s (last at step {steps.last}); "
                        "waiting"
                    )


class _Steps:
    """The job's steps file, read as it grows, and the CPU time its processes used, sampled once a poll."""

    def __init__(self, path: Path, pid: int, stall_s: float | None = None) -> None:
        self.path, self.process, self.stall_s = path, psutil.Process(pid), stall_s
        self.offset, self.pending = 0, b""
        self.last, self.last_at = 0, 0.0
        self.times: collections.deque[float] = collections.deque(maxlen=RECENT)
        self.cpu: collections.deque[tuple[float, float]] = collections.deque()  # (when, CPU seconds so far)

    def read(self, now: float) -> bool:
        """Take in the steps logged since the last look; whether there were any."""
        self._sample_cpu(now, self.window())
        if not self.path.exists():
            return False
        with self.path.open("rb") as file:
            file.seek(self.offset)
            chunk = file.read()
        self.offset += len(chunk)
        *lines, self.pending = (self.pending + chunk).split(b"\n")
        records = [json.loads(line) for line in lines if line.strip()]
        for record in records:
            self.last = int(record["step"])
            if self.last > 1 and not record.get("compile_s"):  # the first carries the set-up's one-off costs
                self.times.append(float(record["step_time_s"]))
        if records:
            self.last_at = now
        return bool(records)

    def window(self) -> float:
        """How long without a step is a stall for this job."""
        return limit(list(self.times), self.stall_s)

    def stalled(self, now: float, total: int) -> bool:
        """No step for the window, past the first step and before the last, and its processes idle meanwhile."""
        if self.last < 1 or self.last >= total or now - self.last_at < self.window():
            return False
        return self._cpu_over(self.window(), now) < IDLE_SHARE * self.window()

    def _sample_cpu(self, now: float, keep_s: float) -> None:
        """The CPU seconds the job's processes (its ranks, its compile workers) have used so far, kept `keep_s` back."""
        used = 0.0
        for process in [self.process, *self.process.children(recursive=True)]:
            with contextlib.suppress(psutil.NoSuchProcess):
                times = process.cpu_times()
                used += times.user + times.system
        self.cpu.append((now, used))
        while len(self.cpu) > 2 and self.cpu[1][0] <= now - keep_s - 2 * POLL_S:
            self.cpu.popleft()

    def _cpu_over(self, seconds: float, now: float) -> float:
        """CPU seconds the job's processes used over the last `seconds` (as far back as the samples go)."""
        since = [used for t, used in self.cpu if t <= now - seconds] or [self.cpu[0][1]]
        return self.cpu[-1][1] - since[-1]
