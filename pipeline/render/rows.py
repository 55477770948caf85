"""The rows of a comparison: a sweep's or study's runs pooled by config identity, one row per config, with its step
time, throughput, memory, notes, loss deviation from the baseline's, and its rank from paired rounds (`compare`).

A row's step time is one run's median with the interval of its steps (the step noise of one process), or, with
several runs (a sweep's repeats), the geometric mean of their trimmed means: the figure their pairs compare, so that
with every round complete `time vs fastest` is exactly the ratio of two rows' step times and the step column, the
ratios and the ranks order the configs alike. Ranks and ratios between configs come only from paired rounds: a
sweep's repeats, or a study's confirmation round; with one run per config nothing is ranked. `render.table` writes
them as text."""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field, replace

from pipeline.compare.paired import TIE_TOLERANCE, Comparison, Judgement
from pipeline.compare.ranking import Ranking, rank
from pipeline.measure.stats import max_relative_deviation
from pipeline.records import PHASES, Fit, RunKind, Status
from pipeline.summaries import Interval, RecordedJob
from pipeline.tracking.figures import stalled_words
from pipeline.tracking.readback import ParentTags

MEASURED = (RunKind.JOB, RunKind.TRIAL)  # runs whose figures a row shows; confirmation runs only add rounds
FASTEST, ANSWER = "fastest", "answer"  # what the reference of a ranking is: the rows' time ratios are against it


@dataclass(frozen=True)
class Criteria:
    """What the table judges rows by: the confidence of its intervals, the tie tolerance within which a tie reads
    `equal`, and when a run is flagged as noisy (its step time drifts or varies too much) or launch-bound (its GPU
    idles)."""

    confidence: float = 0.95
    max_drift: float = 0.10
    max_cv: float = 0.25
    busy_threshold: float = 0.5
    tie_tolerance: float = TIE_TOLERANCE

    @classmethod
    def of(cls, cfg) -> Criteria:
        """From a job's config: its `measure` settings and `optimize.tie_tolerance`."""
        m = cfg.measure
        return cls(m.confidence, m.max_drift, m.max_cv, m.busy_threshold, cfg.optimize.tie_tolerance)

    @classmethod
    def recorded(cls, params: dict[str, str], confidence: float | None = None) -> Criteria:
        """The criteria a recorded job was judged by (its `measure.*` and `optimize.tie_tolerance` params), at
        `confidence` where one is asked for."""
        keys = {
            "confidence": "measure.confidence",
            "max_drift": "measure.max_drift",
            "max_cv": "measure.max_cv",
            "busy_threshold": "measure.busy_threshold",
            "tie_tolerance": "optimize.tie_tolerance",
        }
        found = {k: float(params.get(m, getattr(cls, k))) for k, m in keys.items()}
        return cls(**{**found, **({"confidence": confidence} if confidence is not None else {})})


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
    fits |= {j.summary.fit for j in members if j.summary.fit in (Fit.OOM, Fit.OVER_CAP)}  # a confirmation run's too
    row.fit = next(
        (v for v in (Fit.OVER_CAP, Fit.OOM, Fit.FITS, Fit.NO_CAP) if v in fits),
        row.measured[0].summary.fit,
    )


def _share(values: list[float]) -> str:
    low, high = min(values), max(values)
    return f"{100 * low:.0f}%" if round(100 * low) == round(100 * high) else f"{100 * low:.0f}-{100 * high:.0f}%"


def notes(jobs: list[RecordedJob], criteria: Criteria) -> list[str]:
    """Per config, over its runs: `drift up to 23% in 3 of 4 runs`, `launch-bound (GPU busy 29-41%)`, `1 stalled
    step left out (41 s)`."""
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
    stalled = [s for s in timed if s.stalled_steps]
    if stalled:
        within = f" in {len(stalled)} of {len(timed)} runs" if len(timed) > 1 else ""
        worst = max(stalled, key=lambda s: s.stalled_max_s or 0.0)
        total = replace(worst, stalled_steps=sum(s.stalled_steps for s in stalled))
        out.append(stalled_words(total) + within)
    return out


def _rounds(jobs: list[RecordedJob]) -> dict[int, float]:
    """Each paired run's figure by round: the trimmed mean of its steady steps, as the study's confirmation round
    judges (`search._confirmation.plan`), so a sweep, a study and their reports rank from the same numbers."""
    return {
        j.round: j.summary.step_time.trimmed
        for j in jobs
        if j.round is not None and j.summary.step_time is not None and j.status is Status.OK
    }


FIRST_JOB = ""  # a sweep's loss reference: the first run that finished (its first config's, as a rule)


