"""Store addresses: an SQLite URI (MLflow's or Optuna's) pinned to the working folder, and whether its file is made."""

from __future__ import annotations

from pathlib import Path

SQLITE = "sqlite:///"


def sqlite_file(uri: str) -> str | None:
    """The file an SQLite URI names, as written (relative to the working folder unless it starts with /); None for
    any other store."""
    return uri[len(SQLITE) :] if uri.startswith(SQLITE) else None


def not_made(uri: str) -> bool:
    """An SQLite store whose file no command has made yet: a reader must not make it (opening would)."""
    file = sqlite_file(uri)
    return file is not None and not Path(file).is_file()


def absolute_uri(uri: str) -> str:
    """`sqlite:///mlruns/mlflow.db` is relative to the working directory: pin it, and create its folder."""
    file = sqlite_file(uri)
    if file is None:
        return uri
    path = Path(file)
    if not path.is_absolute():
        path = path.resolve()
        uri = SQLITE + str(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return uri
