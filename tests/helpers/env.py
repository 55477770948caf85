"""The environment of the tool's processes a test starts: unbuffered, and with no MLflow URI leaking in."""

from __future__ import annotations

import os


def child_env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **extra}
    env.pop("MLFLOW_TRACKING_URI", None)
    return env
