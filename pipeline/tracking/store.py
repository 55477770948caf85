"""The only code that talks to MLflow: experiments, runs, params, metrics, tags and artifacts.

It uses `MlflowClient` rather than the fluent API, so no global "active run" exists and nothing ends a run FINISHED
behind our back. Every run this process opens carries its owner (host:pid:start) and, while it is open, a heartbeat
tag refreshed every few seconds; an interrupted command ends the runs it opened KILLED (`end_open_runs`), and on
exit (normal, Ctrl-C, SIGTERM) any run still open is ended so. A process killed outright ends nothing: the next
command on the store sees the owner gone (`tracking.runs.end_orphans`).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import logging
import os
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import sqlalchemy
from mlflow.entities import Metric, Param, RunTag
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import RESOURCE_ALREADY_EXISTS, ErrorCode
from mlflow.tracking import MlflowClient

from pipeline import whole
from pipeline.liveness import HEARTBEAT_S, Owner
from pipeline.records import RunState
from pipeline.tracking.uris import absolute_uri, not_made, sqlite_file
from pipeline.tracking.watched import WatchedClient

OWNER_TAG, HEARTBEAT_TAG = "owner", "heartbeat"
# their INFO lines ("Creating initial MLflow database tables") say nothing to act on
for _name in ("mlflow", "alembic"):
    logging.getLogger(_name).setLevel(logging.WARNING)
# nor do the two lines a tracking server's client prints at each run's end (`View run ... at: ...`): the job lines
# name their runs, and `make ui` prints the address that opens them
os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
_OPEN: dict[str, tuple[Tracker, dict[str, object]]] = {}  # run id -> (its tracker, tags to write if abandoned)
_KEPT: set[str] = set()  # every run this process has kept open, ended or not
MAX_PARAMS, MAX_METRICS, MAX_PARAM_CHARS = 100, 1000, 6000
CREATION_LOCK = 0x62617463685F7370  # the PostgreSQL advisory lock key that serialises store creation ("batch_sp")


def _scheme(uri: str) -> str:
    return urllib.parse.urlparse(uri).scheme.split("+")[0]


@contextlib.contextmanager
def store_lock(uri: str):
    """Serialise the creation of a store (its schema migrations, a first experiment or study) across the processes
    sharing it, on one machine or many: a file lock next to a sqlite file, an advisory lock in a PostgreSQL database
    (held by a connection of its own, so it goes with its holder however that ends). Several processes opening a
    fresh database at once otherwise collide on its schema. Other stores: no lock."""
    file = sqlite_file(uri)
    if file is not None:
        with open(f"{file}.lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
    elif _scheme(uri) in ("postgresql", "postgres"):
        engine = sqlalchemy.create_engine(uri, poolclass=sqlalchemy.pool.NullPool)
        try:
            with engine.connect() as connection:
                connection.execute(sqlalchemy.text("SELECT pg_advisory_lock(:key)"), {"key": CREATION_LOCK})
                try:
                    yield
                finally:
                    connection.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:key)"), {"key": CREATION_LOCK})
        finally:
            engine.dispose()
    else:
        yield


def open_runs() -> set[str]:
    """The ids of the runs this process has open."""
    return set(_OPEN)


def runs_kept() -> set[str]:
    """The ids of every run this process has opened or reopened, ended since or not."""
    return set(_KEPT)


def end_open_runs(keep: set[str] = frozenset(), tags: dict[str, object] | None = None) -> int:
    """End KILLED the runs this process has open but those in `keep`, each with `tags` (default: the tags it was
    opened to be abandoned with); how many. At exit all of them; an interrupted command in a process that lives on
    (a notebook's kernel) the ones it opened, before it says so."""
    ended = 0
    for run_id, (tracker, abandon_tags) in list(_OPEN.items()):
        if run_id in keep:
            continue
        try:
            if tags or abandon_tags:
                tracker.tags(run_id, tags or abandon_tags)
            tracker.end(run_id, RunState.KILLED)
            ended += 1
        except Exception:  # noqa: BLE001 - a store that is gone cannot be helped: the next command's clean-up can
            pass
    return ended


atexit.register(end_open_runs)


def _beat() -> None:
    """Refresh the heartbeat of every run this process has open, until the process ends."""
    while True:
        time.sleep(HEARTBEAT_S)
        for run_id, (tracker, _) in list(_OPEN.items()):
            with contextlib.suppress(Exception):  # a store that fails now fails the run's own writes too
                tracker.client.set_tag(run_id, HEARTBEAT_TAG, f"{time.time():.0f}")


_BEATING = threading.Thread(target=_beat, name="mlflow-heartbeat", daemon=True)


class ExperimentNotFound(LookupError):
    """A read-only command asked for an experiment the store does not have (`experiments`: those it has), or for a
    store that does not exist (`experiments` None)."""

    def __init__(self, message: str, experiments: list[str] | None = None) -> None:
        super().__init__(message)
        self.experiments = experiments


class Tracker:
    """One MLflow experiment in one store. `create=False` (read-only commands) never creates the experiment."""

    def __init__(self, uri: str, experiment: str, artifact_root: str, create: bool = True) -> None:
        if not create and not_made(uri):
            raise ExperimentNotFound(f"no MLflow store at {sqlite_file(uri)}; record a sweep or study first")
        self.uri = absolute_uri(uri)
        with store_lock(self.uri):
            with whole.call():  # a new store's schema migrations: cut in half, the database stays unreadable
                self.client = WatchedClient(MlflowClient(tracking_uri=self.uri), self.uri)
            found = self.client.get_experiment_by_name(experiment)
            if found is None and not create:
                # MLflow's own "Default" (id 0) holds nothing of this tool's
                names = [e.name for e in self.client.search_experiments() if e.experiment_id != "0"]
                raise ExperimentNotFound(f"no experiment '{experiment}' in {self.uri}", names)
            if found is None:
                found = self._create_experiment(experiment, artifact_root)
            self.experiment_id = found.experiment_id

    def _create_experiment(self, name: str, artifact_root: str):
        """A new experiment. With a database store its artifacts go under `artifact_root` (made absolute: MLflow would
        otherwise pick ./mlruns of whichever process created it); a tracking server keeps its own. Another process
        may create it first (a server has no lock for it): then that one is used."""
        location = None
        if _scheme(self.uri) not in ("http", "https"):
            root = Path(artifact_root).resolve()
            root.mkdir(parents=True, exist_ok=True)
            location = root.as_uri()
        try:
            self.client.create_experiment(name, artifact_location=location)
        except MlflowException as err:
            if err.error_code != ErrorCode.Name(RESOURCE_ALREADY_EXISTS):
                raise
        return self.client.get_experiment_by_name(name)

    def start(
        self,
        name: str,
        tags: dict[str, object] | None = None,
        parent_id: str | None = None,
        abandon_tags: dict[str, object] | None = None,
        start_ms: int | None = None,
    ) -> str:
        """Open a run (started at `start_ms`, now by default); if this process exits with it still open, it is ended
        KILLED with `abandon_tags` set. A Ctrl-C during the call lands once the run is kept open: otherwise a run
        made in the store but never known here would stay RUNNING under an owner that lives on (a notebook's kernel)."""
        tags = {k: str(v) for k, v in (tags or {}).items()}
        tags.update({OWNER_TAG: str(Owner.current()), HEARTBEAT_TAG: f"{time.time():.0f}"})
        if parent_id:
            tags["mlflow.parentRunId"] = parent_id
        with whole.call():
            run = self.client.create_run(self.experiment_id, run_name=name, tags=tags, start_time=start_ms)
            self._keep_open(run.info.run_id, abandon_tags)
        return run.info.run_id

    def _keep_open(self, run_id: str, abandon_tags: dict[str, object] | None) -> None:
        _OPEN[run_id] = (self, dict(abandon_tags or {}))
        _KEPT.add(run_id)
        if not _BEATING.is_alive():
            with contextlib.suppress(RuntimeError):  # started by another thread just now
                _BEATING.start()

    def search(self, query: str, newest_first: bool = False, limit: int | None = None) -> list:
        """Runs of this experiment matching an MLflow filter string (oldest first unless `newest_first`)."""
        order = ["attributes.start_time DESC" if newest_first else "attributes.start_time ASC"]
        kwargs = {"max_results": limit} if limit else {}
        return self.client.search_runs([self.experiment_id], query, order_by=order, **kwargs)

    def run(self, run_id: str):
        return self.client.get_run(run_id)

    def history(self, run_id: str, key: str) -> list[tuple[int, float]]:
        points = self.client.get_metric_history(run_id, key)
        return sorted((m.step, m.value) for m in points)

    def reopen(self, run_id: str, abandon_tags: dict | None = None, tags: dict | None = None, drop=()) -> str:
        """Continue a finished parent run (a resumed study) with `tags` set and the tags named in `drop` removed (what
        its earlier end said of it); it is ended again like any run this process opened."""
        self.client.update_run(run_id, status=RunState.RUNNING)
        self.tags(run_id, {**(tags or {}), OWNER_TAG: Owner.current(), HEARTBEAT_TAG: f"{time.time():.0f}"})
        for key in drop:
            with contextlib.suppress(MlflowException):  # not there
                self.client.delete_tag(run_id, key)
        self._keep_open(run_id, abandon_tags)
        return run_id

    def end(self, run_id: str, status: RunState = RunState.FINISHED) -> None:
        """End a run; a Ctrl-C during the call lands once it is no longer kept open (its clean-up would end a
        finished run KILLED)."""
        with whole.call():
            self.client.set_terminated(run_id, status=status)
            _OPEN.pop(run_id, None)

    def params(self, run_id: str, params: dict[str, object]) -> None:
        items = [Param(k, str(v)[:MAX_PARAM_CHARS]) for k, v in params.items()]
        for i in range(0, len(items), MAX_PARAMS):
            self.client.log_batch(run_id, params=items[i : i + MAX_PARAMS])

    def tags(self, run_id: str, tags: dict[str, object]) -> None:
        self.client.log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def metrics(self, run_id: str, values: dict[str, float], series: dict[str, list[tuple[int, float]]] | None = None):
        """Summary metrics (step 0) and per-step series, in as few batched calls as MLflow allows."""
        now = int(time.time() * 1000)
        items = [Metric(k, float(v), now, 0) for k, v in values.items() if v is not None]
        for key, points in (series or {}).items():
            items += [Metric(key, float(v), now, int(step)) for step, v in points if v is not None]
        for i in range(0, len(items), MAX_METRICS):
            self.client.log_batch(run_id, metrics=items[i : i + MAX_METRICS])

    def artifact_json(self, run_id: str, name: str, record: object) -> None:
        self.artifact_text(run_id, name, json.dumps(record, indent=2, default=str))

    def artifact_text(self, run_id: str, name: str, text: str) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / name
            path.write_text(text, encoding="utf-8")
            self.client.log_artifact(run_id, str(path))

    def artifact_file(self, run_id: str, path: str | os.PathLike, folder: str | None = None) -> None:
        self.client.log_artifact(run_id, str(path), artifact_path=folder)

    def artifact_place(self, run_id: str, name: str) -> str:
        """Where a person opens the run's artifact `name`: its file, where the store keeps artifacts on this machine
        (relative to the working folder when under it), else the artifact of the run."""
        uri = urllib.parse.urlparse(self.run(run_id).info.artifact_uri)
        if uri.scheme not in ("", "file"):
            return f"{name} of MLflow run {run_id}"
        path = Path(urllib.request.url2pathname(uri.path)) / name
        with contextlib.suppress(ValueError):
            return str(path.relative_to(Path.cwd()))
        return str(path)


def flatten(tree: dict, prefix: str = "") -> dict[str, object]:
    """{'train': {'steps': 5}} -> {'train.steps': 5}; lists become their string form."""
    flat: dict[str, object] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def find_experiment(uri: str, name: str) -> str | None:
    """The id of experiment `name` in the store at `uri`; None when it does not exist. Creates nothing (no sqlite
    file, folder or experiment). Locked: MLflow's client finishes a half-made store, as a command making it does."""
    if not_made(uri):
        return None
    with store_lock(absolute_uri(uri)):
        found = MlflowClient(tracking_uri=uri).get_experiment_by_name(name)
    return found.experiment_id if found is not None and found.lifecycle_stage == "active" else None
