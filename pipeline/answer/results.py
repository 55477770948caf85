"""What a recorded sweep or study found, read back from MLflow: its table (one row per config, the rows the console
and the report print), its answer and where it is recorded. The one source of what `pipeline.sweep` and
`pipeline.study` return and of what a result card holds (`answer.card`).

The answer of a study is the study's own (its MLflow run holds the reproduce line, the config's id and its paired
speed-up over the baseline). A sweep has no search: its answer is the config its table ranks first (or, with one run
per config, the lowest median, which nothing ranks), and its speed-up is over the sweep's first config (the first
value of every swept key: the sweep's baseline, as a study's is its command line's config), from the paired rounds;
where the first config is the answer, over the runner-up.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import pandas as pd

from pipeline.records import RunKind, Status
from pipeline.render.headline import fastest_line, sweep_gain
from pipeline.render.rows import Criteria, Row, order, recorded_rows
from pipeline.render.table import format_table, rank_text
from pipeline.summaries import RecordedJob
from pipeline.tracking import runs
from pipeline.tracking.readback import ParentTags, read_text
from pipeline.tracking.store import Tracker

COLUMNS = (
    "config",
    "status",
    "step_s",
    "step_low",
    "step_high",
    "step_coverage",
    "runs",
    "time_vs_fastest",
    "time_low",
    "time_high",
    "tokens_per_s",
    "mfu",
    "peak_gib",
    "predicted_gib",
    "cap",
    "loss_dev",
    "rank",
    "notes",
    "config_id",
)


@dataclass(frozen=True)
class Answer:
    """The config a sweep or study points to, the command line that trains it, and its paired speed-up."""

    config: str | None  # the row's name; None where nothing finished, or nothing fits
    reproduce: str | None  # `python -m pipeline.train ...` that trains that config alone
    speedup: float | None  # its tokens/s over `against`'s, from paired rounds; None where no pairs say it
    low: float | None  # the speed-up's interval at `confidence`
    high: float | None
    confidence: float
    against: str | None  # what the speed-up is over: the baseline
    text: str  # the headline the report gives it (plain text)
    claim: str = ""  # the speed-up over `against` in words, or why none is claimed (one line)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Answer:
        found = {f.name: data.get(f.name) for f in dataclasses.fields(cls)}
        return cls(**{**found, "claim": found["claim"] or ""})  # a card written before answers had a claim


@dataclass(frozen=True, eq=False)
class Result:
    """A recorded sweep or study: `table` has one row per config (columns `COLUMNS`, in the printed order)."""

    kind: str  # "sweep" or "study"
    name: str  # the sweep id or the study name
    run_id: str  # the MLflow parent run
    tracking_uri: str
    table: pd.DataFrame
    answer: Answer
    summary: str  # in full (the console with wide=true): a sweep's table, or a study's answer with its trials
    command: str  # the command line that ran it
    exit_code: int = 0  # what the command line would have exited with (README, "Exit status")
    line: str = ""  # the command line's last line: how many jobs finished, or what the study found
    rows: list[Row] = field(default_factory=list, repr=False)
    criteria: Criteria = field(default_factory=Criteria, repr=False)
    tracker: Tracker | None = field(default=None, repr=False)  # the store it was read from

    def _repr_markdown_(self) -> str:  # a notebook shows the table and the answer
        return f"**{self.kind} {self.name}** (MLflow run `{self.run_id}`)\n\n{self.summary}\n\n{self.answer.text}"


def row_record(r: Row) -> dict[str, object]:
    """One row of the table as plain values; `time_vs_fastest` is the row's step time over the fastest's (1.0 for
    the fastest, None where nothing is ranked), its interval paired."""
    c = r.comparison
    ratio = (1.0, 1.0, 1.0) if r.judgement is not None and c is None else (None, None, None)
    if c is not None:
        ratio = (1 / c.speedup, 1 / c.high if c.high else math.inf, 1 / c.low if c.low else math.inf)
    return {
        "config": r.name,
        "status": r.status,
        "step_s": r.median if r.median is not None else r.first_steps,
        "step_low": r.ci.low if r.ci else None,
        "step_high": r.ci.high if r.ci else None,
        "step_coverage": r.ci.level if r.ci else None,
        "runs": r.runs,
        "time_vs_fastest": ratio[0],
        "time_low": ratio[1],
        "time_high": ratio[2],
        "tokens_per_s": r.tokens_per_s,
        "mfu": r.mfu,
        "peak_gib": r.peak_gib,
        "predicted_gib": r.predicted_gib,
        "cap": str(r.fit or "-"),
        "loss_dev": r.loss_dev,
        "rank": rank_text(r),
        "notes": ", ".join(r.notes),
        "config_id": r.config_id,
    }


TEXT_COLUMNS = ("config", "status", "cap", "rank", "notes", "config_id")


def frame(records: list[dict[str, object]]) -> pd.DataFrame:
    """The table's records (`row_record`) as a DataFrame: figures as floats (NaN where a row has none), `runs` as
    an integer."""
    table = pd.DataFrame(records, columns=list(COLUMNS))
    figures = [c for c in COLUMNS if c not in TEXT_COLUMNS and c != "runs"]
    return table.astype({**dict.fromkeys(figures, "float64"), "runs": "int64"})


def _answer_row(rows: list[Row]) -> Row | None:
    """The row the table ranks first; with nothing ranked, the lowest median that finished under its cap."""
    ranked = next((r for r in rows if r.judgement is not None and r.comparison is None), None)
    if ranked is not None:
        return ranked
    timed = [r for r in rows if r.median is not None and r.fit.feasible and r.status == Status.OK]
    return min(timed, key=lambda r: r.median) if timed else None


def sweep_answer(tracker: Tracker, rows: list[Row], jobs: list[RecordedJob], confidence: float) -> Answer:
    best = _answer_row(rows)
    text = fastest_line(rows, _cap_gib(jobs)).replace("**", "")
    if best is None:
        return Answer(None, None, None, None, None, confidence, None, text, "no speed-up is claimed: nothing finished")
    baseline = next((r for r in rows if r.config_id == jobs[0].config_id), None) if jobs else None
    command = tracker.run(best.jobs[0].run_id).data.tags.get(runs.OVERRIDES)
    reproduce = None if command is None else f"python -m pipeline.train {command}".rstrip()
    gain = sweep_gain(best, baseline, rows)
    against = gain.against if gain.speedup is not None else None
    return Answer(
        best.name, reproduce, gain.speedup, gain.low, gain.high, confidence, against, text, gain.line(best.name)
    )


ANSWER_LINES = ("best feasible:", "nothing fits", "no config fits yet")  # how the console's answer of a study starts


def study_answer(parent, rows: list[Row], jobs: list[RecordedJob], confidence: float, printed: str) -> Answer:
    """The study's own answer (`printed`: its answer.md, as the console showed it)."""
    tags, metrics = ParentTags.from_tags(parent.data.tags), parent.data.metrics
    cap = float(parent.data.params["cap_gib"]) if "cap_gib" in parent.data.params else _cap_gib(jobs)
    said = [line.strip() for line in printed.splitlines() if line.startswith(ANSWER_LINES)]
    text = said[0] if said else fastest_line(rows, cap).replace("**", "")
    best = next((r for r in rows if r.config_id == tags.best_config), None)
    if best is None:
        return Answer(None, None, None, None, None, confidence, None, text, tags.claim)
    gain = [metrics.get(k) for k in ("speedup_vs_baseline", "speedup_low", "speedup_high")]
    gain = [None if v is None or math.isnan(v) else v for v in gain]  # NaN: an earlier answer's figure withdrawn
    named = tags.baseline
    against = (f"the baseline {named}" if named else "the baseline") if gain[0] is not None else None
    claim = tags.claim.splitlines()
    return Answer(best.name, tags.answer_command, *gain, confidence, against, text, claim[0] if claim else "")


