"""The one line that says what a comparison found: the fastest config (that fits, under a cap), or the study's
answer, and how sure the paired rounds are of it; or the lowest median where nothing is ranked; or why nothing fits.
The report's headline, and the first line of a sweep's or study's run description in MLflow."""

from __future__ import annotations

from pipeline.compare.paired import WIDE, Judgement, margin_text
from pipeline.records import Status
from pipeline.render.table import ANSWER, Row


def fastest_line(rows: list[Row], cap_gib: float | None) -> str:
    """The fastest config (that fits, under a cap) and how sure the ranking is, or why nothing fits."""
    what = "Fastest that fits" if cap_gib else "Fastest"
    reference = next((r for r in rows if r.judgement is not None and r.comparison is None), None)
    if reference is not None:
        what = "The study's answer" if reference.role == ANSWER else what
        line = f"{what}: **{reference.name}**, {reference.median:.4f} s/step"
        compared = [r for r in rows if r.comparison is not None]
        if reference.judgement is Judgement.WINNER:
            return line + f" (faster than {', '.join(r.name for r in compared)}: paired rounds)"
        tied = [r for r in compared if r.judgement is Judgement.EQUAL]
        close = [f"{r.name} ({margin_text(r.comparison.margin)})" for r in tied if r.comparison.margin < WIDE]
        apart = [
            f"{r.name} ({margin_text(r.comparison.margin)} either way)" for r in tied if r.comparison.margin >= WIDE
        ]
        said = ([f"equal with {', '.join(close)}"] if close else []) + (
            [f"not told apart from {', '.join(apart)}"] if apart else []
        )
        return line + f"; {'; '.join(said)} (paired rounds)"
    timed = [r for r in rows if r.median is not None and r.fit.feasible and r.status == str(Status.OK)]
    if timed:
        best = min(timed, key=lambda r: r.median)
        return f"Lowest median: **{best.name}**, {best.median:.4f} s/step (one run per config: not ranked)"
    needs = [(r.peak_gib, "measured") for r in rows if r.peak_gib] + [
        (r.predicted_gib, "predicted") for r in rows if r.predicted_gib and not r.peak_gib
    ]
    if not needs:
        return "Nothing finished: no config has a step time or a peak to show."
    need, how = min(needs)
    cap = f" under the cap of {cap_gib:.2f} GiB" if cap_gib else ""
    return f"**Nothing fits{cap}**: the smallest need is {need:.2f} GiB ({how}); raise mem_cap or widen the space."
