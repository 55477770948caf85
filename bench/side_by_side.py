"""Scripts side by side in rotated rounds of fresh processes: each round runs every script once, each in a process of
its own, the order rotated from round to round; a run's figure is the 20%-trimmed mean of its step times after
`--warmup` (of a pipeline job's, `bench.job_json`'s, none that compiled, as a study leaves them out); each script's
ratio to the reference (the first named) is the geometric mean over the rounds of the round's ratio, with a
t-interval (neighbouring processes share the machine's drift, so it cancels in a pair).

    python -m bench.side_by_side --rounds 4 --warmup 5 --out DIR \\
        seed="python bench/plain_trl.py --split 4x1 --steps 30" \\
        unsloth="env PYTHONPATH=/tmp/uns-site python bench/unsloth_recipe.py --split 4x1 --steps 30"

Each command is given `--out FILE` and must write there a JSON with `step_times_s`, `losses` and
`peak_reserved_bytes` (bench/plain_trl.py and bench/unsloth_recipe.py do). Prints a line a run and a table at the
end: each script's median step, its ratio to the reference with the interval, its peak and its losses' largest
relative deviation from the reference's; then every other pair, paired over the rounds both ran. The table of a
folder it wrote, again: `python -m bench.side_by_side --summarize DIR --reference seed --warmup 8`.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import statistics
import subprocess
import time
from pathlib import Path

from scipy.stats import t as student_t

from pipeline.measure.stats import trimmed_mean

GIB = 2**30


def rounds_order(names: list[str], number: int) -> list[str]:
    """Round `number`'s order: the names rotated by it."""
    k = number % len(names)
    return names[k:] + names[:k]