def _cap_gib(jobs: list[RecordedJob]) -> float | None:
    caps = [j.summary.memory_gib["cap"] for j in jobs if "cap" in j.summary.memory_gib]
    return max(caps) if caps else None


def read(tracker: Tracker, parent_id: str) -> Result:
    """The result of the sweep or study whose MLflow parent run is `parent_id`."""
    parent = tracker.run(parent_id)
    tags = ParentTags.from_tags(parent.data.tags)
    if tags.kind is None:
        raise KeyError(runs.KIND)  # no sweep's or study's parent run
    kind = tags.kind
    jobs = runs.read_jobs(tracker, parent_id)
    params = tracker.run(jobs[0].run_id).data.params if jobs else {}
    criteria = Criteria.recorded(params)
    rows = recorded_rows(jobs, criteria, tags)
    if kind is RunKind.SWEEP:
        answer = sweep_answer(tracker, rows, jobs, criteria.confidence)
        summary, command = format_table(rows, criteria), f"python -m pipeline.train -m {tags.overrides}"
    else:
        summary = read_text(tracker, parent_id, "answer.md") or format_table(rows, criteria)
        answer = study_answer(parent, rows, jobs, criteria.confidence, summary)
        command = f"python -m pipeline.optimize {tags.overrides}"
    return Result(
        kind=str(kind),
        name=tags.name,
        run_id=parent_id,
        tracking_uri=tracker.uri,
        table=frame([row_record(r) for r in order(rows)]),
        answer=answer,
        summary=summary.rstrip("\n"),
        command=command.rstrip(),
        exit_code=0 if tags.status == Status.OK else 1,
        line=tags.note,
        rows=rows,
        criteria=criteria,
        tracker=tracker,
    )
