"""The comparison written onto the MLflow runs it was made of, so that the runs table says it without a click.

Each run gets its config's `rank` (the reference's in short: `fastest; 2 not told apart`) and
`time_vs_fastest` (in a study, against its answer, as the report says it), its own notes beside why it stopped
(`drift 26%`, `cv 194%`: the console's words for its steps) and, on its page, a description in the same words. The
sweep's or study's parent run gets the winner, or the fastest and whom it ties with (`rank`), by how much
(`time_vs_fastest`: the next config's time over its), the winner's step time, tokens/s and peak as its own figures,
and the headline and comparison table as its description.
"""

from __future__ import annotations

from pipeline.records import Fit, Status
from pipeline.render.headline import fastest_line
from pipeline.render.rows import Criteria, Row, comparison_rows, notes, order
from pipeline.render.table import format_table, in_short, paired_text, rank_text
from pipeline.tracking import figures, runs
from pipeline.tracking.store import Tracker

RANK, TIME_VS = runs.RANK, runs.TIME_VS
NOT_RANKED = "not ranked: one run"  # a config measured once has no pair to rank it by


def unranked(row: Row) -> str:
    """Why a row has no rank."""
    if row.fit in (Fit.OVER_CAP, Fit.OOM, Fit.PREDICTED_OVER_CAP):
        return f"not ranked: {row.fit}"
    return NOT_RANKED if row.median is not None else "not ranked: no steady steps"


def tag_runs(tracker: Tracker, parent_id: str, rows: list[Row], criteria: Criteria) -> None:
    """Every run of `rows` and their parent run, as the module's docstring says."""
    for row in rows:
        rank = (in_short(row) if row.role else rank_text(row)) if row.judgement else unranked(row)
        said = [f"rank: {rank}", f"time vs {_against(rows)}: {paired_text(row)}"] if row.judgement else [rank]
        for job in row.jobs:
            note = "; ".join([n for n in (job.note, *notes([job], criteria)) if n])  # why it stopped, its steps
            # the config's rank, carried only by the runs it was ranked from (a run that did not finish gave none)
            finished = job.status is Status.OK or not row.judgement
            tags = {RANK: rank if finished else f"not ranked: this run {job.status}"}
            tags[TIME_VS] = paired_text(row) if finished else "-"
            tags.update({runs.NOTE: note[:500]} if note else {})
            tags.update({runs.REASON: job.note} if job.note else {})  # read back as the run's note: why it stopped
            tags[figures.DESCRIPTION] = figures.description(job.name, job.summary, said)
            tracker.tags(job.run_id, tags)
            if row.loss_dev is not None:  # as every table prints it: `1.2e-07`
                tracker.metrics(job.run_id, {"loss_max_rel_dev": float(f"{row.loss_dev:.1e}")})
    tags, best = parent_tags(rows)
    caps = [j.summary.memory_gib["cap"] for r in rows for j in r.jobs if "cap" in j.summary.memory_gib]
    tags[figures.DESCRIPTION] = f"{fastest_line(rows, max(caps, default=None))}\n\n{format_table(rows, criteria)}"
    tracker.tags(parent_id, tags)
    if best is not None:
        tracker.metrics(parent_id, _figures(best))


def tag_study(
    tracker: Tracker, parent_id: str, criteria: Criteria, answer_config_id: str | None, baseline_id: str | None
) -> None:
    """A study's runs, once it has answered: ranked from its answer, as its report ranks them; their loss deviation
    from its baseline's (`baseline_id`, a config id; None: no baseline)."""
    jobs = runs.read_jobs(tracker, parent_id)
    rows = comparison_rows(jobs, criteria, prefer=answer_config_id, baseline=baseline_id)
    tag_runs(tracker, parent_id, rows, criteria)


def _against(rows: list[Row]) -> str:
    return next((r.role for r in rows if r.role), "fastest")


def parent_tags(rows: list[Row]) -> tuple[dict[str, str], Row | None]:
    """The parent row's `rank` and `time_vs_fastest`, and the row whose figures it shows: `tiny 8x1: winner` and
    `next: 1.46x [1.41, 1.50]`, or `tiny 2x2: fastest` and `next: 1.07x [0.65, 1.75]` (an interval that holds 1:
    not told apart); without ranks, the lowest median that fits, said to be unranked."""
    reference = next((r for r in rows if r.role), None)
    if reference is not None:
        nearest = next((r for r in order(rows) if r.comparison is not None), None)
        nearest_text = f"next: {paired_text(nearest)}" if nearest else "-"  # the config is the one below with it
        # the fastest's ties are its next row's interval (the UI's column holds 30 characters, not the count too)
        return {RANK: f"{reference.name}: {in_short(reference).partition('; ')[0]}", TIME_VS: nearest_text}, reference
    timed = [r for r in rows if r.median is not None and r.fit.feasible and r.status == str(Status.OK)]
    if not timed:
        capped = any(r.fit in (Fit.OVER_CAP, Fit.PREDICTED_OVER_CAP) for r in rows)
        return {RANK: "no config finished" + (" under the cap" if capped else ""), TIME_VS: "-"}, None
    best = min(timed, key=lambda r: r.median)
    return {RANK: f"{best.name}: lowest median ({NOT_RANKED})", TIME_VS: "-"}, best


def _figures(row: Row) -> dict[str, float]:
    values = {"step_time_median_s": row.median, "tokens_per_s": row.tokens_per_s, "peak_gib": row.peak_gib}
    decimals = {**figures.SHOWN_DECIMALS, "peak_gib": 3}
    return {k: figures.shown(v, decimals[k]) for k, v in values.items() if v is not None}
