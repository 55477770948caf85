"""A report over one recorded sweep or study, read back from MLflow: Markdown and HTML with PNG plots.

The files are written to a folder and logged as artifacts (under `report/`) on the sweep's or study's parent run.
"""

from __future__ import annotations

import html
from pathlib import Path

from pipeline.records import RunKind
from pipeline.reporting import plots
from pipeline.reporting.table import Criteria, Row, comparison_rows, format_table, interval_text, num
from pipeline.tracking import runs
from pipeline.tracking.store import Tracker


class ReportError(LookupError):
    """Nothing to report on (no sweep recorded, or an unknown sweep id)."""


def find_parent(tracker: Tracker, sweep_id: str | None = None, study: str | None = None):
    """The parent run of a sweep (by sweep id) or a study (by name); with neither, the latest of both kinds."""
    queries = []
    if study or not sweep_id:
        queries.append(
            f"tags.{runs.KIND} = 'study'" + (f" and tags.{runs.STUDY} = {runs.quoted(study)}" if study else "")
        )
    if sweep_id or not study:
        queries.append(
            f"tags.{runs.KIND} = 'sweep'" + (f" and tags.{runs.SWEEP} = {runs.quoted(sweep_id)}" if sweep_id else "")
        )
    found = []
    for query in queries:
        found += tracker.search(query, newest_first=True, limit=1)
    if not found:
        what = f"sweep '{sweep_id}'" if sweep_id else f"study '{study}'" if study else "any sweep or study"
        raise ReportError(f"no record of {what} in {tracker.uri}; run one first: python -m pipeline.train -m ...")
    return max(found, key=lambda run: run.info.start_time)


def _html_table(rows: list[Row], confidence: float) -> str:
    head = ["config", "status", f"step s (median [{100 * confidence:g}% CI])", "tokens/s", "peak GiB", "cap", "rank"]
    body = []
    for r in sorted(rows, key=lambda r: (r.median is None, r.median or 0.0)):
        cells = [
            r.name,
            r.status,
            "-" if r.median is None else interval_text(r.median, r.ci, confidence),
            num(r.tokens_per_s, ",.0f"),
            num(r.peak_gib, ".2f"),
            str(r.verdict or "-"),
            str(r.rank or "-"),
        ]
        body.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    header = "<tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in head) + "</tr>"
    return f"<table>{header}{''.join(body)}</table>"


def write_report(tracker: Tracker, sweep_id: str | None, out_root: Path, study: str | None, criteria: Criteria) -> Path:
    """Write report.md, report.html and the PNGs for a sweep or study (the latest by default); return the folder."""
    parent = find_parent(tracker, sweep_id, study)
    tags = parent.data.tags
    name = tags.get(runs.SWEEP) or tags[runs.STUDY]
    jobs = runs.read_jobs(tracker, parent.info.run_id)
    rows = comparison_rows(jobs, criteria)
    caps = [j.summary.memory_gib["cap"] for j in jobs if "cap" in j.summary.memory_gib]
    out = out_root / name
    out.mkdir(parents=True, exist_ok=True)
    images = {
        "Step time per config": plots.step_times(rows, out / "step_time.png"),
        "Where a step goes": plots.phases(rows, out / "phases.png"),
        "Peak memory per config": plots.memory(rows, max(caps) if caps else None, out / "memory.png"),
        "Loss per step": plots.losses({j.name: list(enumerate(j.losses, 1)) for j in jobs}, out / "loss.png"),
    }
    table = format_table(rows, criteria)
    kind = "Study" if tags.get(runs.KIND) == RunKind.STUDY else "Sweep"
    command = f"python -m pipeline.train -m {tags.get('overrides', '')}" if kind == "Sweep" else parent.info.run_name
    md = [f"# {kind} {name}", "", f"`{command}`", "", table, ""]
    md += [f"![{title}]({path.name})" for title, path in images.items()]
    (out / "report.md").write_text("\n".join(md) + "\n", encoding="utf-8")
    figures = "".join(
        f'<figure><img src="{p.name}" alt="{html.escape(t)}"><figcaption>{html.escape(t)}</figcaption></figure>'
        for t, p in images.items()
    )
    (out / "report.html").write_text(
        f"<!doctype html><html><head><meta charset='utf-8'><title>{kind} {html.escape(name)}</title><style>"
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
        "padding:4px 8px}th{background:#eee}figure{display:inline-block;margin:1em}</style></head><body>"
        f"<h1>{kind} {html.escape(name)}</h1><p><code>{html.escape(command)}</code></p>"
        f"{_html_table(rows, criteria.confidence)}{figures}</body></html>",
        encoding="utf-8",
    )
    for path in sorted(out.iterdir()):
        tracker.artifact_file(parent.info.run_id, path, folder="report")
    return out
