"""Optimize benchmark: the exhaustive grid against the Optuna study, on the same space, cap and measurement.

`run` measures every config of the space with one Hydra multirun of `pipeline.train` (each job stops at the first
step over the cap, as any capped job does), then runs `pipeline.optimize` on the same base config and space in its
own store. `summarize` reads both stores and prints: the grid's table and GPU-seconds (sum of job wall times), the
study's answer and GPU-seconds (probes included), their ratio, whether the study found the grid's best feasible
config (or one tied with it), and the predictor's error on every config the grid measured.

    python bench/grid_vs_study.py run --out OUT -- model=qwen3-1.7b batch.effective=16 mem_cap=14GiB ...
    python bench/grid_vs_study.py summarize OUT
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

GIB = 2**30
KNOBS = {"train.gradient_checkpointing": ["true", "false"], "train.dtype": ["bf16", "fp16"]}


def _log(cmd: list[str], path: Path) -> None:
    started = time.time()
    print(f"$ {' '.join(cmd)}", flush=True)
    with open(path, "w") as log:
        code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode
    print(f"  exit {code} after {time.time() - started:.0f} s (log: {path})", flush=True)
    if code:
        print(path.read_text()[-3000:], flush=True)


def run(args) -> None:
    from pipeline.search.space import splits

    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    base = [o for o in args.overrides if o != "--"]
    (out / "base.json").write_text(json.dumps(base))
    effective = int(next(o.split("=", 1)[1] for o in base if o.startswith("batch.effective=")))
    split_list = ",".join(splits(effective, 1))
    knobs = [f"{k}={','.join(v)}" for k, v in KNOBS.items()]
    if not args.skip_grid:
        # the sweep goes last: a later override of the same key wins, and the base may set the knobs
        grid = [sys.executable, "-m", "pipeline.train", "-m", *base, f"batch.split={split_list}", *knobs]
        _log(grid + [f"paths.root={out / 'grid'}"], out / "grid.log")
    study = [sys.executable, "-m", "pipeline.optimize", "optimize=ckpt-dtype", f"optimize.trials={args.trials}", *base]
    _log(study + [f"paths.root={out / 'study'}"], out / "study.log")


def _grid(root: Path) -> list[dict]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    experiments = client.search_experiments()
    rows = []
    for run in client.search_runs([e.experiment_id for e in experiments], max_results=1000):
        if run.data.tags.get("kind") in ("sweep", "study", "probe"):
            continue
        p, m = run.data.params, run.data.metrics
        rows.append(
            {
                "config": " ".join(f"{k}={p[k].lower()}" for k in ("batch.split", *KNOBS)),
                "micro": int(p["batch.split"].split("x")[0]),
                "ckpt": p["train.gradient_checkpointing"].lower() == "true",
                "dtype": p["train.dtype"],
                "status": run.data.tags.get("status", "-"),
                "verdict": run.data.tags.get("verdict", "-"),
                "median": m.get("step_time_median_s"),
                "low": m.get("step_time_ci_low_s"),
                "high": m.get("step_time_ci_high_s"),
                "tokens_per_s": m.get("tokens_per_s"),
                "peak_gib": m.get("peak_gib"),
                "wall_s": m.get("wall_s") or 0.0,
            }
        )
    return rows


def _study(root: Path) -> dict:
    import optuna

    storage = f"sqlite:///{root / 'optuna.db'}"
    name = optuna.get_all_study_summaries(storage)[0].study_name
    study = optuna.load_study(study_name=name, storage=storage)
    return {"study": study, "calibration": study.user_attrs.get("calibration", {})}


def summarize(args) -> None:
    from pipeline.config.compose import compose_job
    from pipeline.search.answer import best_trial, format_trials, trial_rows
    from pipeline.search.predictor import Knobs, Predictor, Shape
    from pipeline.search.study import probe_points

    out = args.out
    grid = [
        row for root in sorted(out.glob("grid*/")) for row in _grid(root)
    ]  # grid/, and any grid2/ ... completing it
    found = _study(out / "study")
    study, calibration = found["study"], found["calibration"]
    feasible = [r for r in grid if r["status"] == "ok" and r["verdict"] == "fits" and r["median"]]
    best = min(feasible, key=lambda r: r["median"])
    tied = [r for r in feasible if r["low"] is not None and r["low"] <= best["high"]]
    grid_seconds = sum(r["wall_s"] for r in grid)
    print(f"grid: {len(grid)} configs, {len(feasible)} fit; GPU-seconds (job wall times) {grid_seconds:.0f}\n")
    print("| config | status | step s: median [95% CI] | tokens/s | peak GiB | job s |")
    print("|---|---|---|---|---|---|")
    for r in sorted(grid, key=lambda r: (r["median"] is None or r["verdict"] != "fits", r["median"] or 0)):
        step = "-" if r["median"] is None else f"{r['median']:.4f} [{r['low']:.4f}, {r['high']:.4f}]"
        tokens = "-" if r["tokens_per_s"] is None else f"{r['tokens_per_s']:,.0f}"
        peak = "-" if r["peak_gib"] is None else f"{r['peak_gib']:.2f}"
        print(f"| {r['config']} | {r['verdict']} | {step} | {tokens} | {peak} | {r['wall_s']:.1f} |")
    print(f"\ngrid best feasible: {best['config']} ({best['median']:.4f} s/step)")
    print(
        "  tied with it (95% intervals overlap): " + (", ".join(r["config"] for r in tied if r is not best) or "none")
    )

    rows = trial_rows(study)
    study_seconds = sum(r["gpu_seconds"] or 0.0 for r in rows) + calibration.get("gpu_seconds", 0.0)
    answer = best_trial(study)
    print("\nstudy trials:\n" + format_trials(rows))
    label = answer.user_attrs["label"] if answer else None
    print(f"\nstudy answer: {label}")
    print(
        f"study GPU-seconds (probes {calibration.get('gpu_seconds', 0.0):.0f} s included): {study_seconds:.0f} = "
        f"{100 * study_seconds / grid_seconds:.0f}% of the grid's {grid_seconds:.0f}"
    )
    verdict = (
        "the grid's best"
        if label == best["config"]
        else "tied with the grid's best"
        if label in {r["config"] for r in tied}
        else "NOT the grid's best"
    )
    print(f"the study's answer is {verdict}")

    cfg = compose_job("config", json.loads((out / "base.json").read_text()))
    predictor = Predictor(Shape.from_model(cfg.model), cfg.lora.r, list(cfg.lora.target_modules))
    length = cfg.train.max_length
    predictor.calibrate(probe_points(calibration, length))
    print(f"\npredictor (calibrated on the study's probes {calibration['probes']}) against every grid measurement:")
    errors = []
    for r in sorted(grid, key=lambda r: (r["ckpt"], r["dtype"], r["micro"])):
        if not r["peak_gib"]:
            continue
        predicted = predictor.predict(Knobs(r["micro"], length, r["dtype"], r["ckpt"])) / GIB
        error = (predicted - r["peak_gib"]) / r["peak_gib"]
        note = " (stopped at its first step over the cap: its peak is a lower bound)" if r["verdict"] != "fits" else ""
        if not note:
            errors.append(abs(error))
        print(
            f"  {r['config']:70s} measured {r['peak_gib']:6.2f}  predicted {predicted:6.2f} GiB  {100 * error:+5.1f}%{note}"
        )
    if errors:
        print(
            f"error over the {len(errors)} configs that ran to the end: mean {100 * sum(errors) / len(errors):.1f}%, "
            f"max {100 * max(errors):.1f}%"
        )
    replay = _replay(study, predictor, length, {r["config"]: r for r in grid})
    (out / "summary.json").write_text(
        json.dumps(
            {
                "grid": grid,
                "grid_seconds": grid_seconds,
                "grid_best": best["config"],
                "study_seconds": study_seconds,
                "study_answer": label,
                "calibration": calibration,
                "trials": rows,
                "replay": replay,
            },
            default=str,
        )
    )


def _replay(study, predictor, length: int, grid: dict) -> list[dict]:
    """The predictor as the code stands, replayed on the study's own order: before each launched or skipped trial it
    knows the probes and the peaks of the trials decided before it, nothing else (out of sample)."""
    from optuna.trial import TrialState

    from pipeline.search.predictor import Knobs
    from pipeline.search.study import probe_points

    predictor.measured = probe_points(study.user_attrs["calibration"], length)
    print("\npredictor replayed in the study's order (each prediction knows only what was measured before it):")
    out, errors = [], []
    for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
        a = t.user_attrs
        if t.state == TrialState.FAIL or "label" not in a:
            continue
        split, ckpt, dtype = (t.params[k] for k in ("batch.split", "train.gradient_checkpointing", "train.dtype"))
        knobs = Knobs(int(split.split("x")[0]), length, dtype, bool(ckpt))
        predicted = predictor.predict(knobs) / GIB
        measured = grid.get(a["label"], {})
        truth = measured.get("peak_gib") if measured.get("verdict") == "fits" else None
        error = None if truth is None else (predicted - truth) / truth
        if error is not None:
            errors.append(abs(error))
        out.append({"trial": t.number, "config": a["label"], "predicted_gib": predicted, "grid_peak_gib": truth})
        shown = f"{100 * error:+5.1f}%" if error is not None else f"(grid: {measured.get('verdict', '-')})"
        print(
            f"  {t.number:3d} {a['label']:70s} predicted {predicted:6.2f}  grid {truth or float('nan'):6.2f}  {shown}"
        )
        if a.get("status") in ("ok", "pruned") and a.get("peak_gib"):
            predictor.measured.append((knobs, a["peak_gib"] * GIB))
    if errors:
        print(
            f"replayed error: mean {100 * sum(errors) / len(errors):.1f}%, max {100 * max(errors):.1f}% over {len(errors)}"
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--trials", type=int, default=20)
    r.add_argument("--skip-grid", action="store_true")
    r.add_argument("overrides", nargs="*", help="Hydra overrides of the base config (after --)")
    s = sub.add_parser("summarize")
    s.add_argument("out", type=Path)
    args = parser.parse_args()
    run(args) if args.command == "run" else summarize(args)


if __name__ == "__main__":
    main()
