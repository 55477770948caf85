"""How soon a command's first job starts, and how soon its output closes after it exits.

Runs the README's CPU sweep (`python -m pipeline.train -m batch.split=1x4,2x2,4x1 repeats=3`) in a fresh process,
times its first `[job] ... starting` line (printed as the job is forked: in a sweep, once the fork server has its
imports), then interrupts it (SIGINT to its process group, as a terminal's Ctrl-C) and times its exit and the end of
its output (what `... | tee` waits for: every process holding the output, the fork server included, has let go).
Each figure is the median of `--repeats` runs, one after the other:

- `first job, store exists`: the usual command, in a folder whose MLflow store an earlier run made;
- `first job, fresh folder`: the first command in a folder (MLflow creates its database);
- `fork server imports`, `parent imports`: what the two processes import, each alone (`python -c "import ..."`):
  started at once, the first job comes about when the slower of the two is done, not after both;
- `output open after exit`: from the command's exit to the end of its output.

With `--compare DIR` (another checkout), each run of this checkout is followed by one of that one, so that both meet
the same load; the ratios of their first-job times are printed run by run.

Jobs take turns on a machine's device (`jobs.devicelock`); the runs here use a lock folder of their own, so a job of
another command on the same machine does not hold them up. The machine's load average is printed before and after:
on a shared machine the figures are only comparable to others measured with the same load.

    python bench/startup.py                                  # five runs of each
    python bench/startup.py --repeats 3 -- batch.split=1x4,4x1
    git archive main | tar -x -C /tmp/main && python bench/startup.py --compare /tmp/main   # turn about with main
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

SWEEP = ["-m", "batch.split=1x4,2x2,4x1", "repeats=3"]
FIRST_JOB = "[job] "


def timed_command(args: list[str], folder: Path, env: dict[str, str]) -> dict[str, float]:
    """One run of the sweep in `folder`: seconds to its first job line, to its exit after a Ctrl-C sent then, and from
    that exit to the end of its output."""
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline.train", *args],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    exited: list[float] = []
    waiter = threading.Thread(target=lambda: (proc.wait(), exited.append(time.monotonic())), daemon=True)
    waiter.start()
    first, lines = None, []
    for line in proc.stdout:
        lines.append(line)
        if first is None and line.startswith(FIRST_JOB) and "starting" in line:
            first = time.monotonic() - started
            os.killpg(proc.pid, signal.SIGINT)
    closed = time.monotonic()
    waiter.join(120)
    if first is None or not exited:
        raise SystemExit(f"no job started, or no exit: {''.join(lines)[-2000:]}")
    return {"first_job_s": first, "exit_s": exited[0] - started, "open_after_exit_s": max(0.0, closed - exited[0])}


def import_time(modules: str, env: dict[str, str]) -> float:
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", f"import {modules}"], env=env, check=True)
    return time.monotonic() - started


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):6.2f} s  (runs: {', '.join(f'{v:.2f}' for v in values)})"


def _env(source: str, locks: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "BATCH_SPLIT_LOCK_DIR": str(locks)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [source, os.environ.get("PYTHONPATH")]))
    env.pop("MLFLOW_TRACKING_URI", None)
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--compare", help="another checkout of the repository, run turn about with this one")
    parser.add_argument("overrides", nargs="*", help="after --: the sweep's command line (default: the README's)")
    args = parser.parse_args()
    command = [*SWEEP[:1], *args.overrides] if args.overrides else SWEEP
    root = Path(tempfile.mkdtemp(prefix="startup-"))
    sources = {"this": str(Path(__file__).resolve().parents[1])}
    if args.compare:
        sources["compared"] = str(Path(args.compare).resolve())
    print(f"python -m pipeline.train {' '.join(command)}; {os.cpu_count()} CPUs; load {os.getloadavg()}", flush=True)
    kept = {name: [] for name in sources}
    fresh = {name: [] for name in sources}
    server, parent = [], []
    for name, source in sources.items():
        (root / name).mkdir()
        timed_command(command, root / name, _env(source, root / "locks"))  # the store the `store exists` runs find
    for n in range(args.repeats):
        for name, source in sources.items():
            env = _env(source, root / "locks")
            kept[name].append(timed_command(command, root / name, env))
            (root / f"{name}-fresh{n}").mkdir()
            fresh[name].append(timed_command(command, root / f"{name}-fresh{n}", env))
            print(
                f"  run {n + 1} ({name}): first job {kept[name][-1]['first_job_s']:.2f} s, fresh folder "
                f"{fresh[name][-1]['first_job_s']:.2f} s",
                flush=True,
            )
        env = _env(sources["this"], root / "locks")
        server.append(import_time("pipeline.jobs.child", env))
        parent.append(import_time("pipeline.jobs.task, pipeline.commands.sweep_callback, hydra", env))
    for name in sources:
        print(f"[{name}] first job, store exists:  {_median([r['first_job_s'] for r in kept[name]])}")
        print(f"[{name}] first job, fresh folder:  {_median([r['first_job_s'] for r in fresh[name]])}")
        print(
            f"[{name}] output open after exit:   {_median([r['open_after_exit_s'] for r in kept[name] + fresh[name]])}"
        )
    if args.compare:
        ratios = [a["first_job_s"] / b["first_job_s"] for a, b in zip(kept["this"], kept["compared"], strict=True)]
        print(f"first job, this / compared (store exists), per run: {', '.join(f'{r:.2f}' for r in ratios)}")
    print(f"fork server imports (alone): {_median(server)}")
    print(f"parent imports (alone):      {_median(parent)}")
    print(f"load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
