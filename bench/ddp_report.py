"""A world-size sweep's figures, as recorded: per layout (micro-batch x accumulation x world size) its step time,
tokens/s, each rank's peak memory, its phases and DDP's all-reduce; the loss agreement between world sizes; and the
scaling efficiency (tokens/s on N devices over N times the tokens/s on one) from pairs of neighbouring processes.

    python bench/ddp_report.py ROOT

ROOT is the sweep's paths.root (its mlflow.db). The sweep is `python -m pipeline.train -m ... world_size=1,2
batch.split=... repeats=R`: repeat r of every layout ran in round r, neighbours in time, so a ratio between two
layouts is taken round by round and its interval is the comparison engine's (`pipeline.compare.paired`); with one
round there is no interval, and the report says so rather than printing a ratio of two processes measured apart.

Pairs compared: each layout on N devices against the layout on one with the same micro-batch (M x A x N against
M x NA x 1: the same work per rank per micro-batch), and the fastest on N against the fastest on one.
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from pathlib import Path

from mlflow.tracking import MlflowClient

from pipeline.compare.paired import compare_speedups

PHASES = ("forward", "backward", "optimizer", "data", "other")


def layouts(client: MlflowClient, experiment: str) -> dict[tuple[str, int], list]:
    """The sweep's finished job runs by (split, world size), each list ordered by repeat."""
    (sweep, *_) = client.search_runs([experiment], "tags.kind = 'sweep'", order_by=["attributes.start_time DESC"])
    found = defaultdict(list)
    query = f"tags.sweep_id = '{sweep.data.tags['sweep_id']}' and tags.kind = 'job'"
    for run in client.search_runs([experiment], query, max_results=1000):
        found[(run.data.params["batch.split"], int(run.data.params["world_size"]))].append(run)
    for runs in found.values():
        runs.sort(key=lambda r: int(r.data.tags.get("repeat", 0)))
    return dict(sorted(found.items(), key=lambda item: (item[0][1], item[0][0])))


def ok(run) -> bool:
    return run.data.tags.get("status") == "ok" and "tokens_per_s" in run.data.metrics


def figure(runs: list, key: str) -> float | None:
    values = [r.data.metrics[key] for r in runs if ok(r) and key in r.data.metrics]
    return statistics.median(values) if values else None


def text(value: float | None, form: str) -> str:
    return "-" if value is None else format(value, form)


def table(found: dict[tuple[str, int], list]) -> None:
    print(
        "| layout | runs ok | step s (median of runs) | tokens/s | peak GiB by rank | "
        + " | ".join(PHASES)
        + " | all-reduce s |"
    )
    print("|---" * (6 + len(PHASES)) + "|")
    for (split, size), runs in found.items():
        peaks = [text(figure(runs, f"peak_rank{r}_gib"), ".2f") for r in range(size)] if size > 1 else []
        peaks = peaks or [text(figure(runs, "peak_gib"), ".2f")]
        phases = [text(figure(runs, f"{p}_median_s"), ".4f") for p in PHASES]
        cells = [
            f"{split}x{size}",
            f"{sum(ok(r) for r in runs)}/{len(runs)}",
            text(figure(runs, "step_time_median_s"), ".4f"),
        ]
        cells += [text(figure(runs, "tokens_per_s"), ",.0f"), " / ".join(peaks), *phases]
        cells.append(text(figure(runs, "allreduce_median_s"), ".4f") if size > 1 else "-")
        print("| " + " | ".join(cells) + " |")


def losses(client: MlflowClient, run) -> list[float]:
    history = sorted(client.get_metric_history(run.info.run_id, "loss"), key=lambda m: m.step)
    return [m.value for m in history]


def loss_agreement(client: MlflowClient, found: dict[tuple[str, int], list]) -> None:
    """Every layout's per-step losses against the first layout on one device (round 0 of each)."""
    reference_key = next((key for key in found if key[1] == 1), None)
    if reference_key is None or not found[reference_key]:
        print("loss agreement: no layout on one device to compare with")
        return
    reference = losses(client, found[reference_key][0])
    print(f"loss agreement (largest relative deviation per step from {reference_key[0]}x1, round 0):")
    for (split, size), runs in found.items():
        mine = losses(client, runs[0])
        pairs = [(a, b) for a, b in zip(mine, reference, strict=False) if b]
        worst = max((abs(a - b) / abs(b) for a, b in pairs), default=None)
        print(f"  {split}x{size}: {text(worst, '.1e')} over {len(pairs)} steps")


def scaling(name: str, many: list, one: list, size: int, confidence: float = 0.95) -> None:
    """`many` (on `size` devices) against `one` (on one), round by round: tokens/s ratio and its efficiency."""
    rounds = [
        a.data.metrics["tokens_per_s"] / b.data.metrics["tokens_per_s"]
        for a, b in zip(many, one, strict=False)
        if ok(a) and ok(b) and a.data.tags.get("repeat") == b.data.tags.get("repeat")
    ]
    if len(rounds) < 2:
        print(f"  {name}: {len(rounds)} paired round(s): no interval (run the sweep with repeats=2 or more)")
        return
    c = compare_speedups(name, "one", rounds, confidence)
    print(
        f"  {name}: tokens/s {c.speedup:.2f}x [{c.low:.2f}, {c.high:.2f}]; scaling efficiency "
        f"{100 * c.speedup / size:.0f}% [{100 * c.low / size:.0f}%, {100 * c.high / size:.0f}%] "
        f"({100 * confidence:g}%, paired over {c.rounds} rounds: {', '.join(f'{r:.2f}' for r in rounds)})"
    )


def scalings(found: dict[tuple[str, int], list]) -> None:
    print("scaling efficiency (tokens/s on N devices over N x tokens/s on one):")
    one_by_micro = {split.split("x")[0]: (split, runs) for (split, size), runs in found.items() if size == 1}
    for (split, size), runs in found.items():
        single = one_by_micro.get(split.split("x")[0])
        if size > 1 and single:
            scaling(f"{split}x{size} vs {single[0]}x1", runs, single[1], size)
    fastest = {}
    for (split, size), runs in found.items():
        step = figure(runs, "step_time_median_s")
        if step is not None and (size not in fastest or step < fastest[size][0]):
            fastest[size] = (step, split, runs)
    if 1 in fastest:
        for size, (_, split, runs) in sorted(fastest.items()):
            if size > 1:
                scaling(f"fastest {split}x{size} vs fastest {fastest[1][1]}x1", runs, fastest[1][2], size)


def main(root: Path) -> None:
    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("batch-split").experiment_id
    found = layouts(client, experiment)
    table(found)
    print()
    loss_agreement(client, found)
    print()
    scalings(found)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
