"""A report over one recorded sweep or study, read back from MLflow: Markdown with PNG plots beside it, and an HTML
page that stands alone (its plots embedded as SVG: MLflow's artifact viewer shows the page, not the files beside it).

It covers every config: measured, pruned, over the cap, skipped by prediction, failed; says the device, the date and
the cap; names the best config that fits, or says that nothing fits and what the smallest need was. The files are
written to a folder and logged as artifacts (under `report/`) on the sweep's or study's parent run.
"""

from __future__ import annotations

import datetime
import html
from pathlib import Path

from pipeline.records import RunKind
from pipeline.render import plots
from pipeline.render.headline import fastest_line, sweep_gain
from pipeline.render.rows import Criteria, Row, order, recorded_rows, unranked
from pipeline.render.table import footnotes, paired_header, paired_text, rank_text, step_header, step_text
from pipeline.render.text import markdown_table, num
from pipeline.summaries import TOKENS_RATE, RecordedJob
from pipeline.tracking import runs
from pipeline.tracking.figures import RunDevice
from pipeline.tracking.readback import ParentTags
from pipeline.tracking.store import Tracker


class ReportError(LookupError):
    """Nothing to report on (no sweep recorded, or an unknown sweep id)."""


def find_parent(tracker: Tracker, sweep_id: str | None = None, study: str | None = None):
    """The parent run of a sweep (by sweep id) or a study (by name); with neither, the latest of both kinds."""
    found = []
    if study or not sweep_id:
        found += runs.find_parents(tracker, RunKind.STUDY, study, limit=1)
    if sweep_id or not study:
        found += runs.find_parents(tracker, RunKind.SWEEP, sweep_id, limit=1)
    if not found:
        what = f"sweep '{sweep_id}'" if sweep_id else f"study '{study}'" if study else "any sweep or study"
        first = "python -m pipeline.optimize ..." if study and not sweep_id else "python -m pipeline.train -m ..."
        raise ReportError(f"no record of {what} in {tracker.uri}; run one first: {first}")
    return max(found, key=lambda run: run.info.start_time)


def _columns(confidence: float, rows: list[Row]) -> list[str]:
    return [
        "config",
        "status",
        step_header(confidence, rows),
        paired_header(confidence, rows),
        TOKENS_RATE,
        "peak GiB",
        "predicted GiB",
        "cap",
        "loss dev",
        "rank",
        "notes",
    ]


def _cells(r: Row, confidence: float) -> list[str]:
    note = r.measured[0].note[:80] if r.measured[0].note else ""
    return [
        r.name,
        r.status,
        step_text(r, confidence),
        paired_text(r),
        num(r.tokens_per_s, ",.0f"),
        num(r.peak_gib, ".3f"),
        num(r.predicted_gib, ".3f"),
        str(r.fit or "-"),
        num(r.loss_dev, ".1e"),
        rank_text(r),
        ", ".join(r.notes + ([note] if note else [])),
    ]


def claim_lines(parent, rows: list[Row], jobs: list[RecordedJob]) -> list[str]:
    """What the answer is compared with and whether a speed-up is claimed, under the headline: `Baseline: tiny 1x8
    (the command line's config)`, then the claim (`Claim: 1.84x the baseline's tokens/s [...]`, or `Claim: no
    speed-up over the baseline is claimed: ...`)."""
    tags = ParentTags.from_tags(parent.data.tags)
    if tags.kind is RunKind.STUDY:
        named = tags.baseline
        baseline = f"Baseline: {named} (the command line's config)" if named else "Baseline: none measured"
        claim = tags.claim.splitlines() or ["no speed-up over the baseline is claimed (none recorded)"]
        return [baseline, "", *(f"Claim: {line}" if i == 0 else line for i, line in enumerate(claim))]
    first = next((r for r in rows if jobs and r.config_id == jobs[0].config_id), None)
    baseline = f"Baseline: {first.name} (the sweep's first config: the first value of every swept key)" if first else ""
    best = next((r for r in rows if r.judgement is not None and r.comparison is None), None)
    if best is None:
        return [baseline, "", f"Claim: no speed-up is claimed: nothing is ranked ({unranked(rows)})"]
    return [baseline, "", f"Claim: {sweep_gain(best, first, rows).line(best.name)}"]


