"""The comparison table of a sweep or study: one row per config identity, with its step time, throughput, memory,
notes, and its rank from paired rounds (`compare`).

A row's step time is one run's median with the interval of its steps (the step noise of one process), or, with
several runs (a sweep's repeats), the geometric mean of their trimmed means: the figure their pairs compare, so that
with every round complete `time vs fastest` is exactly the ratio of two rows' step times and the step column, the
ratios and the ranks order the configs alike. Ranks and ratios between configs come only from paired rounds: a
sweep's repeats, or a study's confirmation round; with one run per config nothing is ranked."""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field

from pipeline.compare.paired import WIDE, Comparison, Judgement, margin_text
from pipeline.compare.ranking import Ranking, rank
from pipeline.measure.stats import TRIM, max_relative_deviation
from pipeline.records import PHASES, Fit, RunKind, Status
from pipeline.render.text import interval_text, markdown_table, num
from pipeline.summaries import Interval, RecordedJob

MEASURED = (RunKind.JOB, RunKind.TRIAL)  # runs whose figures a row shows; confirmation runs only add rounds
FASTEST, ANSWER = "fastest", "answer"  # what the reference of a ranking is: the rows' time ratios are against it


@dataclass(frozen=True)
class Criteria:
    """What the table judges rows by: the confidence of its intervals, and when a run is flagged as noisy (its
    step time drifts or varies too much) or launch-bound (its GPU idles)."""

    confidence: float = 0.95
    max_drift: float = 0.10
    max_cv: float = 0.25
    busy_threshold: float = 0.5

    @classmethod
    def of(cls, measure) -> Criteria:
        return cls(measure.confidence, measure.max_drift, measure.max_cv, measure.busy_threshold)


@dataclass
class Row:
    config_id: str
    name: str
    jobs: list[RecordedJob]  # every run of the config: jobs or trials, and confirmation runs
    median: float | None = None
    ci: Interval | None = None  # one run: the interval of its steady steps; several: None
    runs: int = 0  # measured runs with a median
    first_steps: float | None = None  # a run stopped early (pruned, over the cap): the median of what it ran
    tokens_per_s: float | None = None
    mfu: float | None = None
    peak_gib: float | None = None
    predicted_gib: float | None = None  # a study's prediction of its peak (the only figure of a config it skipped)
    fit: Fit | None = None
    phases: dict[str, float] = field(default_factory=dict)
    loss_dev: float | None = None
    rounds: dict[int, float] = field(default_factory=dict)  # paired rounds: round -> that run's median
    comparison: Comparison | None = None  # paired, against the reference
    judgement: Judgement | None = None
    role: str | None = None  # the reference's: FASTEST, or ANSWER (a study's answer, where the pairs kept it)
    ties: list[Row] = field(default_factory=list)  # the reference's: the rows judged equal to it
    notes: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        return "/".join(sorted({str(j.status) for j in self.measured}))

    @property
    def measured(self) -> list[RecordedJob]:
        return [j for j in self.jobs if j.kind in MEASURED] or self.jobs

    @property
    def ok_runs(self) -> list[RecordedJob]:
        return [j for j in self.measured if j.status is Status.OK and j.summary.median is not None]


def _figures(row: Row) -> None:
    """Median (and one run's interval), rates from the same median, phases."""
    ok = row.ok_runs
    row.runs = len(ok)
    if not ok:
        stopped = [j.summary.median for j in row.measured if j.summary.median is not None]
        row.first_steps = stopped[0] if stopped else None
        return
    if len(ok) == 1:
        row.median, row.ci = ok[0].summary.median, ok[0].summary.step_time.ci
    else:
        row.median = statistics.geometric_mean(j.summary.step_time.trimmed for j in ok)
    work = ok[0].summary
    row.tokens_per_s = work.per_second(statistics.fmean(j.summary.tokens_per_step for j in ok), row.median)
    row.mfu = work.mfu(row.median)
    row.phases = {
        p: statistics.median(j.summary.phases[p] for j in ok) for p in PHASES if all(p in j.summary.phases for j in ok)
    }


def _memory(row: Row) -> None:
    members = row.jobs
    peaks = [j.summary.peak_gib for j in members if j.summary.peak_gib is not None]
    row.peak_gib = max(peaks) if peaks else None
    predicted = [j.predicted_gib for j in members if j.predicted_gib is not None]
    row.predicted_gib = max(predicted) if predicted else None
    fits = {j.summary.fit for j in row.measured}
    row.fit = next(
        (v for v in (Fit.OVER_CAP, Fit.OOM, Fit.FITS, Fit.NO_CAP) if v in fits),
        row.measured[0].summary.fit,
    )


def _share(values: list[float]) -> str:
    low, high = min(values), max(values)
    return f"{100 * low:.0f}%" if round(100 * low) == round(100 * high) else f"{100 * low:.0f}-{100 * high:.0f}%"


def notes(jobs: list[RecordedJob], criteria: Criteria) -> list[str]:
    """Per config, over its runs: `drift up to 23% in 3 of 4 runs`, `launch-bound (GPU busy 29-41%)`."""
    timed = [j.summary for j in jobs if j.summary.step_time is not None]
    out = []
    drifts = [abs(s.drift - 1) for s in timed if s.drift is not None and abs(s.drift - 1) > criteria.max_drift]
    cvs = [s.step_time.cv for s in timed if s.step_time.cv > criteria.max_cv]
    for what, values in (("drift", drifts), ("cv", cvs)):
        if values:
            within = f" in {len(values)} of {len(timed)} runs" if len(timed) > 1 else ""
            out.append(f"{what} {'up to ' if len(values) > 1 else ''}{100 * max(values):.0f}%{within}")
    busy = [s.gpu_busy for s in timed if s.gpu_busy is not None]
    idle = [b for b in busy if b < criteria.busy_threshold]
    if idle:
        within = "" if len(idle) == len(busy) else f" in {len(idle)} of {len(busy)} runs"
        out.append(f"launch-bound{within} (GPU busy {_share(idle)})")
    return out


