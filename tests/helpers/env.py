"""The environment of the tool's processes a test starts: unbuffered, and with no MLflow URI leaking in."""

from __future__ import annotations

import os


def child_env(**extra: str | None) -> dict[str, str]:
    """This process's environment, unbuffered and without MLFLOW_TRACKING_URI, with `extra` set on it (a name given
    None is removed)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    for name, value in extra.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    env.pop("MLFLOW_TRACKING_URI", None)
    return env
