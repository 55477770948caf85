"""What a job's libraries warned of, counted by what fired: every Python warning, and every log record at WARNING or
above (torch, transformers, TRL, datasets, PEFT, Triton, ...), for the count on the job's console line and the summary
at the end of its log (`jobs.joblog`).

A Python warning is written once per kind (its category, place and first line) and counted every time: every warning
that no filter names is let through (Python's default shows one per place, and a library's `always` would repeat it
line by line), so the count says how often it fired. Log records are left to the libraries' own handlers, which write
each one; a record factory counts them, whichever logger, handler or propagation they go through.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import warnings
from collections import Counter
from collections.abc import Iterator
from typing import TextIO

SUMMARY = "[job] library warnings"  # the summary's first line begins so
SUMMARY_KINDS = 30  # kinds listed in the summary, the most frequent first


def _place(filename: str) -> str:
    """A library's file as its path in the package (`transformers/training_args.py`), any other as it is."""
    return filename.replace(os.sep, "/").rsplit("/site-packages/", 1)[-1]


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0].strip() if lines else ""


def _message(record: logging.LogRecord) -> str:
    try:
        return record.getMessage()
    except Exception:  # noqa: BLE001 - a record whose arguments do not fit its format: its handler will say so
        return str(record.msg)


class Fired:
    """The warnings of this process by kind, while `counted` is entered."""

    def __init__(self) -> None:
        self.kinds: Counter[str] = Counter()

    @property
    def count(self) -> int:
        return sum(self.kinds.values())

    def show(self, message, category, filename, lineno, file: TextIO | None = None, line: str | None = None) -> None:
        """`warnings.showwarning`: counted, and written the first time its kind fires."""
        kind = f"{category.__name__} at {_place(filename)}:{lineno}: {_first_line(str(message))}"
        self.kinds[kind] += 1
        stream = file or sys.stderr
        if self.kinds[kind] == 1 and stream is not None:
            with contextlib.suppress(OSError, ValueError):  # an output gone: as Python's own showwarning
                stream.write(warnings.formatwarning(message, category, filename, lineno, line))

    def record(self, record: logging.LogRecord) -> None:
        if isinstance(record.levelno, int) and record.levelno >= logging.WARNING:
            self.kinds[f"{record.levelname} from {record.name}: {_first_line(_message(record))}"] += 1

    def summary(self) -> str:
        """`[job] library warnings: 5302 of 4 kinds, by how often each fired:` and a line per kind; '' for none."""
        if not self.kinds:
            return ""
        lines = [f"{SUMMARY}: {self.count} of {len(self.kinds)} kinds, by how often each fired:"]
        width = len(str(max(self.kinds.values())))
        lines += [f"  {n:>{width}}  {kind}" for kind, n in self.kinds.most_common(SUMMARY_KINDS)]
        if len(self.kinds) > SUMMARY_KINDS:
            rest = self.kinds.most_common()[SUMMARY_KINDS:]
            lines.append(f"  and {sum(n for _, n in rest)} more of {len(rest)} other kinds (each written above)")
        return "\n".join(lines) + "\n"


@contextlib.contextmanager
def counted() -> Iterator[Fired]:
    """Count this process's warnings while entered; the warning filters, `showwarning` and the log record factory
    are as they were afterwards."""
    fired = Fired()
    factory = logging.getLogRecordFactory()

    def make_record(*args, **kwargs) -> logging.LogRecord:
        record = factory(*args, **kwargs)
        fired.record(record)
        return record

    with warnings.catch_warnings():
        warnings.filterwarnings("always", append=True)
        warnings.showwarning = fired.show
        logging.setLogRecordFactory(make_record)
        try:
            yield fired
        finally:
            logging.setLogRecordFactory(factory)
