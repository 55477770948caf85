"""Shared fixtures: every test runs in its own temporary folder with a clean environment and Hydra state."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.core.global_hydra import GlobalHydra

from tests.services import (  # noqa: F401 - fixtures for every test
    postgres_server,
    postgres_url,
    slurm_cluster,
    slurm_cluster_with_accounting,
)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def clean_state(tmp_path, monkeypatch):
    """Each test in tmp_path, with no MLflow URI or sweep ids leaking in from the environment or other tests."""
    monkeypatch.chdir(tmp_path)
    for key in ("MLFLOW_TRACKING_URI", "BATCH_SPLIT_PARENT_RUN_ID", "BATCH_SPLIT_SWEEP_ID"):
        monkeypatch.delenv(key, raising=False)
    GlobalHydra.instance().clear()
    yield
    GlobalHydra.instance().clear()


def run_cli(*args: str, cwd: Path, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run `python -m pipeline.train ARGS` in a real child interpreter."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    full_env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run(
        [sys.executable, "-m", "pipeline.train", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
    )


def files_under(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*"))
