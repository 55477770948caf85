"""Measurement benchmark (GPU): the pipeline against plain TRL on the seed's setup, splits 1x4 / 2x2 / 4x1.

Per repeat, one pipeline sweep (`python -m pipeline.train -m experiment=seed-t4 ...`, its own jobs isolated) and one
plain-TRL process per split (bench/plain_trl.py), alternating which goes first and reversing the split order every
other repeat. Prints, per split: the pipeline's step median with its 95% CI, plain TRL's median, their ratio over the
repeats, the per-job fixed cost (spawn + model build + data + trainer), and peak reserved memory; then the ranking.

    python bench/compare_trl.py measure --steps 20 --repeats 2 --first 0 --out results/     # on the GPU machine
    python bench/compare_trl.py summarize results/raw-*.json                                # anywhere
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from pipeline.compare.ranking import rank
from pipeline.measure.stats import summarize

SPLITS = ["1x4", "2x2", "4x1"]
GIB = 2**30
# --device cpu: the same setup at a size a CPU trains in milliseconds per step, in fp32; only ratios mean anything
CPU_SHAPE = {
    "hidden_size": 256,
    "intermediate_size": 768,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "vocab_size": 4096,
}
CPU_LENGTH = 128


def device_overrides(device: str) -> list[str]:
    if device == "cuda":
        return []
    shape = [f"model.{k}={v}" for k, v in CPU_SHAPE.items()]
    return [
        "gpu=cpu",
        "model=tiny",
        *shape,
        "train.dtype=fp32",
        f"train.max_length={CPU_LENGTH}",
        f"data.length={CPU_LENGTH}",
    ]


def run_pipeline(order: list[str], steps: int, warmup: int, store: Path, log, device: str = "cuda") -> None:
    cmd = [
        sys.executable,
        "-m",
        "pipeline.train",
        "-m",
        "experiment=seed-t4",
        f"train.steps={steps}",
        f"measure.warmup_steps={warmup}",
        f"batch.split={','.join(order)}",
        "train.progress_bar=false",
        f"paths.root={store}",
        *device_overrides(device),
    ]
    subprocess.run(cmd, check=True, stdout=log, stderr=subprocess.STDOUT)


def run_plain(split: str, steps: int, out: Path, log, device: str = "cuda") -> dict:
    path = out / f"plain-{split}-{time.time_ns()}.json"
    cmd = [
        sys.executable,
        str(Path(__file__).with_name("plain_trl.py")),
        "--split",
        split,
        "--steps",
        str(steps),
        "--out",
        str(path),
    ]
    if device == "cpu":
        cmd += ["--device", "cpu", "--shape", json.dumps(CPU_SHAPE), "--length", str(CPU_LENGTH)]
    subprocess.run(cmd, check=True, stdout=log, stderr=subprocess.STDOUT)
    return json.loads(path.read_text())


def pipeline_records(store: Path) -> list[dict]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{store / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("batch-split")
    records = []
    for run in client.search_runs([experiment.experiment_id], order_by=["attributes.start_time ASC"]):
        if run.data.tags.get("kind") == "sweep":
            continue
        local = client.download_artifacts(run.info.run_id, "result.json")
        record = json.loads(Path(local).read_text())
        record["split"] = run.data.params["batch.split"]
        records.append(record)
    return records


def reduce_pipeline(rec: dict) -> dict:
    keep = ("step", "step_time_s", "forward_s", "backward_s", "optimizer_s", "data_s", "other_s", "loss", "tokens")
    return {
        "split": rec["split"],
        "status": rec["status"],
        "spawn_s": rec.get("spawn_s"),
        "setup_s": rec.get("setup_s"),
        "memory": rec.get("memory"),
        "placement": rec.get("placement"),
        "timings": rec.get("timings"),
        "model_flops_per_token": rec.get("model_flops_per_token"),
        "repeat": rec.get("repeat"),
        "steps": [{k: s[k] for k in keep if k in s} for s in rec.get("steps", [])],
    }


def measure(args) -> None:
    """Run the repeats [first, first + repeats) and write raw-<first>.json into --out after every repeat."""
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    store = work / f"mlruns-{args.first}"
    raw = {"steps": args.steps, "warmup": args.warmup, "device": args.device, "pipeline": [], "plain": []}
    started = time.time()
    with open(args.out / f"bench-{args.first}.log", "w") as log:
        for r in range(args.first, args.first + args.repeats):
            order = SPLITS if r % 2 == 0 else SPLITS[::-1]
            before = len(pipeline_records(store)) if (store / "mlflow.db").exists() else 0

            def pipeline_side(order=order):
                run_pipeline(order, args.steps, args.warmup, store, log, args.device)

            def plain_side(order=order, r=r):
                for split in order:
                    raw["plain"].append(run_plain(split, args.steps, work, log, args.device) | {"repeat": r})

            for side in (pipeline_side, plain_side) if r % 2 == 0 else (plain_side, pipeline_side):
                side()
            for rec in pipeline_records(store)[before:]:
                raw["pipeline"].append(reduce_pipeline(rec | {"repeat": r}))
            (args.out / f"raw-{args.first}.json").write_text(json.dumps(raw))
            print(f"repeat {r} done at {time.time() - started:.0f} s", flush=True)


def summarize_raw(paths: list[Path]) -> None:
    pipeline, plain = [], []
    for path in paths:
        raw = json.loads(path.read_text())
        warmup, steps = raw["warmup"], raw["steps"]
        pipeline += raw["pipeline"]
        plain += raw["plain"]
    rows = {}
    for split in SPLITS:
        mine = sorted((r for r in pipeline if r["split"] == split and r["status"] == "ok"), key=lambda r: r["repeat"])
        theirs = sorted((p for p in plain if p["split"] == split), key=lambda p: p["repeat"])
        steady = [[s["step_time_s"] for s in r["steps"] if s["step"] > warmup] for r in mine]
        pooled = summarize([t for times in steady for t in times])
        medians = [statistics.median(times) for times in steady]
        plain_medians = [statistics.median(p["step_times_s"][warmup - 1 :]) for p in theirs]
        by_repeat = {p["repeat"]: m for p, m in zip(theirs, plain_medians, strict=True)}
        ratios = [m / by_repeat[r["repeat"]] for r, m in zip(mine, medians, strict=True) if r["repeat"] in by_repeat]
        phases = {
            ph: statistics.median(s[f"{ph}_s"] for r in mine for s in r["steps"] if s["step"] > warmup)
            for ph in ("forward", "backward", "optimizer", "data", "other")
        }
        rows[split] = dict(
            pooled=pooled,
            medians=medians,
            plain=plain_medians,
            ratios=ratios,
            fixed=[r["spawn_s"] + r["setup_s"] for r in mine],
            spawn=[r["spawn_s"] for r in mine],
            reserved=[(r["memory"].get("peak_reserved_bytes") or 0) / GIB for r in mine],
            plain_reserved=[(p["peak_reserved_bytes"] or 0) / GIB for p in theirs],
            phases=phases,
        )
    # the splits ranked from their repeats, paired by repeat (neighbouring processes): the comparison engine's rule
    ranking = rank({s: dict(enumerate(r["medians"])) for s, r in rows.items()}, 0.95)
    judged = {s: (str(ranking.judgement(s)) if ranking else "not ranked (one repeat)") for s in rows}
    print(f"steps per job {steps}, first {warmup} excluded; repeats {len(rows['4x1']['medians'])}\n")
    print(
        "| split | pipeline step s: median [95% CI], pooled | per-repeat medians | plain TRL per-repeat medians |"
        " ratio pipeline/plain | fixed cost s | peak reserved GiB (pipeline / plain) | rank (paired by repeat) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for split, r in rows.items():
        p = r["pooled"]
        fmt = lambda xs, f=".3f": ", ".join(format(x, f) for x in xs)  # noqa: E731
        print(
            f"| {split} | {p.median:.3f} [{p.ci.low:.3f}, {p.ci.high:.3f}] | {fmt(r['medians'])} | {fmt(r['plain'])} |"
            f" {fmt(r['ratios'])} | {fmt(r['fixed'], '.1f')} | {fmt(r['reserved'], '.2f')} / "
            f"{fmt(r['plain_reserved'], '.2f')} | {judged[split]} |"
        )
    print(
        "\nphase medians (s): "
        + "; ".join(f"{s}: " + ", ".join(f"{k} {v:.3f}" for k, v in r["phases"].items()) for s, r in rows.items())
    )
    all_ratios = [x for r in rows.values() for x in r["ratios"]]
    if all_ratios:
        print(
            f"ratio pipeline/plain over all {len(all_ratios)} pairs: median {statistics.median(all_ratios):.3f}, "
            f"min {min(all_ratios):.3f}, max {max(all_ratios):.3f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--steps", type=int, default=100)
    m.add_argument("--warmup", type=int, default=5)
    m.add_argument("--repeats", type=int, default=3)
    m.add_argument("--first", type=int, default=0, help="index of the first repeat (orders alternate by index)")
    m.add_argument("--out", type=Path, required=True)
    m.add_argument("--work", default="/tmp/bench-work")
    m.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    s = sub.add_parser("summarize")
    s.add_argument("raw", type=Path, nargs="+")
    args = parser.parse_args()
    if args.command == "measure":
        measure(args)
    else:
        summarize_raw(args.raw)


if __name__ == "__main__":
    main()
