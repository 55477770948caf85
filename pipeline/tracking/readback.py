"""Reading back what a command recorded: the text files a sweep or study logged (its summary, its answer), and the
parent run a process has just ended."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from mlflow.exceptions import MlflowException

from pipeline.records import RunState
from pipeline.tracking.runs import KIND, quoted
from pipeline.tracking.store import OWNER_TAG, Tracker

BAR_ENV = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"


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
