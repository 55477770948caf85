"""What a store under a test's folder holds, read with MLflow's and Optuna's own clients."""

from __future__ import annotations

import functools
from pathlib import Path

import optuna
from mlflow.tracking import MlflowClient
from sqlalchemy.exc import SQLAlchemyError

from pipeline.search._opening import _existing_rdb


def mlflow_runs(folder: Path, experiment: str = "batch-split", root: str = "mlruns") -> list:
    """Every run of `experiment` in the sqlite store under `folder/root`."""
    client = MlflowClient(f"sqlite:///{folder / root / 'mlflow.db'}")
    found = client.get_experiment_by_name(experiment)
    return client.search_runs([found.experiment_id]) if found else []


def the_study(storage: str, create: bool = True) -> optuna.Study:
    """The one study in `storage`, not the lock studies `<name>:calibration` that a worker makes and removes while
    it calibrates. Found by name: a summary reads every study's trials, and a lock study may be gone in between.
    Through one storage per URL: a test polls this every fraction of a second, and a storage opened by URL on each
    call is an engine with its own connections, which PostgreSQL's 100 clients ran out of."""
    opened = _storage(storage, create)
    (name,) = [n for n in optuna.get_all_study_names(opened) if ":" not in n]
    return optuna.load_study(study_name=name, storage=opened)


def study_so_far(storage: str) -> optuna.Study | None:
    """`the_study` while a command may still be creating it: None until its tables and its study are there. Opened
    without creating anything: a reader that creates the tables races the command's own creation of them, which
    then fails (`table studies already exists`, or the schema version written twice)."""
    try:
        return the_study(storage, create=False)
    except (ValueError, SQLAlchemyError, optuna.exceptions.StorageInternalError):
        return None  # no file or no tables yet (the schema check fails), or no study in them (nothing to unpack)


@functools.cache
def _storage(url: str, create: bool = True) -> optuna.storages.RDBStorage:
    if create:
        return optuna.storages.RDBStorage(url)
    opened = _existing_rdb(url)  # as the study's own check reads a store: nothing made, not even a sqlite file
    if opened is None:
        raise ValueError(f"no database at {url} yet")
    return opened