def interval(ratios: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """Geometric mean of per-round ratios and its t-interval (the point alone for one round)."""
    logs = [math.log(r) for r in ratios]
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return math.exp(mean), math.exp(mean), math.exp(mean)
    half = student_t.ppf(0.5 + level / 2, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def run_one(command: str, out: Path, warmup: int) -> dict:
    """One process of `command`; its record, with its figure (`figure`, None where it failed) and wall seconds."""
    started = time.perf_counter()
    done = subprocess.run([*shlex.split(command), "--out", str(out)], capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0 or not out.is_file():
        return {"figure": None, "wall_s": wall, "error": (done.stderr or done.stdout).strip().splitlines()[-1:]}
    return {**figured(json.loads(out.read_text(encoding="utf-8")), warmup), "wall_s": wall}


def deviation(losses: list[float], reference: list[float]) -> float | None:
    """The largest relative deviation of one run's losses from the reference run's, over the steps both logged."""
    pairs = [(a, b) for a, b in zip(losses, reference, strict=False) if b]
    return max(abs(a - b) / abs(b) for a, b in pairs) if pairs else None


def figured(record: dict, warmup: int) -> dict:
    """A run's record with its figure: the trimmed mean of its steps after `warmup`, less those its `steady` flags
    leave out (a pipeline job's: a step that compiled, as a CUDA-graph config does at each new shape of varying
    lengths, is no steady step in a study either); None where it has none, or where the run did not finish (its
    `status` other than ok: the steps of a run that ran out of memory at step 10 are not its speed)."""
    times = record.get("step_times_s", [])
    flags = record.get("steady") or [True] * len(times)  # a plain script's record has no flags: every step counts
    steady = [t for t, flag in zip(times[warmup:], flags[warmup:], strict=True) if flag]
    finished = record.get("status", "ok") == "ok"
    return {**record, "figure": trimmed_mean(steady) if steady and finished else None}


def recorded(folder: Path, warmup: int) -> dict[str, list[dict | None]]:
    """The runs a side by side wrote to `folder` (NAME-ROUND.json), by script and round (None: a run not made)."""
    found = {}
    for path in folder.glob("*-*.json"):
        name, _, number = path.stem.rpartition("-")
        found[(name, int(number))] = figured(json.loads(path.read_text(encoding="utf-8")), warmup)
    rounds = 1 + max((n for _, n in found), default=-1)
    names = sorted({name for name, _ in found})
    return {name: [found.get((name, n)) for n in range(rounds)] for name in names}


def paired(runs: list[dict | None], reference: list[dict | None]) -> tuple[float, float, float] | None:
    """The time of `runs` over `reference`'s, paired within each round both ran; None without a pair."""
    ratios = [
        r["figure"] / b["figure"]
        for r, b in zip(runs, reference, strict=True)
        if r and b and r["figure"] and b["figure"]
    ]
    return interval(ratios) if ratios else None


def _rounds(runs: list[dict | None], reference: list[dict | None]) -> int:
    return sum(1 for r, b in zip(runs, reference, strict=True) if r and b and r["figure"] and b["figure"])


def _said(ratio: tuple[float, float, float], rounds: int) -> str:
    """`0.311x [0.263, 0.367]: 3.22x faster`, `... : not told apart` where the interval holds 1; one round has none."""
    mean, low, high = ratio
    if rounds < 2:
        return f"{mean:.3f}x (one round: no interval)"
    verdict = f"{1 / mean:.2f}x faster" if high < 1 else f"{mean:.2f}x slower" if low > 1 else "not told apart"
    return f"{mean:.3f}x [{low:.3f}, {high:.3f}]: {verdict}"


def summary(runs: dict[str, list[dict | None]], names: list[str]) -> str:
    """The table against the first name, then every other pair's paired time ratio and the rounds it pairs."""
    reference = names[0]
    lines = [
        f"| script | step s (median of runs) | time vs {reference} (95%, paired) | peak GiB | loss dev |",
        "|---|---|---|---|---|",
    ]
    for name in names:
        figures = [r["figure"] for r in runs[name] if r and r["figure"]]
        if not figures:
            lines.append(f"| {name} | failed | - | - | - |")
            continue
        ratio = paired(runs[name], runs[reference]) if name != reference else None
        said = "-" if ratio is None else _said(ratio, _rounds(runs[name], runs[reference]))
        peaks = [r["peak_reserved_bytes"] for r in runs[name] if r and r.get("peak_reserved_bytes")]
        peak = f"{max(peaks) / GIB:.2f}" if peaks else "-"  # none on the CPU
        first = lambda rs: next((r.get("losses") or [] for r in rs if r), [])  # noqa: E731
        dev = deviation(first(runs[name]), first(runs[reference]))
        lines.append(
            f"| {name} | {statistics.median(figures):.4f} | {said} | {peak} | {'-' if dev is None else f'{dev:.1e}'} |"
        )
    for i, name in enumerate(names[1:], 1):
        for other in names[i + 1 :]:
            ratio = paired(runs[name], runs[other])
            if ratio:
                rounds = _rounds(runs[name], runs[other])
                lines.append(f"{name} over {other}: time {_said(ratio, rounds)}, paired over {rounds} round(s)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scripts", nargs="*", help="NAME=COMMAND; the first is the reference")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("side-by-side"))
    parser.add_argument("--summarize", type=Path, help="a folder a side by side wrote: its table again")
    parser.add_argument("--reference", help="with --summarize: the script the table compares against")
    args = parser.parse_args(argv)
    if args.summarize:
        runs = recorded(args.summarize, args.warmup)
        names = sorted(runs, key=lambda n: n != args.reference)
        print(summary(runs, names))
        return
    commands = dict(s.split("=", 1) for s in args.scripts)
    names = list(commands)
    args.out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict | None]] = {n: [] for n in names}
    for number in range(args.rounds):
        for name in rounds_order(names, number):
            run = run_one(commands[name], args.out / f"{name}-{number}.json", args.warmup)
            runs[name].append(run)
            said = f"{run['figure']:.4f} s" if run["figure"] else f"failed: {run.get('error')}"
            print(f"[round {number}] {name}: {said} (wall {run['wall_s']:.0f} s)", flush=True)
    print(summary(runs, names))


if __name__ == "__main__":
    main()
