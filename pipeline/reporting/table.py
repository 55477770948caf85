"""The comparison table of a sweep: one row per config identity, repeats pooled, ranked with intervals that say
what they cover."""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field

from pipeline.measure.stats import Rank, max_relative_deviation, median_ci, rank
from pipeline.records import PHASES, Interval, RecordedJob, Status, Verdict


@dataclass(frozen=True)
class Criteria:
    """What the table judges rows by: the confidence of its intervals, and when a job is flagged as noisy (its
    step time drifts or varies too much to rank on) or launch-bound (its GPU idles)."""

    confidence: float = 0.95
    max_drift: float = 0.10
    max_cv: float = 0.25
    busy_threshold: float = 0.5

    @classmethod
    def of(cls, measure) -> Criteria:
        return cls(measure.confidence, measure.max_drift, measure.max_cv, measure.busy_threshold)


def flags(job: RecordedJob, criteria: Criteria) -> list[str]:
    s = job.summary
    out = []
    if s.drift is not None and abs(s.drift - 1) > criteria.max_drift:
        out.append(f"drift {100 * (s.drift - 1):+.0f}%")
    if s.step_time is not None and s.step_time.cv > criteria.max_cv:
        out.append(f"cv {100 * s.step_time.cv:.0f}%")
    if s.gpu_busy is not None and s.gpu_busy < criteria.busy_threshold:
        out.append(f"launch-bound (GPU busy {100 * s.gpu_busy:.0f}%)")
    return out


@dataclass
class Row:
    config_id: str
    name: str
    jobs: list[RecordedJob]
    median: float | None = None
    ci: Interval | None = None
    pooled: bool = False  # the interval is over the repeats' medians, not one job's steps
    tokens_per_s: float | None = None
    mfu: float | None = None
    peak_gib: float | None = None
    predicted_gib: float | None = None  # a study's prediction (the only figure of a config skipped by it)
    verdict: Verdict | None = None
    phases: dict[str, float] = field(default_factory=dict)
    loss_dev: float | None = None
    rank: Rank | None = None
    flags: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        return "/".join(sorted({str(j.status) for j in self.jobs}))

    @property
    def ok_jobs(self) -> list[RecordedJob]:
        return [j for j in self.jobs if j.status is Status.OK and j.summary.median is not None]


def _pool(row: Row, confidence: float) -> None:
    """Median and interval of one job's steady steps, or of the medians of several repeats."""
    ok = row.ok_jobs
    if not ok:
        return
    if len(ok) == 1:
        step_time = ok[0].summary.step_time
        row.median, row.ci = step_time.median, step_time.ci
    else:
        medians = sorted(j.summary.median for j in ok)
        row.median, row.ci, row.pooled = statistics.median(medians), median_ci(medians, confidence), True
    work = ok[0].summary
    row.tokens_per_s = work.per_second(statistics.fmean(j.summary.tokens_per_step for j in ok), row.median)
    row.mfu = work.mfu(row.median)
    row.phases = {
        p: statistics.median(j.summary.phases[p] for j in ok) for p in PHASES if all(p in j.summary.phases for j in ok)
    }


def comparison_rows(jobs: list[RecordedJob], criteria: Criteria) -> list[Row]:
    """Pool jobs by config identity, rank the configs that fit (or ran without a cap) by median step time, and give
    each config its largest loss deviation from the reference: the first job that finished."""
    groups: dict[str, list[RecordedJob]] = defaultdict(list)
    for job in jobs:
        groups[job.config_id].append(job)
    reference = next((j.losses for j in jobs if j.status is Status.OK and j.losses), None)
    rows = []
    for config_id, members in groups.items():
        row = Row(config_id, members[0].name, members)
        _pool(row, criteria.confidence)
        row.flags = list(dict.fromkeys(f for j in members for f in flags(j, criteria)))
        peaks = [j.summary.peak_gib for j in members if j.summary.peak_gib is not None]
        row.peak_gib = max(peaks) if peaks else None
        predicted = [j.predicted_gib for j in members if j.predicted_gib is not None]
        row.predicted_gib = max(predicted) if predicted else None
        verdicts = {j.summary.verdict for j in members}
        row.verdict = next(
            (v for v in (Verdict.OVER_CAP, Verdict.OOM, Verdict.FITS, Verdict.NO_CAP) if v in verdicts),
            members[0].summary.verdict,
        )
        if reference:
            deviations = [max_relative_deviation(list(j.losses), list(reference)) for j in members if j.losses]
            row.loss_dev = max((d for d in deviations if d is not None), default=None)
        rows.append(row)
    # only configs that fit (or ran without a cap) compete: a fast config over the cap is no answer
    ranked = rank(
        {r.config_id: (r.median, r.ci) for r in rows if r.median is not None and r.verdict.feasible},
        criteria.confidence,
    )
    for row in rows:
        row.rank = ranked.get(row.config_id)
    return rows


def num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def interval_text(median: float, ci: Interval, confidence: float) -> str:
    """`0.2615 [0.1840, 0.3390]`, with the interval's real coverage added when it falls short of `confidence`."""
    text = f"{median:.4f} [{ci.low:.4f}, {ci.high:.4f}]"
    if ci.level < confidence - 1e-12:
        text += f" ({100 * ci.level:.0f}%)"
    return text


def step_header(confidence: float) -> str:
    return f"step s (median [{100 * confidence:g}% CI])"


def format_table(rows: list[Row], criteria: Criteria) -> str:
    confidence = criteria.confidence
    header = [
        "config",
        "status",
        step_header(confidence),
        "tokens/s",
        "MFU",
        "peak GiB",
        "cap",
        "loss dev",
        "rank",
        "notes",
    ]
    lines = [header]
    for r in sorted(rows, key=lambda r: (r.median is None, r.median or 0.0)):
        lines.append(
            [
                r.name,
                r.status,
                "-" if r.median is None else interval_text(r.median, r.ci, confidence),
                num(r.tokens_per_s, ",.0f"),
                "-" if r.mfu is None else f"{100 * r.mfu:.1f}%",
                num(r.peak_gib, ".2f"),
                str(r.verdict or "-"),
                num(r.loss_dev, ".1e"),
                str(r.rank or "-"),
                ", ".join(r.flags),
            ]
        )
    table = markdown_table(lines)
    short = [r for r in rows if r.ci is not None and r.ci.level < confidence - 1e-12]
    if short:
        what = "repeats" if any(r.pooled for r in short) else "steps"
        table += (
            f"\n(n%): the interval covers the median only n% of the time: too few {what} for {100 * confidence:g}%;"
            " no winner is named from it"
        )
    if any(f.startswith(("drift", "cv")) for r in rows for f in r.flags):
        table += (
            f"\ndrift/cv: the machine was not quiet (step time drifted over {100 * criteria.max_drift:g}% or varied"
            f" over {100 * criteria.max_cv:g}%); rank with repeats, or on a quieter machine"
        )
    return table


def markdown_table(lines: list[list[object]]) -> str:
    """A header row then data rows, as an aligned Markdown table ('|' in a cell escaped)."""
    cells = [[str(c).replace("|", "\\|") for c in line] for line in lines]
    widths = [max(len(line[i]) for line in cells) for i in range(len(cells[0]))]
    out = ["| " + " | ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) + " |" for line in cells]
    out.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(out)
