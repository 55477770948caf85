"""Each knob's gain on a base config, paired: the base, every variant (the base plus one knob or a few) and a
reference (the setting the speed-up is claimed against) run once per round, in an order rotated every round, each
a job of the pipeline in its own process; per-round ratios give each config's speed-up over the base and over the
reference (geometric mean, t-interval). Then the base and the fastest variant once more under the profiler.

    python -m bench.knob_gains --base "experiment=seed-t4-graphs gpu=auto batch.split=4x1" \\
        --reference "experiment=seed-t4 gpu=auto batch.split=4x1" \\
        --variant train.loss=model --variant "train.loss=compiled train.optimizer=adamw_torch_fused" \\
        [--rounds 4] [--steps 30] [--warmup 5] [--budget-s S] [--profile] [--out DIR]

A run's figure is the 20%-trimmed mean of its steady steps (after the warm-up, none that compiled); its tokens per
step are the same for every config of one split, so a step-time ratio is the tokens/s ratio. A config that fails
leaves the rounds (its reason is printed); no new round starts once `--budget-s` would be passed. Prints a line a
job, the table, the profiles; writes every run's figures to DIR/knob-gains.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import statistics
import time
from pathlib import Path

from bench.twin import paired
from pipeline.config.compose import compose_job
from pipeline.config.validate import validate
from pipeline.jobs import runner, task
from pipeline.measure.stats import trimmed_mean

PROFILE = ["measure.profile=true", "measure.profile_steps=3"]
PROFILED = ("launches_per_step", "kernels_per_step", "device_ms", "host_ms", "device_busy_fraction", "syncs_per_step")


def run_job(overrides: list[str], warmup: int) -> dict:
    cfg = compose_job("config", overrides)
    outcome = task.run(validate(cfg))  # checked as the command line checks it before a job
    steady = [s.step_time_s for s in outcome.result.steps if s.step > warmup and s.steady_candidate]
    memory = outcome.result.memory
    return {
        "status": str(outcome.status),
        "error": outcome.result.error,
        "figure": trimmed_mean(steady) if outcome.status == "ok" and steady else None,
        "steps": steady,
        "losses": [s.loss for s in outcome.result.steps],
        "peak_gib": (memory.peak_bytes or 0) / 2**30 if memory else None,
        "gpu_busy": outcome.result.gpu_busy,
        "compile_note": outcome.result.compile_note,
        "profile": outcome.result.profile,
        "wall_s": outcome.summary.wall_s,
    }


def rotated(names: list[str], r: int) -> list[str]:
    return names[r % len(names) :] + names[: r % len(names)]


def run_rounds(args, configs: dict[str, list[str]]) -> dict[str, dict[int, dict]]:
    runs: dict[str, dict[int, dict]] = {name: {} for name in configs}
    started, failed = time.perf_counter(), set()
    for r in range(args.rounds):
        spent = time.perf_counter() - started
        if args.budget_s and r and spent + spent / r > args.budget_s:
            print(f"[gains] round {r + 1} not started: {spent:.0f} s spent of --budget-s {args.budget_s:g}", flush=True)
            break
        for name in rotated([n for n in configs if n not in failed], r):
            run = run_job(configs[name], args.warmup)
            runs[name][r] = run
            if run["figure"] is None:
                failed.add(name)
                print(f"[gains] {name}: {run['status']}, left out of the rounds: {run['error']}", flush=True)
    return runs


def against(runs: dict[str, dict[int, dict]], name: str, other: str) -> tuple[float, float, float] | None:
    """`name`'s speed-up over `other` (other's time over name's), paired by round."""
    rounds = [r for r in runs[name] if r in runs[other] and runs[name][r]["figure"] and runs[other][r]["figure"]]
    return paired([runs[other][r]["figure"] / runs[name][r]["figure"] for r in rounds])


def cell(value: tuple[float, float, float] | None) -> str:
    return f"{value[0]:.2f}x [{value[1]:.2f}, {value[2]:.2f}]" if value else "-"


def table(runs: dict[str, dict[int, dict]], base: str, reference: str | None) -> str:
    head = ["config", "runs", "s/step (median of runs)", "vs base (95%, paired)"]
    head += ["vs reference (95%, paired)"] if reference else []
    head += ["peak GiB", "GPU busy", "loss dev vs base", "compiled"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    base_losses = next((run["losses"] for run in runs[base].values() if run["losses"]), [])
    for name, by_round in runs.items():
        ok = [run for run in by_round.values() if run["figure"]]
        median = statistics.median(run["figure"] for run in ok) if ok else math.nan
        row = [name, str(len(ok)), f"{median:.4f}", "base" if name == base else cell(against(runs, name, base))]
        if reference:
            row.append("reference" if name == reference else cell(against(runs, name, reference)))
        last = (ok or list(by_round.values()) or [{}])[-1]
        dev = max(
            (abs(a - b) / abs(b) for a, b in zip(last.get("losses", []), base_losses, strict=False)), default=math.nan
        )
        busy = last.get("gpu_busy")
        row += [f"{last.get('peak_gib') or math.nan:.2f}", f"{busy:.2f}" if busy is not None else "-", f"{dev:.1e}"]
        row.append((last.get("compile_note") or "-")[:80] if ok else f"failed: {(last.get('error') or '')[:80]}")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def profiles(args, configs: dict[str, list[str]], names: list[str]) -> dict[str, dict]:
    out = {}
    for name in names:
        run = run_job([*configs[name], *PROFILE], args.warmup)
        out[name] = run["profile"] or {}
        shown = ", ".join(f"{k} {out[name][k]:.3g}" for k in PROFILED if out[name].get(k) is not None)
        print(f"[gains] profile {name}: step {run['figure'] or math.nan:.4f} s, {shown or run['status']}", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="the base config's overrides, one string")
    parser.add_argument("--reference", help="the setting speed-ups are also given against (overrides, one string)")
    parser.add_argument("--variant", action="append", default=[], help="overrides added to the base (repeatable)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--budget-s", type=float, default=None)
    parser.add_argument("--profile", action="store_true", help="profile the base and the fastest variant after")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "bench-out")))
    args = parser.parse_args()
    folder = args.out.resolve()
    folder.mkdir(parents=True, exist_ok=True)
    common = [f"train.steps={args.steps}", f"measure.warmup_steps={args.warmup}", "train.progress_bar=false"]
    common += [f"paths.root={folder / 'store'}"]
    base = shlex.split(args.base)
    configs = {"base": [*base, *common]}
    configs.update({variant: [*base, *shlex.split(variant), *common] for variant in args.variant})
    if args.reference:
        configs["reference"] = [*shlex.split(args.reference), *common]
    for name, overrides in configs.items():
        compose_job("config", overrides)  # every config composes before anything runs
        print(f"[gains] {name}: python -m pipeline.train {shlex.join(overrides)}", flush=True)
    runner.warm_up("forkserver")
    runs = run_rounds(args, configs)
    print(table(runs, "base", "reference" if args.reference else None), flush=True)
    record = {"configs": configs, "runs": {name: list(by_round.values()) for name, by_round in runs.items()}}
    if args.profile:
        variants = [n for n in args.variant if any(run["figure"] for run in runs[n].values())]
        median = {n: statistics.median(r["figure"] for r in runs[n].values() if r["figure"]) for n in variants}
        record["profiles"] = profiles(args, configs, ["base", *([min(median, key=median.get)] if median else [])])
    (folder / "knob-gains.json").write_text(json.dumps(record, indent=1, default=str))


if __name__ == "__main__":
    main()
