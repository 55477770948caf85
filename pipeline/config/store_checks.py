"""The places a command writes to, checked before anything runs: `paths.root`, the MLflow tracking URI and the Optuna
storage. A folder that cannot be made, a server that does not answer within a few seconds, a file that is not a
database: one line naming the key, exit code 2, and nothing written (a probe folder made to test writing is
removed). Only `paths.root` may be made by the command (it is where everything goes); a database outside it must go
in a folder that exists. A disk without room for a new database (`PROBE_BYTES`) is no bad input but a store failure:
one line, exit code 1, as when the disk fills at run time."""

from __future__ import annotations

import errno
import os
import shutil
import socket
import sqlite3
import tempfile
import urllib.parse
from pathlib import Path

from pipeline.config.errors import ConfigError, StoreUnavailable

TIMEOUT_S = 3.0
URI_FORM = "sqlite:///path/to/mlflow.db, http(s)://host:port of an MLflow server, or a database URL"
STORAGE_FORM = "sqlite:///path/to/optuna.db or a database URL such as postgresql://user@host/db (Optuna's RDB storage)"
FORMS = {"optimize.storage": STORAGE_FORM}  # the accepted form by field; URI_FORM for MLflow's tracking URI


def _form(field: str) -> str:
    return FORMS.get(field, URI_FORM)


PROBE_BYTES = 2**20  # a new MLflow database is about this size; Hydra's config files are a few KiB
NO_ROOM = (errno.ENOSPC, errno.EDQUOT)


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_writable_dir(field: str, text: str) -> None:
    """`text` is, or can become, a folder this process can write in, with room for a new database (tested by
    writing PROBE_BYTES in a probe folder that is removed again)."""
    if not str(text).strip():
        raise ConfigError(field, "empty; accepted: a folder to write in, e.g. mlruns")
    path = Path(text).expanduser().absolute()
    base = _nearest_existing(path)
    if not base.is_dir():
        raise ConfigError(field, f"'{text}': {base} is not a folder; accepted: a folder to write in")
    try:
        probe = tempfile.mkdtemp(prefix=".batch-split-write-test-", dir=base)
    except OSError as err:
        raise _unwritable(field, text, base, err) from None
    try:
        with open(os.path.join(probe, "probe"), "wb") as handle:
            handle.write(bytes(PROBE_BYTES))
    except OSError as err:
        raise _unwritable(field, text, base, err) from None
    finally:
        shutil.rmtree(probe, ignore_errors=True)


def _unwritable(field: str, text: str, base: Path, err: OSError) -> ConfigError:
    reason = os.strerror(err.errno) if err.errno else str(err)
    if err.errno in NO_ROOM:
        return StoreUnavailable(
            field,
            f"the disk of {base} is full ({reason}: not even {PROBE_BYTES // 2**20} MiB could be written); "
            "accepted: a folder on a disk with room",
        )
    return ConfigError(
        field, f"'{text}' cannot be written (no folder can be made in {base}: {reason}); accepted: a folder to write in"
    )


def _inside(path: Path, root: str | None) -> bool:
    if root is None or not str(root).strip():
        return False
    root_path = Path(root).expanduser().absolute()
    return path == root_path or root_path in path.parents


def _sqlite_file(uri: str) -> str:
    return uri[len("sqlite:///") :]


def check_sqlite(field: str, uri: str, root: str | None = None) -> None:
    """The database's folder exists (or is `root`, or inside it: the command makes that) and can be written, and an
    existing file is an SQLite database."""
    path = Path(_sqlite_file(uri)).expanduser()
    if not str(path).strip() or path.is_dir():
        raise ConfigError(field, f"'{uri}' names no database file; accepted: {_form(field)}")
    folder = path.absolute().parent
    if not folder.is_dir() and not _inside(folder, root):
        under_root = f", or under paths.root '{root}' (the command makes it)" if root else ""
        raise ConfigError(
            field,
            f"'{uri}': its folder {folder} does not exist; accepted: a database file in an existing folder{under_root}",
        )
    check_writable_dir(field, str(path.parent))
    if path.is_file():
        try:
            with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=TIMEOUT_S) as db:
                db.execute("PRAGMA schema_version").fetchone()
        except sqlite3.DatabaseError as err:
            raise ConfigError(
                field, f"'{path}' is not a usable SQLite database ({err}); accepted: {_form(field)}"
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
        raise ConfigError(
            field, f"'{_hide_password(uri)}' cannot be opened: {first}; accepted: a database that answers"
        ) from None


def _timeout_args(uri: str) -> dict:
    return {"connect_timeout": int(TIMEOUT_S)} if uri.startswith(("postgresql", "mysql")) else {}


def _hide_password(uri: str) -> str:
    parsed = urllib.parse.urlparse(uri)
    if parsed.password:
        return uri.replace(f":{parsed.password}@", ":***@")
    return uri


def check_store(field: str, uri: str, root: str | None = None) -> None:
    """`uri` opens, or (sqlite) can be made: in an existing folder, or under `root` (paths.root)."""
    scheme = urllib.parse.urlparse(uri).scheme
    if uri.startswith("sqlite:///"):
        check_sqlite(field, uri, root)
    elif scheme in ("http", "https") and field not in FORMS:
        check_server(field, uri)
    elif scheme.split("+")[0] in ("postgresql", "postgres", "mysql", "mssql", "oracle"):
        check_database(field, uri)
    else:
        raise ConfigError(field, f"got '{uri}'; accepted: {_form(field)}")


def check_stores(root: str, tracking_uri: str, storage: str | None = None) -> None:
    """Everything a command will write to: the root folder, MLflow's store, and (optimize) Optuna's."""
    check_writable_dir("paths.root", root)
    check_store("tracking.uri", tracking_uri, root)
    if storage is not None:
        check_store("optimize.storage", storage, root)
