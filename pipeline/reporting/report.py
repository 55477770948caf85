"""A report over one recorded sweep, read back from MLflow: Markdown and HTML with PNG plots.

The files are written to a folder and logged as artifacts (under `report/`) on the sweep's parent run.
"""

from __future__ import annotations

import html
from pathlib import Path

from pipeline.reporting import plots
from pipeline.reporting.table import comparison_rows, format_table
from pipeline.tracking.store import SWEEP_TAG, Tracker


class ReportError(LookupError):
    """Nothing to report on (no sweep recorded, or an unknown sweep id)."""


def find_parent(tracker: Tracker, sweep_id: str | None = None, study: str | None = None):
    """The parent run of a sweep (by sweep id) or a study (by name); with neither, the latest of both kinds."""
    queries = []
    if study or not sweep_id:
        queries.append("tags.kind = 'study'" + (f" and tags.study = '{study}'" if study else ""))
    if sweep_id or not study:
        queries.append("tags.kind = 'sweep'" + (f" and tags.{SWEEP_TAG} = '{sweep_id}'" if sweep_id else ""))
    runs = []
    for query in queries:
        runs += tracker.search(query, newest_first=True, limit=1)
    if not runs:
        what = f"sweep '{sweep_id}'" if sweep_id else f"study '{study}'" if study else "any sweep or study"
        raise ReportError(f"no record of {what} in {tracker.uri}; run one first: python -m pipeline.train -m ...")
    return max(runs, key=lambda run: run.info.start_time)


def collect(tracker: Tracker, parent) -> tuple[list[dict], dict[str, list[tuple[int, float]]]]:
    children = tracker.search(f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    results, curves = [], {}
    for run in children:
        if run.data.tags.get("kind") == "probe":
            continue  # the predictor's calibration, shorter than the trials: not a contender
        history = tracker.history(run.info.run_id, "loss")
        summary = dict(run.data.metrics)
        summary["verdict"] = run.data.tags.get("verdict")
        results.append(
            {
                "name": run.info.run_name,
                "status": run.data.tags.get("status", "failed"),
                "run_id": run.info.run_id,
                "summary": summary,
                "losses": [value for _, value in history],
            }
        )
        curves[run.info.run_name] = history
    return results, curves


def write_report(tracker: Tracker, sweep_id: str | None, out_root: Path, study: str | None = None) -> Path:
    """Write report.md, report.html and the PNGs for a sweep or study (the latest by default); return the folder."""
    parent = find_parent(tracker, sweep_id, study)
    sweep = parent.data.tags.get(SWEEP_TAG) or parent.data.tags["study"]
    results, curves = collect(tracker, parent)
    rows = comparison_rows(results)
    caps = [r["summary"].get("cap_gib") for r in results if r["summary"].get("cap_gib")]
    out = out_root / sweep
    out.mkdir(parents=True, exist_ok=True)
    images = {
        "Step time per config": plots.step_times(rows, out / "step_time.png"),
        "Where a step goes": plots.phases(rows, out / "phases.png"),
        "Peak memory per config": plots.memory(rows, max(caps) if caps else None, out / "memory.png"),
        "Loss per step": plots.losses(curves, out / "loss.png"),
    }
    table = format_table(rows)
    overrides = parent.data.tags.get("overrides", "")
    kind = "Study" if parent.data.tags.get("kind") == "study" else "Sweep"
    command = f"`python -m pipeline.train -m {overrides}`" if kind == "Sweep" else f"`{parent.info.run_name}`"
    md = [f"# {kind} {sweep}", "", command, "", table, ""]
    md += [f"![{title}]({path.name})" for title, path in images.items()]
    (out / "report.md").write_text("\n".join(md) + "\n", encoding="utf-8")
    cells = [line.strip("|").split("|") for line in table.splitlines() if not line.startswith("|-")]
    rows_html = "".join(
        "<tr>"
        + "".join(
            f"<{'th' if i == 0 else 'td'}>{html.escape(c.strip())}</{'th' if i == 0 else 'td'}>" for c in cells_row
        )
        + "</tr>"
        for i, cells_row in enumerate(cells)
    )
    figures = "".join(
        f'<figure><img src="{p.name}" alt="{html.escape(t)}"><figcaption>{html.escape(t)}</figcaption></figure>'
        for t, p in images.items()
    )
    (out / "report.html").write_text(
        f"<!doctype html><html><head><meta charset='utf-8'><title>{kind} {sweep}</title><style>"
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
        "padding:4px 8px}th{background:#eee}figure{display:inline-block;margin:1em}</style></head><body>"
        f"<h1>{kind} {html.escape(sweep)}</h1><p>{html.escape(command.strip('`'))}</p>"
        f"<table>{rows_html}</table>{figures}</body></html>",
        encoding="utf-8",
    )
    for path in sorted(out.iterdir()):
        tracker.artifact_file(parent.info.run_id, path, folder="report")
    return out
