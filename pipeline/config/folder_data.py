"""A local folder as `data.name` (data files read as the hub's are), checked up front as a jsonl file is: its split
and subset, its column, every record (`config.data`'s rules) and its size against the batch, so that a bad folder
stops the command in one line before any job or MLflow run exists. A hub id is left to the job: only the network
tells what it holds."""

from __future__ import annotations

import contextlib
import functools
import logging
from pathlib import Path

from pipeline.config.errors import ConfigError
from pipeline.config.record_form import RECORD_FORM, record_problem

FOLDER_FORM = "a folder of data files (jsonl, json, csv, parquet) with a 'text' or a 'messages' column, or a hub id"
PATH_PREFIXES = ("/", "./", "../", "~")  # a name that can only be a path, never a hub id


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
    _check(str(folder), name, subset, split, effective, stamp)


@functools.lru_cache(maxsize=8)
def _check(folder: str, name: str, subset: str | None, split: str, effective: int, stamp: int) -> None:
    """The folder loaded once per version of its files (`stamp`), then every record checked."""
    dataset = _load(folder, name, subset, split)
    columns = dataset.column_names
    keep = "messages" if "messages" in columns else "text" if "text" in columns else None
    if keep is None:
        shown = ", ".join(columns[:8]) or "none"
        raise ConfigError(
            "data.name",
            f"'{name}' split {split} has neither a 'messages' nor a 'text' column (columns: {shown}); "
            f"accepted: {FOLDER_FORM}",
        )
    for number, value in enumerate(dataset[keep], start=1):
        problem = record_problem({keep: value}, keep)
        if problem:
            raise ConfigError(
                "data.name",
                f"'{name}' split {split} record {number} {problem}; accepted: records with {RECORD_FORM}",
            )
    if len(dataset) < effective:
        raise ConfigError(
            "data.name",
            f"'{name}' split {split} has {len(dataset)} record{'s' if len(dataset) != 1 else ''}, fewer than "
            f"batch.effective {effective}; accepted: a dataset of {effective} records or more, or a smaller "
            "batch.effective",
        )


def _load(folder: str, name: str, subset: str | None, split: str):
    """`load_dataset` on the folder, quiet (no progress bars, no logged errors), its failures as one line each."""
    import datasets
    from datasets.data_files import EmptyDatasetError

    with _quiet(datasets):
        try:
            return datasets.load_dataset(folder, subset, split=split)
        except EmptyDatasetError:
            raise ConfigError("data.name", f"'{name}' holds no data files; accepted: {FOLDER_FORM}") from None
        except ValueError as err:
            said = str(err).splitlines()[0] if str(err) else type(err).__name__
            field = (
                "data.split" if said.startswith("Unknown split") else "data.subset" if "BuilderConfig" in said else None
            )
            if field is None:
                raise ConfigError("data.name", f"'{name}' cannot be read ({said}); accepted: {FOLDER_FORM}") from None
            value, what = (split, "split") if field == "data.split" else (subset, "subset")
            raise ConfigError(field, f"got '{value}'; accepted: a {what} that '{name}' has ({said})") from None
        except (datasets.exceptions.DatasetsError, OSError) as err:
            cause = err.__cause__ or err
            said = str(cause).splitlines()[0] if str(cause) else type(cause).__name__
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
