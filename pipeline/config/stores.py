"""The places a command writes to, checked before anything runs: `paths.root`, the MLflow tracking URI and the Optuna
storage. A folder that cannot be made, a server that does not answer within a few seconds, a file that is not a
database: one line naming the key, exit code 2, and nothing written (a probe folder made to test writing is
removed)."""

from __future__ import annotations

import errno
import os
import socket
import sqlite3
import tempfile
import urllib.parse
from pathlib import Path

from pipeline.config.errors import ConfigError

TIMEOUT_S = 3.0
URI_FORM = "sqlite:///path/to/mlflow.db, http(s)://host:port of an MLflow server, or a database URL"


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_writable_dir(field: str, text: str) -> None:
    """`text` is, or can become, a folder this process can write in (tested by making and removing a folder)."""
    if not str(text).strip():
        raise ConfigError(field, "empty; accepted: a folder to write in, e.g. mlruns")
    path = Path(text).expanduser().absolute()
    base = _nearest_existing(path)
    if not base.is_dir():
        raise ConfigError(field, f"'{text}': {base} is not a folder; accepted: a folder to write in")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".batch-split-write-test-", dir=base))
    except OSError as err:
        reason = os.strerror(err.errno) if err.errno else str(err)
        raise ConfigError(
            field,
            f"'{text}' cannot be written (no folder can be made in {base}: {reason}); accepted: a folder to write in",
        ) from None


def _sqlite_file(uri: str) -> str:
    return uri[len("sqlite:///") :]


def check_sqlite(field: str, uri: str) -> None:
    """The database's folder can be written, and an existing file is an SQLite database."""
    path = Path(_sqlite_file(uri)).expanduser()
    if not str(path).strip() or path.is_dir():
        raise ConfigError(field, f"'{uri}' names no database file; accepted: {URI_FORM}")
    check_writable_dir(field, str(path.parent))
    if path.is_file():
        try:
            with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=TIMEOUT_S) as db:
                db.execute("PRAGMA schema_version").fetchone()
        except sqlite3.DatabaseError as err:
            raise ConfigError(
                field, f"'{path}' is not a usable SQLite database ({err}); accepted: {URI_FORM}"
            ) from None


def check_server(field: str, uri: str) -> None:
    """An http(s) tracking server answers a TCP connection within TIMEOUT_S."""
    parsed = urllib.parse.urlparse(uri)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        with socket.create_connection((parsed.hostname or "", port), timeout=TIMEOUT_S):
            pass
    except OSError as err:
        reason = "no answer" if isinstance(err, TimeoutError) else os.strerror(err.errno or errno.ECONNREFUSED)
        raise ConfigError(
            field, f"{uri} cannot be reached ({reason} within {TIMEOUT_S:g} s); accepted: a running server"
        ) from None


def check_database(field: str, uri: str) -> None:
    """A database URL (postgresql://, mysql://, ...) opens a connection within TIMEOUT_S."""
    import sqlalchemy  # a third of a second: only database URLs pay for it, not every command line's precheck

    try:
        engine = sqlalchemy.create_engine(uri, connect_args=_timeout_args(uri))
        with engine.connect():
            pass
    except ModuleNotFoundError as err:
        raise ConfigError(
            field, f"'{uri}' needs the Python driver '{err.name}'; install the extra: pip install '.[cluster]'"
        ) from None
    except sqlalchemy.exc.SQLAlchemyError as err:
        first = str(err.orig if getattr(err, "orig", None) else err).strip().splitlines()[0]
        raise ConfigError(field, f"'{_hide_password(uri)}' cannot be opened: {first}") from None


def _timeout_args(uri: str) -> dict:
    return {"connect_timeout": int(TIMEOUT_S)} if uri.startswith(("postgresql", "mysql")) else {}


def _hide_password(uri: str) -> str:
    parsed = urllib.parse.urlparse(uri)
    if parsed.password:
        return uri.replace(f":{parsed.password}@", ":***@")
    return uri


def check_store(field: str, uri: str) -> None:
    scheme = urllib.parse.urlparse(uri).scheme
    if uri.startswith("sqlite:///"):
        check_sqlite(field, uri)
    elif scheme in ("http", "https"):
        check_server(field, uri)
    elif scheme.split("+")[0] in ("postgresql", "postgres", "mysql", "mssql", "oracle"):
        check_database(field, uri)
    else:
        raise ConfigError(field, f"got '{uri}'; accepted: {URI_FORM}")


def check_stores(root: str, tracking_uri: str, storage: str | None = None) -> None:
    """Everything a command will write to: the root folder, MLflow's store, and (optimize) Optuna's."""
    check_writable_dir("paths.root", root)
    check_store("tracking.uri", tracking_uri)
    if storage is not None:
        check_store("optimize.storage", storage)