def _rounds(jobs: list[RecordedJob]) -> dict[int, float]:
    """Each paired run's figure by round: the trimmed mean of its steady steps, as the study's confirmation round
    judges (`compare.sequential`), so a sweep, a study and their reports rank from the same numbers."""
    return {
        j.round: j.summary.step_time.trimmed
        for j in jobs
        if j.round is not None and j.summary.step_time is not None and j.status is Status.OK
    }


def comparison_rows(jobs: list[RecordedJob], criteria: Criteria, prefer: str | None = None) -> list[Row]:
    """Group runs by config identity; rank the configs that fit (or ran without a cap) from their paired rounds
    (from `prefer`, a config id, where it is ranked: a study's answer); give each config its largest loss deviation
    from the reference: the first run that finished."""
    groups: dict[str, list[RecordedJob]] = defaultdict(list)
    for job in jobs:
        groups[job.config_id].append(job)
    reference = next((j.losses for j in jobs if j.status is Status.OK and j.losses), None)
    rows = []
    for config_id, members in groups.items():
        row = Row(config_id, members[0].name, members)
        _figures(row)
        _memory(row)
        row.notes = notes(members, criteria)
        row.rounds = _rounds(members)
        if reference:
            deviations = [max_relative_deviation(list(j.losses), list(reference)) for j in members if j.losses]
            row.loss_dev = max((d for d in deviations if d is not None), default=None)
        rows.append(row)
    ranking = rank({r.config_id: r.rounds for r in rows if r.fit.feasible}, criteria.confidence, prefer)
    if ranking is not None:
        _apply(rows, ranking, prefer)
    return rows


def _apply(rows: list[Row], ranking: Ranking, prefer: str | None) -> None:
    for row in rows:
        row.comparison = ranking.comparisons.get(row.config_id)
        row.judgement = ranking.judgement(row.config_id)
    reference = next(r for r in rows if r.config_id == ranking.reference)
    reference.role = ANSWER if ranking.reference == prefer else FASTEST
    reference.ties = [r for r in order(rows) if r.comparison is not None and r.judgement is Judgement.EQUAL]


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


def reference_role(rows: list[Row]) -> str:
    """What the time ratios are against: the fastest, or a study's answer."""
    return next((r.role for r in rows if r.role), FASTEST)


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
    return f"{1 / c.speedup:.2f}x [{1 / c.high:.2f}, {1 / c.low:.2f}]"


def close(row: Row) -> bool:
    """A tie whose margin says something (under WIDE), as against one the rounds could not tell apart."""
    return row.comparison is not None and row.comparison.margin is not None and row.comparison.margin < WIDE


def rank_text(row: Row) -> str:
    """`winner`, `slower`, `equal ±8%`, `not told apart (within 4.2x)`; the reference in a tie says with whom:
    `fastest; equal with tiny 4x1; not told apart from tiny 1x4`."""
    if row.judgement is Judgement.EQUAL and row.comparison is not None:
        margin = row.comparison.margin
        return f"equal {margin_text(margin)}" if close(row) else f"not told apart ({margin_text(margin)})"
    if row.judgement is Judgement.EQUAL and row.role:
        near = [r.name for r in row.ties if close(r)]
        apart = [r.name for r in row.ties if not close(r)]
        said = ([f"equal with {', '.join(near)}"] if near else []) + (
            [f"not told apart from {', '.join(apart)}"] if apart else []
        )
        return "; ".join([row.role, *said])
    return str(row.judgement or "-")


def order(rows: list[Row]) -> list[Row]:
    """Ranked configs first, fastest first (paired), then the others by median, then those without a step time."""

    def key(r: Row) -> tuple:
        ratio = 1.0 if r.judgement and r.comparison is None else 1 / r.comparison.speedup if r.comparison else None
        return (ratio is None, ratio or 0.0, r.median is None, r.median or 0.0, r.name)

    return sorted(rows, key=key)


def format_table(rows: list[Row], criteria: Criteria) -> str:
    confidence = criteria.confidence
    header = ["config", "status", step_header(confidence, rows), paired_header(confidence, rows), "tokens/s", "MFU"]
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
    if timed and not any(r.judgement for r in rows):
        out.append(
            "one run per config: an interval covers the step noise of that one process, and separate processes of "
            "one config differ by more (15-30% on a GPU host), so nothing is ranked; rank with repeats=3 or more "
            "(paired rounds)"
        )
    if any(r.runs > 1 for r in timed):
        out.append(
            f"step s of several runs: the geometric mean of their {100 * TRIM:g}%-trimmed means, the figure their "
            f"pairs compare (time vs {reference_role(rows)} is its ratio over the rounds both ran)"
        )
    if any(r.ci is not None and r.ci.level < confidence - 1e-12 for r in rows):
        out.append(f"(n%): the interval covers the median only n% of the time: too few steps for {100 * confidence:g}%")
    if any(n.startswith(("drift", "cv")) for r in rows for n in r.notes):
        out.append(
            f"drift/cv: the machine was not quiet (step time drifted over {100 * criteria.max_drift:g}% or varied"
            f" over {100 * criteria.max_cv:g}% within a run); paired rounds cancel drift between runs"
        )
    return out
