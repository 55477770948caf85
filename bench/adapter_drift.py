"""Long runs of the job with the adapters in fp32 against `train.adapter_dtype=compute` (bf16 adapters, whose AdamW
moments are bf16 too): whether the losses part once the optimizer's state has grown. The speed knobs' loss checks
run 8-30 steps; this runs hundreds, on the CPU, with a task the tiny model can learn (each record one random word
repeated, byte-level), paired: both arms share the seed, the rows and their order.

    python bench/adapter_drift.py --dir /tmp/drift --steps 800 --seeds 42 7

Prints each arm's loss averaged over windows of 100 steps, and the compute arm's gap over fp32 per window.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
from pathlib import Path

ARMS = ("fp32", "compute")
SHAPE = ("model.hidden_size=128", "model.intermediate_size=256", "model.head_dim=32")


def write_rows(path: Path, count: int = 4000, seed: int = 0) -> None:
    """Records of one random word of 5-9 letters repeated to 120 bytes: learnable by copying."""
    rng = random.Random(seed)
    with path.open("w") as f:
        for _ in range(count):
            word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(5, 9)))
            f.write(json.dumps({"text": ((word + " ") * 20)[:120]}) + "\n")


def losses(store: Path, experiment: str) -> dict[str, list[float]]:
    """Each arm's logged loss by step, from the MLflow store the runs wrote (the newest run of each arm, where a
    folder used before holds earlier ones)."""
    import mlflow

    client = mlflow.tracking.MlflowClient(f"sqlite:///{store}/mlflow.db")
    exp = client.get_experiment_by_name(experiment)
    out = {}
    for run in client.search_runs([exp.experiment_id], order_by=["attributes.start_time ASC"]):
        history = sorted(client.get_metric_history(run.info.run_id, "loss"), key=lambda m: m.step)
        out[run.data.params["train.adapter_dtype"]] = [m.value for m in history]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--steps", type=int, default=800)
    parser.add_argument("--learning-rate", default="1e-3")
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 7])
    parser.add_argument("--window", type=int, default=100)
    args = parser.parse_args()
    root = Path(args.dir)
    root.mkdir(parents=True, exist_ok=True)
    rows = root / "copy.jsonl"
    write_rows(rows)
    for seed in args.seeds:
        experiment = f"drift-seed{seed}"
        for arm in ARMS:
            subprocess.run(
                [sys.executable, "-m", "pipeline.train", "data=jsonl", f"data.path={rows}", "train.dtype=bf16",
                 f"train.adapter_dtype={arm}", f"train.seed={seed}", f"train.steps={args.steps}",
                 f"train.learning_rate={args.learning_rate}", *SHAPE, f"paths.root={root}",
                 f"tracking.experiment={experiment}"],
                check=True,
            )  # fmt: skip
        by_arm = losses(root, experiment)
        w = args.window
        means = {arm: [sum(v[i : i + w]) / len(v[i : i + w]) for i in range(0, len(v), w)] for arm, v in by_arm.items()}
        print(f"seed {seed}, loss over windows of {w} steps:")
        for arm in ARMS:
            print(f"  {arm:8}", " ".join(f"{x:.3f}" for x in means[arm]))
        print("  gap     ", " ".join(f"{c - f:+.3f}" for f, c in zip(means["fp32"], means["compute"], strict=True)))


if __name__ == "__main__":
    main()
