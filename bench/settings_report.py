"""The figures of `bench/settings_h200.sh`, read from the stores it left: per study its answer, its claim over the
baseline, its device seconds, what it decided and the predictor's worst error; the grid's fastest config that fits
and its device seconds; the study of the grid's space against the grid.

python bench/settings_report.py RES      (RES: the folder of the stages' paths.root folders, /tmp/settings)
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from mlflow.tracking import MlflowClient

os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # the report is a table: no download bars in it

CLAIM = re.compile(r"^  (\d+\.\d\dx the baseline's tokens/s \[[^]]+\].*|no speed-up over the baseline is claimed: .*)$")
GRID_OF = {"grid": "ckptdtype"}  # the study whose space the grid measures in full


def _client(root: Path) -> MlflowClient | None:
    db = root / "mlflow.db"
    return MlflowClient(f"sqlite:///{db}") if db.exists() else None


def _runs(client: MlflowClient) -> list:
    experiment = client.get_experiment_by_name("batch-split")
    return client.search_runs([experiment.experiment_id], max_results=5000) if experiment else []


def study_figures(root: Path) -> dict | None:
    client = _client(root)
    if client is None:
        return None
    runs = _runs(client)
    parent = next((r for r in runs if r.data.tags.get("kind") == "study"), None)
    if parent is None:
        return None
    answer = Path(client.download_artifacts(parent.info.run_id, "answer.md")).read_text(encoding="utf-8")
    best = re.search(r"^best feasible: (.+?)  \(", answer, re.M)
    claim = next((m[1] for line in answer.splitlines() if (m := CLAIM.match(line))), "-")
    m = parent.data.metrics
    return {
        "answer": best[1] if best else "none",
        "claim": claim,
        "seconds": m.get("gpu_seconds"),
        "predictor_max": m.get("predictor_error_max"),
        "decided": re.search(r"^decided .*$", answer, re.M)[0] if "decided " in answer else "-",
        "left_out": re.search(r"^left out .*$", answer, re.M)[0] if "left out" in answer else "",
    }


def grid_figures(root: Path) -> dict | None:
    client = _client(root)
    if client is None:
        return None
    jobs = [r for r in _runs(client) if r.data.tags.get("kind") == "job"]
    seconds = sum(r.data.metrics.get("wall_s", 0.0) for r in jobs)
    fitting = [
        r for r in jobs if r.data.tags.get("fit") in ("fits", "no-cap") and "step_time_median_s" in r.data.metrics
    ]
    ranked = sorted(fitting, key=lambda r: r.data.metrics["step_time_median_s"])
    rows = [(r.data.tags.get("display_name", r.info.run_name), r.data.metrics["step_time_median_s"]) for r in ranked]
    return {"seconds": seconds, "ranked": rows, "jobs": len(jobs)}


def main(res: Path) -> None:
    studies = {}
    for folder in sorted(p for p in res.iterdir() if p.is_dir()):
        if folder.name in GRID_OF:
            grid = grid_figures(folder)
            if grid is None:
                continue
            print(f"## {folder.name}: {grid['jobs']} jobs, {grid['seconds']:.0f} device-s")
            for name, step in grid["ranked"][:5]:
                print(f"  {name}: {step:.4f} s/step")
            study = studies.get(GRID_OF[folder.name]) or study_figures(res / GRID_OF[folder.name])
            if study and study["seconds"] and grid["ranked"]:
                share = study["seconds"] / grid["seconds"]
                same = study["answer"].split(" ", 1)[-1] == grid["ranked"][0][0].split(" ", 1)[-1]
                print(
                    f"  study {GRID_OF[folder.name]}: answer {study['answer']} (grid's fastest that fits: "
                    f"{grid['ranked'][0][0]}; {'same' if same else 'different'}), {share:.0%} of the grid's device-s"
                )
            continue
        figures = study_figures(folder)
        if figures is None:
            continue
        studies[folder.name] = figures
        error = f"{100 * figures['predictor_max']:.1f}%" if figures["predictor_max"] is not None else "-"
        seconds = f"{figures['seconds']:.0f}" if figures["seconds"] is not None else "-"
        print(f"## {folder.name}: answer {figures['answer']}; {seconds} device-s; predictor max error {error}")
        print(f"  {figures['claim']}")
        print(f"  {figures['decided']}")
        if figures["left_out"]:
            print(f"  {figures['left_out'][:300]}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
