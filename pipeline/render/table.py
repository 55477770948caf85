"""The comparison table of a sweep or study as text: one line per config (`render.rows`), with its step time,
throughput, memory, loss deviation, its rank and time ratio from paired rounds, its notes, and the footnotes that say
what the columns hold."""

from __future__ import annotations

from pipeline.compare.paired import Judgement, ratio_text
from pipeline.measure.stats import TRIM
from pipeline.render.rows import FASTEST, MORE_RUNS_RANK, Criteria, Row, close, order, reference_role, unranked
from pipeline.render.text import interval_text, markdown_table, num
from pipeline.summaries import TOKENS_RATE


def step_text(row: Row, confidence: float) -> str:
    if row.median is None:
        return "-" if row.first_steps is None else f"{row.first_steps:.4f} (first steps)"
    if row.ci is not None:
        return interval_text(row.median, row.ci, confidence)
    return f"{row.median:.4f} ({row.runs} runs)"


def step_header(confidence: float, rows: list[Row] | None = None) -> str:
    """What the step column holds: one run's median with the interval of its steps, or the mean of runs."""
    single = f"median [{100 * confidence:g}% CI of one run's steps]"
    counts = {r.runs > 1 for r in rows or [] if r.median is not None}
    if counts == {True}:
        return "step s (mean of runs)"
    return f"step s ({single}{', or mean of runs' if True in counts else ''})"


def paired_header(confidence: float, rows: list[Row] | None = None) -> str:
    return f"time vs {reference_role(rows or [])} ({100 * confidence:g}%, paired)"


def paired_text(row: Row) -> str:
    """The row's step time over the reference's, with the paired interval: `1.76x [1.52, 2.03]`; the reference's
    own cell names it (`fastest`, or `answer`)."""
    if row.judgement is None:
        return "-"
    c = row.comparison
    if c is None:
        return row.role or FASTEST
    return ratio_text(1 / c.speedup, 1 / c.high, 1 / c.low)


def rank_text(row: Row) -> str:
    """`winner`, `slower`, `equal ±3%` (within the tie tolerance), `not told apart (within ±71%)`, `(within 4.2x)`;
    the reference in a tie says with whom: `fastest; equal with tiny 4x1; not told apart from tiny 1x4`."""
    if row.judgement is Judgement.EQUAL and row.comparison is not None:
        return row.comparison.tie_text()
    if row.judgement is Judgement.EQUAL and row.role:
        near = [r.name for r in row.ties if close(r)]
        apart = [r.name for r in row.ties if not close(r)]
        said = ([f"equal with {', '.join(near)}"] if near else []) + (
            [f"not told apart from {', '.join(apart)}"] if apart else []
        )
        return "; ".join([row.role, *said])
    return str(row.judgement or "-")


def in_short(reference: Row) -> str:
    """The reference's rank without the names of its ties: `winner`, or `fastest; equal with 1; 2 not told apart`
    (the rows beside it say which, and by how much): the runs table's, and the compact table's."""
    if not reference.ties:
        return rank_text(reference)
    near = sum(1 for r in reference.ties if close(r))
    apart = len(reference.ties) - near
    said = ([f"equal with {near}"] if near else []) + ([f"{apart} not told apart"] if apart else [])
    return "; ".join([reference.role, *said])


def format_table(rows: list[Row], criteria: Criteria) -> str:
    confidence = criteria.confidence
    header = ["config", "status", step_header(confidence, rows), paired_header(confidence, rows), TOKENS_RATE, "MFU"]
    header += ["peak GiB", "cap", "loss dev", "rank", "notes"]
    lines: list[list[object]] = [header]
    for r in order(rows):
        mfu = "-" if r.mfu is None else f"{100 * r.mfu:.1f}%"
        lines.append([r.name, r.status, step_text(r, confidence), paired_text(r), num(r.tokens_per_s, ",.0f"), mfu])
        lines[-1] += [num(r.peak_gib, ".2f"), str(r.fit or "-"), num(r.loss_dev, ".1e"), rank_text(r)]
        lines[-1].append(", ".join(r.notes))
    return markdown_table(lines) + "".join(f"\n{note}" for note in footnotes(rows, criteria))


def footnotes(rows: list[Row], criteria: Criteria) -> list[str]:
    """What the table's intervals and flags mean, where it matters."""
    confidence, out = criteria.confidence, []
    timed = [r for r in rows if r.median is not None]
    why = unranked(rows)
    if timed and not any(r.judgement for r in rows) and why == "one run per config":
        out.append(
            "one run per config: an interval covers the step noise of that one process, and separate processes of "
            "one config differ by more (15-30% on a GPU host), so nothing is ranked; rank with repeats=3 or more "
            "(paired rounds)"
        )
    elif timed and not any(r.judgement for r in rows):
        more = "; rank with repeats=3 or more" if why in MORE_RUNS_RANK else ""
        out.append(f"{why}: nothing is ranked{more}")
    if any(r.runs > 1 for r in timed):
        pairs = (
            f", the figure their pairs compare (time vs {reference_role(rows)} is its ratio over the rounds both ran)"
        )
        out.append(
            f"step s of several runs: the geometric mean of their {100 * TRIM:g}%-trimmed means"
            + ("" if why.startswith("one config") else pairs)
        )
    if any(r.ci is not None and 0 < r.ci.level < confidence - 1e-12 for r in rows):
        out.append(f"(n%): the interval covers the median only n% of the time: too few steps for {100 * confidence:g}%")
    if any(r.ci is not None and r.ci.level <= 0 for r in rows):
        out.append("(1 step): one steady step, no interval: train more steps after measure.warmup_steps")
    if any(n.startswith(("drift", "cv")) for r in rows for n in r.notes):
        out.append(
            f"drift/cv: the machine was not quiet (step time drifted over {100 * criteria.max_drift:g}% or varied"
            f" over {100 * criteria.max_cv:g}% within a run); paired rounds cancel drift between runs"
        )
    return out
