"""A local folder as `data.name` (data files read as the hub's are), checked up front as a jsonl file is: its split
and subset, its column, every record (`config.data`'s rules) and its size against the batch, so that a bad folder
stops the command in one line before any job or MLflow run exists. A hub id is left to the job: only the network
tells what it holds."""

from __future__ import annotations

import contextlib
import functools
import logging
from pathlib import Path

from pipeline.config.errors import ConfigError, fewer_than_batch
from pipeline.config.record_form import RECORD_FORM, record_problem

FOLDER_FORM = "a folder of data files (jsonl, json, csv, parquet) with a 'text' or a 'messages' column, or a hub id"
PATH_PREFIXES = ("/", "./", "../", "~")  # a name that can only be a path, never a hub id
BATCH = 1_000  # records checked at a time: a large folder is never one list in memory


def is_local(name: str) -> bool:
    """Whether `name` means a path on this machine: it exists, or it is spelled as a path."""
    return Path(name).expanduser().exists() or name.startswith(PATH_PREFIXES)


def check_folder(name: str, subset: str | None, split: str, effective: int) -> None:
    """Refuse a local `data.name` the job could not train on, naming the field and the accepted form."""
    folder = Path(name).expanduser()
    if not folder.exists():
        raise ConfigError("data.name", f"'{name}' does not exist; accepted: {FOLDER_FORM}")
    if not folder.is_dir():
        raise ConfigError(
            "data.name",
            f"'{name}' is a file; accepted: {FOLDER_FORM} (one JSON-lines file: data=jsonl data.path={name})",
        )
    stamp = max((p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()), default=0)
    count = _records(str(folder), name, subset, split, stamp)
    if count < effective:
        raise fewer_than_batch("data.name", f"'{name}' split {split}", count, effective, "a dataset")


@functools.lru_cache(maxsize=8)
def _records(folder: str, name: str, subset: str | None, split: str, stamp: int) -> int:
    """The folder loaded once per version of its files (`stamp`), every record checked a batch at a time; how many
    it holds."""
    dataset = _load(folder, name, subset, split)
    columns = dataset.column_names
    keep = "messages" if "messages" in columns else "text" if "text" in columns else None
    if keep is None:
        listed = ", ".join(columns[:8]) or "none"
        raise ConfigError(
            "data.name",
            f"'{name}' split {split} has neither a 'messages' nor a 'text' column (columns: {listed}); "
            f"accepted: {FOLDER_FORM}",
        )
    number = 0
    for batch in dataset.select_columns([keep]).iter(batch_size=BATCH):
        for value in batch[keep]:
            number += 1
            problem = record_problem({keep: value}, keep)
            if problem:
                raise ConfigError(
                    "data.name",
                    f"'{name}' split {split} record {number} {problem}; accepted: records with {RECORD_FORM}",
                )
    return len(dataset)


# What a library message says of the field it is about (datasets 5): the split, the subset; else the folder.
FIELD_SAID = (
    ("data.split", ("Unknown split", "Unrecognized instruction format", "Bad split")),
    ("data.subset", ("BuilderConfig", "Config name is missing")),
)


def _load(folder: str, name: str, subset: str | None, split: str):
    """`load_dataset` on the folder, quiet (no progress bars, no logged errors), any failure as one line: whatever
    the library raises reading a local folder is about that folder."""
    import datasets

    with _quiet(datasets):
        try:
            return datasets.load_dataset(folder, subset, split=split)
        except (datasets.data_files.EmptyDatasetError, datasets.exceptions.DataFilesNotFoundError):
            raise ConfigError("data.name", f"'{name}' holds no data files; accepted: {FOLDER_FORM}") from None
        except Exception as err:  # noqa: BLE001 - the library's many failures on a local folder, each one line
            cause = err.__cause__ if isinstance(err, datasets.exceptions.DatasetsError) and err.__cause__ else err
            said = str(cause).splitlines()[0] if str(cause).strip() else type(cause).__name__
            said = "a data file in it is empty" if isinstance(cause, StopIteration) else said  # datasets' json reader
            for field, starts in FIELD_SAID:
                if any(start in said for start in starts):
                    value, what = (split, "split") if field == "data.split" else (subset, "subset")
                    raise ConfigError(field, f"got '{value}'; accepted: a {what} that '{name}' has ({said})") from None
            raise ConfigError("data.name", f"'{name}' cannot be read ({said}); accepted: {FOLDER_FORM}") from None


@contextlib.contextmanager
def _quiet(datasets):
    """The library's progress bars and logged errors off while the folder is read, as they were after."""
    bars_off = datasets.utils.are_progress_bars_disabled()
    logger = logging.getLogger("datasets")
    level = logger.level
    datasets.utils.disable_progress_bars()
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)
        if not bars_off:
            datasets.utils.enable_progress_bars()