def loss_reference(jobs: list[RecordedJob], baseline: str | None = FIRST_JOB) -> tuple[float, ...] | None:
    """The per-step losses every config's deviation is from: the baseline's (a config id: a study's baseline), or
    with FIRST_JOB the first run that finished (a sweep's); None without one. Only runs that trained the config's
    own schedule count (jobs and trials): a confirmation run trains fewer steps, so its learning rate differs."""
    measured = [j for j in jobs if j.kind in MEASURED and j.status is Status.OK and j.losses]
    if baseline == FIRST_JOB:
        return measured[0].losses if measured else None
    return next((j.losses for j in measured if j.config_id == baseline), None)


def loss_deviation(row: Row, reference: tuple[float, ...] | None) -> float | None:
    """The largest relative deviation of a config's per-step losses from the reference's, over the steps both ran
    and over the config's own runs (not its confirmation runs; `measure.stats.max_relative_deviation` for each):
    the `loss dev` of every table, card, report and the `loss_max_rel_dev` metric."""
    if not reference:
        return None
    runs = [j for j in row.jobs if j.kind in MEASURED and j.losses]
    deviations = [max_relative_deviation(list(j.losses), list(reference)) for j in runs]
    return max((d for d in deviations if d is not None), default=None)


def comparison_rows(
    jobs: list[RecordedJob], criteria: Criteria, prefer: str | None = None, baseline: str | None = FIRST_JOB
) -> list[Row]:
    """Group runs by config identity; rank the configs that fit (or ran without a cap) from their paired rounds
    (from `prefer`, a config id, where it is ranked: a study's answer); give each config its largest loss deviation
    from the baseline's (`loss_reference`)."""
    groups: dict[str, list[RecordedJob]] = defaultdict(list)
    for job in jobs:
        groups[job.config_id].append(job)
    reference = loss_reference(jobs, baseline)
    rows = []
    for config_id, members in groups.items():
        row = Row(config_id, members[0].name, members)
        _figures(row)
        _memory(row)
        row.notes = notes(members, criteria)
        row.rounds = _rounds(members)
        row.loss_dev = loss_deviation(row, reference)
        rows.append(row)
    competing = {r.config_id: r.rounds for r in rows if r.fit.feasible}
    ranking = rank(competing, criteria.confidence, prefer, criteria.tie_tolerance)
    if ranking is not None:
        _apply(rows, ranking, prefer)
    return rows


def recorded_rows(jobs: list[RecordedJob], criteria: Criteria, parent: ParentTags) -> list[Row]:
    """The rows of a recorded sweep or study (`parent`: its parent run's tags) as its own table judged them: a
    study's ranked from its answer, and its loss deviations from its baseline's."""
    if parent.kind is RunKind.STUDY:
        return comparison_rows(jobs, criteria, prefer=parent.best_config, baseline=parent.baseline_config)
    return comparison_rows(jobs, criteria)


def _apply(rows: list[Row], ranking: Ranking, prefer: str | None) -> None:
    for row in rows:
        row.comparison = ranking.comparisons.get(row.config_id)
        row.judgement = ranking.judgement(row.config_id)
    reference = next(r for r in rows if r.config_id == ranking.reference)
    reference.role = ANSWER if ranking.reference == prefer else FASTEST
    reference.ties = [r for r in order(rows) if r.comparison is not None and r.judgement is Judgement.EQUAL]


def order(rows: list[Row]) -> list[Row]:
    """Ranked configs first, fastest first (paired), then the others by median, then those without a step time."""

    def key(r: Row) -> tuple:
        ratio = 1.0 if r.judgement and r.comparison is None else 1 / r.comparison.speedup if r.comparison else None
        return (ratio is None, ratio or 0.0, r.median is None, r.median or 0.0, r.name)

    return sorted(rows, key=key)


def close(row: Row) -> bool:
    """A tie within the tie tolerance (`equal`), as against one the rounds could not tell apart."""
    return row.comparison is not None and row.comparison.equal


def reference_role(rows: list[Row]) -> str:
    """What the time ratios are against: the fastest, or a study's answer."""
    return next((r.role for r in rows if r.role), FASTEST)


MORE_RUNS_RANK = ("one run per config", "fewer than two paired rounds")  # the reasons repeats=3 or more would mend


def unranked(rows: list[Row]) -> str:
    """Why no row is ranked, where none is, of the rows that compete (a step time, within the cap): `one config`
    (nothing to rank it against; `one config that fits` where others did not), `one run per config` (a process's
    interval says nothing of another's), `fewer than two paired rounds`, or `no config finished`."""
    timed = [r for r in rows if r.median is not None]
    competing = [r for r in timed if r.fit is None or r.fit.feasible]
    if not competing:
        return "no config finished" + (" within the cap" if timed else "")
    if len(competing) == 1:
        return "one config" if len(timed) == 1 else "one config that fits"
    if all(r.runs <= 1 for r in competing):
        return "one run per config"
    return "fewer than two paired rounds"
