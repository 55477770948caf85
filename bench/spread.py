"""One config's speed from process to process: every job run of the MLflow stores given, one line each (its steady
median, the phases' medians, GPU busy, and the profiler's device and host time per step where the job profiled),
then per store the median of the runs and how far the farthest lies from it. With `--caches`, how many Triton
kernels' autotuned picks differ between compile caches (each cache dir's `*.best_config` files).

    python -m bench.spread warm=/tmp/spread/warm cold=/tmp/spread/cold-1,/tmp/spread/cold-2 [--caches DIR ...]

A store is a `paths.root` folder (its `mlflow.db`); several, comma-separated, pool under one label. `ROOT?KEY=VALUE`
keeps the store's runs whose parameter KEY is VALUE (a sweep of `measure.pin_cpu=false,true` in one store, two labels).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from mlflow.tracking import MlflowClient


def runs_of(root: Path, where: str = "") -> list[dict]:
    """Every finished job run of a store, oldest first: its name, metrics and result record; `where` (KEY=VALUE) keeps
    those whose parameter KEY is VALUE."""
    client = MlflowClient(f"sqlite:///{root}/mlflow.db")
    experiments = [e.experiment_id for e in client.search_experiments()]
    key, _, value = where.partition("=")
    found = []
    for run in client.search_runs(experiments, "tags.kind = 'job'", order_by=["attributes.start_time ASC"]):
        if key and str(run.data.params.get(key)).lower() != value.lower():
            continue
        with tempfile.TemporaryDirectory() as tmp:
            try:
                result = json.loads(Path(client.download_artifacts(run.info.run_id, "result.json", tmp)).read_text())
            except Exception:  # a run killed before its record: no figures
                continue
        found.append({"name": run.info.run_name, "metrics": run.data.metrics, "result": result})
    return found


def _median(steps: list[dict], key: str) -> float | None:
    values = [s[key] for s in steps if s.get(key) is not None]
    return statistics.median(values) if values else None


def line(run: dict, warmup: int) -> tuple[str, float | None]:
    """One run's line, and its steady median."""
    m, result = run["metrics"], run["result"]
    steady = [s for s in result["steps"] if s["step"] > warmup and not s["compile_s"] and not s["profiled"]]
    median = m.get("step_time_median_s")
    profile = result.get("profile") or {}
    phases = " ".join(
        f"{k[:3]} {v * 1000:.1f}" for k in ("forward_s", "backward_s", "optimizer_s") if (v := _median(steady, k))
    )
    said = [
        f"{run['name']:<28}",
        f"median {median:.4f}" if median else "median -",
        f"cv {m.get('step_time_cv_pct', float('nan')):.0f}%",
        f"ms {phases}",
        f"busy {result['gpu_busy']:.2f}" if result.get("gpu_busy") is not None else "",
        f"compile {result['timings'].get('compile_s', 0):.1f} s",
        f"host cpus {host['cpus']} nodes {host['nodes']} load {host['load_1m']}"
        if (host := result.get("host"))
        else "",
    ]
    if profile:
        said.append(
            f"profile: device {profile['device_ms']:.1f} ms host {profile['host_ms']:.1f} ms "
            f"launches {profile['launches_per_step']:.0f} graphs {profile.get('graph_launches_per_step', 0):.0f} "
            f"kernels {profile['kernels_per_step']:.0f} syncs {profile['syncs_per_step']:.1f}; host in ops "
            f"{profile['host_op_ms']:.1f} ms, in CUDA calls {profile['host_runtime_api_ms']:.1f} ms, outside ops "
            f"{profile['host_outside_ops_ms']:.1f} ms; top ops "
            + ", ".join(f"{o['name']} {o['self_cpu_ms_per_step']:.1f}" for o in profile["top_ops_by_self_cpu"][:5])
        )
    return "  ".join(s for s in said if s), median


def picks(cache: Path) -> dict[str, str]:
    """Each autotuned Triton kernel's pick in a compile cache: the kernel file's name -> its best config's launch
    parameters (block sizes, warps, stages; not the timing or hashes the file also holds)."""
    found = {}
    for path in cache.rglob("*.best_config"):
        config = json.loads(path.read_text())
        found[path.name] = json.dumps({k: v for k, v in config.items() if k.isupper() or k.startswith("num_")})
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stores", nargs="+", help="LABEL=ROOT[,ROOT...]")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--caches", nargs="*", type=Path, default=[])
    args = parser.parse_args(argv)
    print("| label | runs | median s | min | max | farthest from the median |")
    table = []
    for spec in args.stores:
        label, _, roots = spec.partition("=")
        medians = []
        for root in roots.split(","):
            root, _, where = root.partition("?")
            for run in runs_of(Path(root), where):
                text, median = line(run, args.warmup)
                print(f"[{label}] {text}")
                if median:
                    medians.append(median)
        if medians:
            mid = statistics.median(medians)
            far = max(abs(m / mid - 1) for m in medians)
            table.append(
                f"| {label} | {len(medians)} | {mid:.4f} | {min(medians):.4f} | {max(medians):.4f} | {far:.1%} |"
            )
    print("| label | runs | median s | min | max | farthest from the median |")
    print("|---|---|---|---|---|---|")
    print("\n".join(table))
    if len(args.caches) >= 2:
        found = [picks(c) for c in args.caches]
        shared = set.intersection(*(set(f) for f in found))
        differ = [k for k in shared if len({f[k] for f in found}) > 1]
        print(
            f"autotuned kernels: {[len(f) for f in found]} per cache, {len(shared)} in all, {len(differ)} picked apart"
        )
        for k in sorted(differ)[:10]:
            print(f"  {k}: " + " | ".join(f[k].strip()[:80] for f in found))


if __name__ == "__main__":
    main()
