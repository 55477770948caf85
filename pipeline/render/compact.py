"""The comparison table as the console prints it by default, 120 columns wide: only the columns that say something
of these rows (status, MFU and cap where some row has one to say; the time ratio and rank where the rounds ranked),
the reference's rank with its ties counted, the notes and legends under the table, long cells wrapped; and where the
configs' names would make it wider, each config by what differs from the reference (a sweep's first config, named in
full on its own row: `render.names`). The full table (`render.table`) is what the report, MLflow, the card and
`wide=true` give."""

from __future__ import annotations

from collections.abc import Callable

from pipeline.records import Fit, Status
from pipeline.render.names import shown_names
from pipeline.render.rows import Criteria, Row, order, reference_role
from pipeline.render.table import footnotes, in_short, paired_text, rank_text, step_text
from pipeline.render.text import WIDTH, fitted_table, num, table_width, wrapped_lines


def _columns(rows: list[Row], criteria: Criteria, names: dict[str, str]) -> dict[str, Callable[[Row], str]]:
    """The columns these rows have something to say in, each with its cell."""
    ranked = any(r.judgement for r in rows)
    columns: dict[str, Callable[[Row], str]] = {"config": lambda r: names[r.name]}
    if any(r.status != Status.OK for r in rows):
        columns["status"] = lambda r: r.status
    columns["step s"] = lambda r: _step(r, criteria.confidence)
    if ranked:
        columns[f"time vs {reference_role(rows)}"] = paired_text
    columns["tokens/s"] = lambda r: num(r.tokens_per_s, ",.0f")
    if any(r.mfu is not None for r in rows):
        columns["MFU"] = lambda r: "-" if r.mfu is None else f"{100 * r.mfu:.1f}%"
    columns["peak GiB"] = lambda r: num(r.peak_gib, ".2f")
    if any(r.fit not in (None, Fit.NO_CAP) for r in rows):
        columns["cap"] = lambda r: str(r.fit or "-")
    columns["loss dev"] = lambda r: num(r.loss_dev, ".1e")
    if ranked:
        columns["rank"] = lambda r: in_short(r) if r.role else rank_text(r)
    return columns


def _step(row: Row, confidence: float) -> str:
    """One run's median with its steps' interval; several runs' figure alone (a footnote says what it is)."""
    return f"{row.median:.4f}" if row.median is not None and row.ci is None else step_text(row, confidence)


def compact_table(rows: list[Row], criteria: Criteria, reference: Row | None, who: str = "", width: int = WIDTH) -> str:
    """The table of `rows` no wider than `width`, its configs by their difference from `reference` (`who` says
    what the reference is: `the sweep's first config`), then its notes and footnotes."""
    ordered = order(rows)
    names = {r.name: r.name for r in ordered}
    cells = _cells(rows, ordered, criteria, names)
    if table_width(cells) > width and reference is not None:  # the names are too long: what differs, in their place
        names = shown_names(list(names), reference.name)
        cells = _cells(rows, ordered, criteria, names)
    wrapped = tuple(i for i, h in enumerate(cells[0]) if h in ("config", "rank", "status", "cap"))
    table = fitted_table(cells, width, wrapped)
    said = [
        line
        for r in ordered
        if r.notes
        for line in wrapped_lines(f"  {names[r.name]}: {', '.join(r.notes)}", width, "    ")
    ]
    lines = [table, *(["notes of each config's runs:", *said] if said else [])]
    differ = any(names[r.name] != r.name for r in ordered)
    for note in _legend(rows, criteria, reference if differ else None, who) + footnotes(rows, criteria):
        lines += wrapped_lines(note, width)
    return "\n".join(lines)


def _cells(rows: list[Row], ordered: list[Row], criteria: Criteria, names: dict[str, str]) -> list[list[str]]:
    columns = _columns(rows, criteria, names)
    return [list(columns), *([cell(r) for cell in columns.values()] for r in ordered)]


def _legend(rows: list[Row], criteria: Criteria, reference: Row | None, who: str) -> list[str]:
    """What the compact table's short headers and names stand for."""
    out = []
    if reference is not None:
        out.append(f"config: each by what differs from {who or reference.name}, named in full on its row")
    if any(r.ci is not None for r in rows):
        out.append(f"step s: one run's median [{100 * criteria.confidence:g}% CI of its steps]")
    if any(r.judgement for r in rows):
        out.append(
            f"time vs {reference_role(rows)}: its step time over the {reference_role(rows)}'s, with the "
            f"{100 * criteria.confidence:g}% interval of their paired rounds"
        )
    return out
