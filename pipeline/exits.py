"""Exit codes of the entry points, and how a run's outcome becomes one (README, "Exit status").

- 0: every job finished and fitted (train); an answer was found (optimize)
- 1: a job failed, ran out of memory or went over the cap (train); trials failed and there is no answer (optimize)
- 2: bad input, refused before anything ran
- 3: nothing fits under the cap (optimize)
- 130: interrupted
- 141: the output was closed by its reader (`... | head`): stopped quietly, as a Unix tool killed by SIGPIPE
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import traceback
from collections import Counter
from collections.abc import Iterable

from pipeline.records import Fit, Status

OK = 0
FAILED = 1
BAD_INPUT = 2
NOTHING_FITS = 3
INTERRUPTED = 130
OUTPUT_CLOSED = 141  # 128 + SIGPIPE


def jobs_exit_code(outcomes: Iterable[tuple[Status, Fit]]) -> tuple[int, str]:
    """The exit code of a set of jobs and a last line that says how many went wrong, and how."""
    outcomes = list(outcomes)
    bad = Counter(
        str(status) if status is not Status.OK else str(fit)
        for status, fit in outcomes
        if status is not Status.OK or fit in (Fit.OVER_CAP, Fit.OOM)
    )
    if not bad:
        return OK, f"{len(outcomes)} of {len(outcomes)} jobs finished"
    detail = ", ".join(f"{n} {what}" for what, n in sorted(bad.items()))
    # the cap is named where a job went over one: a job that failed, or ran out of memory, had no cap to miss
    over = any(Fit.OVER_CAP in (status, fit) for status, fit in outcomes)
    missed = "did not finish under their cap" if over else "did not finish"
    return FAILED, f"{sum(bad.values())} of {len(outcomes)} jobs {missed} ({detail})"


class ExitCode:
    """The exit code the entry point ends with, set by whoever learns how the run went."""

    code: int = OK
    line: str | None = None

    @classmethod
    def set(cls, code: int, line: str | None = None) -> None:
        cls.code, cls.line = code, line

    @classmethod
    def reset(cls) -> None:
        cls.code, cls.line = OK, None


STORE_MODULES = ("mlflow", "sqlalchemy", "sqlite3", "optuna.storages", "optuna.exceptions", "alembic", "psycopg")
DISK_ERRNOS = (errno.ENOSPC, errno.EROFS, errno.EDQUOT)
MLFLOW, OPTUNA = "the MLflow store", "the Optuna storage"


def store_failure(err: BaseException) -> str | None:
    """What an exception says, in one line, when it is the failure of a store the run writes to (MLflow, Optuna, the
    disk under them); None for anything else."""
    module = type(err).__module__ or ""
    if isinstance(err, OSError) and err.errno in DISK_ERRNOS:
        return f"the disk is full or read-only ({os.strerror(err.errno)}): {err.filename or ''}".rstrip(": ")
    if module.startswith(STORE_MODULES):
        text = str(getattr(err, "orig", None) or err).strip().splitlines()
        return f"{type(err).__name__}: {text[0] if text else ''}"
    return None


def failed_store(err: BaseException) -> str | None:
    """Which store a failure came from, by the code it was raised through: MLflow's client or Optuna's storage (both
    talk SQL through SQLAlchemy, so the exception's own type cannot tell)."""
    modules = [frame.f_globals.get("__name__", "") for frame, _ in traceback.walk_tb(err.__traceback__)]
    for module in reversed(modules):  # the innermost library frame decides
        if module.split(".")[0] == "mlflow":
            return MLFLOW
        if module.split(".")[0] == "optuna":
            return OPTUNA
    return None


def store_uris(cfg) -> dict[str, str]:
    """The stores a command writes to (a composed config), by the name its one-line failure gives them."""
    return {MLFLOW: cfg.tracking.uri, OPTUNA: cfg.optimize.storage}


@contextlib.contextmanager
def guard_stores(uris: dict[str, str], where: str | None = None):
    """A store failing at run time ends the command with one line naming it (`uris`: MLFLOW and OPTUNA to their
    URIs; `where`: what is being written, for a failure no store's code raised, such as Hydra saving its config on a
    full disk) and exit code 1; runs still open are ended by the store's exit handler, as far as the store still
    takes writes; nothing recorded before is touched."""
    try:
        yield
    except Exception as err:  # noqa: BLE001 - classified, and re-raised when it is no store's failure
        reason = store_failure(err)
        if reason is None:
            raise
        store = failed_store(err)
        if store is not None and store in uris:
            print(f"error: {store} at {uris[store]} failed: {reason}", file=sys.stderr, flush=True)
        elif where is not None:
            print(f"error: {where} failed: {reason}", file=sys.stderr, flush=True)
        else:
            print(f"error: {reason}", file=sys.stderr, flush=True)
        raise SystemExit(FAILED) from None