def write_report(
    tracker: Tracker, sweep_id: str | None, out_root: Path, study: str | None, confidence: float | None = None
) -> Path:
    """Write report.md, report.html and the PNGs for a sweep or study (the latest by default); return the folder.
    Its rows are judged by the criteria its jobs were (`confidence`: another interval's level, where asked)."""
    parent = find_parent(tracker, sweep_id, study)
    tags = ParentTags.from_tags(parent.data.tags)
    name = tags.name
    jobs = runs.read_jobs(tracker, parent.info.run_id)
    criteria = Criteria.recorded(tracker.run(jobs[0].run_id).data.params if jobs else {}, confidence)
    rows = order(recorded_rows(jobs, criteria, tags))
    context = _context(tracker, parent, name, jobs)
    out = out_root / name
    out.mkdir(parents=True, exist_ok=True)
    images = {
        "Step time per config": plots.step_times(rows, context, criteria.confidence, out / "step_time.png"),
        "Where a step goes": plots.phases(rows, context, out / "phases.png"),
        "Peak memory per config": plots.memory(rows, context, out / "memory.png"),
        "Loss per step": plots.losses(_curves(rows), context, out / "loss.png"),
    }
    command = (
        f"python -m pipeline.train -m {tags.overrides}"
        if context.kind == "Sweep"
        else (f"python -m pipeline.optimize {tags.overrides}")
    )
    facts = [
        f"Device: {context.device}",
        f"Date: {context.date}",
        f"Cap: {context.cap_gib:.2f} GiB" if context.cap_gib else "Cap: none",
        f"Intervals: {100 * criteria.confidence:g}% unless a row says less",
    ]
    notes = footnotes(rows, criteria)
    headline = [fastest_line(rows, context.cap_gib), "", *claim_lines(parent, rows, jobs)]
    table = markdown_table([_columns(criteria.confidence, rows), *(_cells(r, criteria.confidence) for r in rows)])
    md = [f"# {context.kind} {name}", "", *headline, "", f"`{command}`", "", " · ".join(facts), "", table, ""]
    md += [*(f"- {n}" for n in notes), ""] if notes else []
    md += [f"![{title}]({plot.png.name})" for title, plot in images.items()]
    (out / "report.md").write_text("\n".join(md) + "\n", encoding="utf-8")
    page = _html(context, name, command, facts, headline, rows, images, criteria, notes)
    (out / "report.html").write_text(page, "utf-8")
    for path in sorted(out.iterdir()):
        tracker.artifact_file(parent.info.run_id, path, folder="report")
    return out


def _context(tracker: Tracker, parent, name: str, jobs: list[RecordedJob]) -> plots.Context:
    kind = "Study" if ParentTags.from_tags(parent.data.tags).kind is RunKind.STUDY else "Sweep"
    caps = [j.summary.memory_gib["cap"] for j in jobs if "cap" in j.summary.memory_gib]
    cap = max(caps) if caps else (float(parent.data.params["cap_gib"]) if "cap_gib" in parent.data.params else None)
    # every run under the parent, probes and confirmation jobs too: a study whose trials were all skipped by
    # prediction still ran its probes on the device
    found = tracker.search(f"tags.mlflow.parentRunId = {runs.quoted(parent.info.run_id)}")
    devices = [RunDevice.from_params(r.data.params) for r in found]
    device = next((d.name for d in devices if d.recorded), "device not recorded")
    date = datetime.datetime.fromtimestamp(parent.info.start_time / 1000).strftime("%Y-%m-%d %H:%M")
    on_cpu = not any(d.type == "cuda" for d in devices)
    return plots.Context(kind, name, device, date, cap, on_cpu)


def _curves(rows: list[Row]) -> dict[str, list[tuple[int, float]]]:
    """One loss curve per config: its first measured run (repeats and confirmation runs train the same losses)."""
    return {r.name: list(enumerate(r.measured[0].losses, 1)) for r in rows if r.measured[0].losses}


def _html(context, name, command, facts, headline, rows, images, criteria, notes) -> str:
    header = "".join(f"<th>{html.escape(c)}</th>" for c in _columns(criteria.confidence, rows))
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in _cells(r, criteria.confidence)) + "</tr>" for r in rows
    )
    figures = "".join(
        f'<figure role="img" aria-label="{html.escape(t)}">{p.svg}<figcaption>{html.escape(t)}</figcaption></figure>'
        for t, p in images.items()
    )
    said = [line for line in headline if line]
    top = f"<p><strong>{html.escape(said[0]).replace('**', '')}</strong></p>" + "".join(
        f"<p class='claim'>{html.escape(line)}</p>" for line in said[1:]
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{context.kind} {html.escape(name)}</title><style>"
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
        "padding:4px 8px}th{background:#eee}figure{display:inline-block;margin:1em}figure svg{max-width:100%;"
        "height:auto}</style></head><body>"
        f"<h1>{context.kind} {html.escape(name)}</h1>{top}<p><code>{html.escape(command)}</code></p>"
        f"<p>{' · '.join(html.escape(f) for f in facts)}</p>"
        f"<table><tr>{header}</tr>{body}</table>"
        + "".join(f"<p>{html.escape(n)}</p>" for n in notes)
        + f"{figures}</body></html>"
    )
