"""The pipeline's job against the plain TRL script it exports for the same config, in alternating rounds: what the
tool costs on top of the training a user would run in their own script.

    python bench/twin.py [--rounds 6] [--steps 30] [--warmup 5] [--budget-s S] [--out DIR] -- OVERRIDES...
    python bench/twin.py --rounds 6 -- experiment=seed-t4-graphs gpu=auto batch.split=4x1       # GPU
    python bench/twin.py --rounds 2 --steps 10 --warmup 2 -- batch.split=4x1                     # CPU rehearsal

One side is the job as `python -m pipeline.train OVERRIDES` runs it (`jobs.task.run`: a fresh process forked from
the fork server this script starts once, its meter, its busy-share sampler, its MLflow records, in a store under
DIR); the other is `python -m pipeline.export OVERRIDES`'s script, run as a user runs it (`python SCRIPT`, a fresh
interpreter). Rounds alternate which goes first. A run's figure is the 20%-trimmed mean of its steps after
`--warmup` (the same steps on both sides: the job's clock runs from one step's synchronisation to the next, the
script's from one loss log to the next, which waits for the same step); a round's figure is the ratio job / script,
and the rounds give its geometric mean with a t-interval (neighbouring processes share the machine's drift, so it
cancels in a pair). No new round starts once `--budget-s` would be passed. Prints a line a run and a table at the
end; writes every step of every run to DIR/twin-<config id>.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from scipy.stats import t as student_t

from pipeline.answer.code import export
from pipeline.config.compose import compose_job
from pipeline.config.validate import validate
from pipeline.jobs import runner, task
from pipeline.measure.stats import trimmed_mean

GIB = 2**30


def job_side(overrides: list[str], warmup: int) -> dict:
    """One job of the pipeline, as `pipeline.train` runs it."""
    cfg = compose_job("config", overrides)
    outcome = task.run(validate(cfg))  # checked as the command line checks it before a job
    steps = [s for s in outcome.result.steps if s.step > warmup]
    memory = outcome.result.memory
    return {
        "status": str(outcome.status),
        "steps": [s.step_time_s for s in steps],
        "compiled_after_warmup": sum(1 for s in steps if s.compile_s > 0),
        "losses": [s.loss for s in outcome.result.steps],
        "peak_reserved_gib": (memory.peak_reserved_bytes or 0) / GIB if memory else None,
        "wall_s": outcome.summary.wall_s,
    }


def script_side(script: Path, warmup: int, folder: Path) -> dict:
    """The exported script, in a fresh interpreter; its step k's time is the gap between log k-1 and log k."""
    log = folder / f"script-{time.time_ns()}.jsonl"
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, str(script), f"--log={log}", f"--output-dir={folder / 'out'}"])
    records = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    steps = [r for r in records if "step" in r]
    times = [(b["step"], b["time"] - a["time"]) for a, b in zip(steps, steps[1:], strict=False)]
    peak = next((r["peak_reserved_bytes"] for r in records if "peak_reserved_bytes" in r), None)
    return {
        "status": "ok" if proc.returncode == 0 and steps else f"failed (exit {proc.returncode})",
        "steps": [t for step, t in times if step > warmup],
        "losses": [r["loss"] for r in steps],
        "peak_reserved_gib": peak / GIB if peak else None,
        "wall_s": time.perf_counter() - start,
    }


def figure(side: dict) -> float | None:
    return trimmed_mean(side["steps"]) if side["status"] == "ok" and side["steps"] else None


def paired(ratios: list[float], confidence: float = 0.95) -> tuple[float, float, float] | None:
    """Geometric mean of the per-round ratios with its t-interval; None below two rounds."""
    if len(ratios) < 2:
        return None
    logs = [math.log(r) for r in ratios]
    half = student_t.ppf(0.5 + confidence / 2, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    mean = statistics.fmean(logs)
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def run_rounds(args, overrides: list[str], script: Path, folder: Path) -> list[dict]:
    started, rounds = time.perf_counter(), []
    for r in range(args.rounds):
        spent = time.perf_counter() - started
        per_round = spent / r if r else 0.0
        if args.budget_s and r and spent + per_round > args.budget_s:
            print(f"[twin] round {r + 1} not started: {spent:.0f} s spent of --budget-s {args.budget_s:g}", flush=True)
            break
        order = ("job", "script") if r % 2 == 0 else ("script", "job")
        done = {}
        for side in order:
            done[side] = job_side(overrides, args.warmup) if side == "job" else script_side(script, args.warmup, folder)
        job, plain = figure(done["job"]), figure(done["script"])
        ratio = job / plain if job and plain else None
        rounds.append({**done, "first": order[0], "job_s": job, "script_s": plain, "ratio": ratio})
        print(
            f"[twin] round {r + 1} ({order[0]} first): job {job or math.nan:.4f} s/step ({done['job']['status']}), "
            f"script {plain or math.nan:.4f} s/step ({done['script']['status']}), ratio "
            + (f"{ratio:.3f}" if ratio else "-"),
            flush=True,
        )
    return rounds


def summary(name: str, rounds: list[dict]) -> str:
    ratios = [r["ratio"] for r in rounds if r["ratio"]]
    pair = paired(ratios)
    jobs, plains = [r["job_s"] for r in rounds if r["ratio"]], [r["script_s"] for r in rounds if r["ratio"]]
    loss = max(
        (abs(a - b) / abs(b) for r in rounds for a, b in zip(r["job"]["losses"], r["script"]["losses"], strict=False)),
        default=math.nan,
    )
    peaks = [(r["job"]["peak_reserved_gib"], r["script"]["peak_reserved_gib"]) for r in rounds]
    head = "| config | rounds | job s/step (median of runs) | script s/step | job / script (95%, paired) | per round | loss dev | peak GiB job / script |"
    cell = f"{pair[0]:.3f} [{pair[1]:.3f}, {pair[2]:.3f}]" if pair else "-"
    peak = next(((a, b) for a, b in peaks if a and b), None)
    row = (
        f"| {name} | {len(ratios)} | {statistics.median(jobs) if jobs else math.nan:.4f} | "
        f"{statistics.median(plains) if plains else math.nan:.4f} | {cell} | {', '.join(f'{x:.3f}' for x in ratios)} | "
        f"{loss:.1e} | " + (f"{peak[0]:.2f} / {peak[1]:.2f} |" if peak else "- |")
    )
    return "\n".join([head, "|" + "---|" * 8, row])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--budget-s", type=float, default=None)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "bench-out")))
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    folder = args.out.resolve()
    folder.mkdir(parents=True, exist_ok=True)
    given = [o for o in args.overrides if o != "--"]
    overrides = [*given, f"train.steps={args.steps}", f"measure.warmup_steps={args.warmup}", "train.progress_bar=false"]
    overrides += [f"paths.root={folder / 'store'}"]
    exported = export(overrides)
    print(f"[twin] job: {exported.command}\n[twin] script: python {exported.path}", flush=True)
    runner.warm_up("forkserver")
    rounds = run_rounds(args, overrides, exported.path, folder)
    config = exported.path.stem.removeprefix("train_")
    name = " ".join(given) or "defaults"
    record = {"overrides": given, "command": exported.command, "script": str(exported.path), "rounds": rounds}
    (folder / f"twin-{config}.json").write_text(json.dumps(record, indent=1))
    print(summary(name, rounds), flush=True)


if __name__ == "__main__":
    main()
