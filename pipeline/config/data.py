"""The data group checked up front: synthetic sizes against the batch, and every line of a jsonl file (its line
number in the message), so a bad record stops the command before any job or MLflow run exists."""

from __future__ import annotations

import errno
import functools
import json
import os
import re
from pathlib import Path

from omegaconf import DictConfig

from pipeline.config.choices import DataKind, Distribution
from pipeline.config.errors import ConfigError, at_least, fewer_than_batch
from pipeline.config.folder_data import check_folder, is_local
from pipeline.config.record_form import RECORD_FORM, record_problem

JSONL_FORM = f"a readable JSON-lines file, each record with {RECORD_FORM}"
NOT_UTF8 = re.compile("[\udc80-\udcff]")  # what errors="surrogateescape" makes of a byte that is no UTF-8


def check_data(d: DictConfig, max_length: int, effective: int) -> None:
    if d.kind == DataKind.SYNTHETIC:
        at_least("data.length", d.length, 2)
        if d.length > max_length:
            raise ConfigError(
                "data.length", f"{d.length} exceeds train.max_length {max_length}; accepted: 2 to {max_length}"
            )
        if d.num_samples is not None and (d.num_samples < effective or d.num_samples % effective):
            raise ConfigError(
                "data.num_samples",
                f"{d.num_samples} cannot fill every step of batch.effective {effective}; accepted: a multiple of "
                f"{effective} (the samples repeat, pass after pass), or null (exactly what the steps consume)",
            )
        if d.distribution == Distribution.UNIFORM and (d.min_length is None or not (1 <= d.min_length <= d.length)):
            raise ConfigError(
                "data.min_length", f"got {d.min_length}; accepted with distribution=uniform: 1 to {d.length}"
            )
    elif d.kind == DataKind.JSONL:
        if not d.path:
            raise ConfigError("data.path", f"missing; accepted: {JSONL_FORM}")
        file = Path(d.path).expanduser()
        _check_regular_file(file, d.path)
        stat = file.stat()
        records = count_jsonl(str(file), d.path, stat.st_mtime_ns, stat.st_size)
        if records < effective:
            raise fewer_than_batch("data.path", f"'{d.path}'", records, effective, "a file")
    elif not d.name:
        raise ConfigError("data.name", "required with data.kind=hub; a hub dataset id or a local folder")
    elif is_local(str(d.name)):
        check_folder(str(d.name), d.subset, d.split, effective)


def _check_regular_file(file: Path, shown: str) -> None:
    """A file to read to its end: not a folder, and no device or pipe (reading /dev/zero never ends)."""
    try:
        os.stat(file)
    except OSError as err:
        raise ConfigError("data.path", f"'{shown}' {_unreachable(file, err)}; accepted: {JSONL_FORM}") from None
    if file.is_file():
        return
    if file.is_dir():
        problem = "is a folder"
    else:
        kind = next(
            (what for test, what in _SPECIAL_FILES if getattr(file, test)()),
            "a special file",
        )
        problem = f"is not a regular file ({kind})"
    raise ConfigError("data.path", f"'{shown}' {problem}; accepted: {JSONL_FORM}")


def _unreachable(file: Path, err: OSError) -> str:
    """Why a path cannot be opened, in words: a symbolic link that loops or leads nowhere is no missing file."""
    if err.errno == errno.ELOOP:
        return "is a loop of symbolic links (following them never reaches a file)"
    if file.is_symlink():
        return f"is a symbolic link to '{os.readlink(file)}', which does not exist"
    if err.errno in (errno.ENOENT, errno.ENOTDIR):
        return "does not exist"
    return f"cannot be reached ({os.strerror(err.errno)})" if err.errno else f"cannot be reached ({err})"


_SPECIAL_FILES = (
    ("is_char_device", "a character device"),
    ("is_block_device", "a block device"),
    ("is_fifo", "a named pipe"),
    ("is_socket", "a socket"),
)


@functools.lru_cache(maxsize=8)
def count_jsonl(path: str, shown: str, mtime_ns: int, size: int) -> int:
    """Check every line of the file (read once per version of it); return the number of records."""
    kind = None
    records = 0
    try:  # text mode, as the job reads it (a lone \r ends a line too); bytes that are no UTF-8 kept to be told
        with open(path, encoding="utf-8-sig", errors="surrogateescape") as handle:
            for number, line in enumerate(handle, start=1):
                if NOT_UTF8.search(line):
                    raise ConfigError("data.path", f"'{shown}' line {number} is not UTF-8 text; accepted: {JSONL_FORM}")
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    raise ConfigError(
                        "data.path", f"'{shown}' line {number} is not JSON; accepted: {JSONL_FORM}"
                    ) from None
                problem = record_problem(record, kind)
                if problem:
                    raise ConfigError("data.path", f"'{shown}' line {number} {problem}; accepted: {JSONL_FORM}")
                kind = "messages" if "messages" in record else "text"
                records += 1
    except OSError as err:
        raise ConfigError(
            "data.path", f"'{shown}' cannot be read ({type(err).__name__}); accepted: {JSONL_FORM}"
        ) from None
    if not records:
        raise ConfigError("data.path", f"'{shown}' is empty; accepted: {JSONL_FORM}")
    return records
