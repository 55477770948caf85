"""Reading back what a command recorded: the text files a sweep or study logged (its summary, its answer), its parent
run's tags as one typed record, and the parent run a process has just ended."""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from mlflow.exceptions import MlflowException

from pipeline.records import RunKind, RunState
from pipeline.tracking import runs
from pipeline.tracking.runs import KIND, quoted
from pipeline.tracking.store import OWNER_TAG, Tracker

BAR_ENV = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"


@dataclass(frozen=True)
class ParentTags:
    """A sweep's or study's parent run as its tags say (`tracking.runs` names them). A study's answer tags are missing
    until it has an answer, and a sweep has none of them: each is then None, its claim "". The command line and the
    note missing (a run still being written) are ""."""

    kind: RunKind | None
    name: str  # the sweep id or study name
    overrides: str = ""  # the command line's overrides
    status: str | None = None  # how the command ended
    note: str = ""
    best_config: str | None = None  # a study's answer's config id
    baseline: str | None = None  # its baseline's name, and config id
    baseline_config: str | None = None
    claim: str = ""  # the answer's speed-up over the baseline, or why there is none
    answer_command: str | None = None  # the command line that runs the answer

    @classmethod
    def from_tags(cls, tags: dict[str, str]) -> ParentTags:
        return cls(
            RunKind(tags[KIND]) if KIND in tags else None,
            tags.get(runs.SWEEP) or tags.get(runs.STUDY, ""),
            tags.get(runs.OVERRIDES, ""),
            tags.get(runs.STATUS),
            tags.get(runs.NOTE, ""),
            tags.get(runs.BEST_CONFIG),
            tags.get(runs.BASELINE),
            tags.get(runs.BASELINE_CONFIG),
            tags.get(runs.CLAIM, ""),
            tags.get(runs.ANSWER_COMMAND),
        )


def read_text(tracker: Tracker, run_id: str, name: str) -> str | None:
    """The text of artifact `name` of run `run_id`; None where the run has none of that name."""
    with tempfile.TemporaryDirectory() as tmp, _no_download_bar():
        try:
            path = tracker.client.download_artifacts(run_id, name, tmp)
        except (MlflowException, OSError):
            return None
        return Path(path).read_text(encoding="utf-8")


@contextlib.contextmanager
def _no_download_bar():
    """MLflow draws a progress bar for every download, even of one small file: not for these."""
    before = os.environ.get(BAR_ENV)
    os.environ[BAR_ENV] = "false"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(BAR_ENV, None)
        else:
            os.environ[BAR_ENV] = before


def last_parent(tracker: Tracker, kind: str, owner: str):
    """The parent run of `kind` (sweep, study) that the process `owner` (host:pid:start) ended last, or None: the
    sweep or study a Python call of that process has just run (a resumed study keeps its first start time)."""
    query = f"tags.{KIND} = {quoted(kind)} and tags.{OWNER_TAG} = {quoted(owner)} and attributes.status != '{RunState.RUNNING}'"
    found = tracker.client.search_runs(
        [tracker.experiment_id], query, order_by=["attributes.end_time DESC"], max_results=1
    )
    return found[0] if found else None
