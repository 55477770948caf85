"""A study's answer beside the best configs of a grid recorded on its setting, in rotated rounds of fresh processes:
whether the answer is within 5% of the best of its neighbours, measured paired (the grid ran one process a config).

    python -m bench.near STUDY_LOG GRID_JSON [--top 3] [--rounds 3] [--warmup 6] [--out DIR] -- OVERRIDES...

The answer is the `python -m pipeline.train ...` line a study prints under `best feasible`; the neighbours are the
`--top` fastest configs of the grid (`bench.grid_export`'s JSON) whose peak fits its cap, each as the grid's setting
with its knob values. OVERRIDES (the cap, steps, warm-up, paths.root, a data path) replace the same keys in both, so
every side runs the same steps on the same records. Each side is one `python -m bench.job_json` process a round; the
table (`bench.side_by_side`) gives each neighbour's time over the answer's, paired over the rounds.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
from pathlib import Path

from bench import side_by_side

TRAIN = "python -m pipeline.train "


def answer_overrides(log: str) -> list[str]:
    """The overrides of the answer's command in a study's console log (the first train command after `best feasible`)."""
    after = log.split("\nbest feasible", 1)
    if len(after) < 2:
        raise SystemExit("error: no `best feasible` line in the study's log: the study has no answer to compare")
    line = next((ln.strip() for ln in after[1].splitlines() if ln.strip().startswith(TRAIN)), None)
    if line is None:
        raise SystemExit("error: no `python -m pipeline.train` line under `best feasible` in the study's log")
    return shlex.split(line)[3:]


def grid_overrides(grid: dict, top: int) -> list[tuple[dict, list[str]]]:
    """The `top` fastest configs of a grid that fit its cap: (their knob values, their overrides)."""
    try:
        setting = shlex.split(grid["setting"].split(" optimize.space=", 1)[0])
        fitting = [c for c in grid["configs"] if c.get("step_s") and (c.get("peak_gib") or 0) <= grid["cap_gib"]]
    except (KeyError, TypeError, AttributeError) as err:
        raise SystemExit(
            f"error: the grid is not bench.grid_export's JSON (setting, cap_gib, configs): {err!r}"
        ) from None
    if not fitting:
        raise SystemExit(f"error: no config of the grid fits its cap of {grid['cap_gib']} GiB: no neighbour to compare")
    best = sorted(fitting, key=lambda c: c["step_s"])[:top]
    return [(c, setting + [f"{k}={_value(v)}" for k, v in c["params"].items()]) for c in best]


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as err:
        raise SystemExit(f"error: {path}: {err.strerror}") from None


def verdict(runs: dict[str, list[dict | None]]) -> str:
    """The answer against the fastest neighbour of the rounds, paired: within 5% of it, or not, or not told apart."""
    ran = {n for n, found in runs.items() if any(r and r["figure"] for r in found)}
    grids = [n for n in runs if n != "answer" and n in ran]
    failed = [r["status"] for r in runs["answer"] if r and r.get("status", "ok") != "ok"]
    if "answer" not in ran and failed:
        return f"the answer finished in no round ({', '.join(failed)}): nothing to pair"
    if not grids or "answer" not in ran:
        return "no pair of the answer and a neighbour ran: nothing to say"
    fastest = min(grids, key=lambda n: statistics.median(r["figure"] for r in runs[n] if r and r["figure"]))
    ratio = side_by_side.paired(runs["answer"], runs[fastest])
    if ratio is None:
        return f"the answer and {fastest} never ran in one round: nothing to say"
    mean, low, high = ratio
    said = "within 5%" if high <= 1.05 else "not within 5%" if low > 1.05 else "not told apart from 5%"
    return f"the answer over the fastest neighbour ({fastest}): time {mean:.3f}x [{low:.3f}, {high:.3f}]: {said}"


def _value(v) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def merged(*sources: list[str]) -> list[str]:
    """Overrides by key, a later source's value replacing an earlier one's; the study's own keys left out."""
    by_key: dict[str, str] = {}
    for source in sources:
        for o in source:
            key = o.split("=", 1)[0].lstrip("+")
            if not key.startswith("optimize."):
                by_key[key] = o
    return list(by_key.values())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log", type=Path)
    parser.add_argument("grid", type=Path)
    parser.add_argument("--top", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=6)
    parser.add_argument("--out", type=Path, default=Path("near"))
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    common = argv[split + 1 :]
    steps = next((int(o.split("=", 1)[1]) for o in common if o.startswith("train.steps=")), None)
    if steps is not None and args.warmup >= steps:
        raise SystemExit(f"error: --warmup {args.warmup} leaves no steady step of train.steps={steps}")
    try:
        grid = json.loads(_read(args.grid))
    except json.JSONDecodeError as err:
        raise SystemExit(f"error: {args.grid}: not JSON ({err})") from None
    sides = {"answer": merged(answer_overrides(_read(args.log)), common)}
    for i, (config, overrides) in enumerate(grid_overrides(grid, args.top)):
        sides[f"grid{i + 1}"] = merged(overrides, common)
        print(
            f"[near] grid{i + 1}: {config['step_s']:.4f} s, {config['peak_gib']:.2f} GiB in the grid: {config['params']}"
        )
    for name, overrides in sides.items():
        print(f"[near] {name}: {TRAIN}{shlex.join(overrides)}", flush=True)
    job = [sys.executable, "-m", "bench.job_json"]
    scripts = [f"{name}={shlex.join(job + overrides)}" for name, overrides in sides.items()]
    side_by_side.main([*scripts, "--rounds", str(args.rounds), "--warmup", str(args.warmup), "--out", str(args.out)])
    print(verdict(side_by_side.recorded(args.out, args.warmup)))


if __name__ == "__main__":
    main()
