"""Shared fixtures: every test runs in its own temporary folder with a clean environment and Hydra state."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra.core.global_hydra import GlobalHydra

from tests.services import (  # noqa: F401 - fixtures for every test
    mlflow_server,
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
    for key in ("MLFLOW_TRACKING_URI", "BATCH_SPLIT_SWEEP", "BATCH_SPLIT_HOST"):
        monkeypatch.delenv(key, raising=False)
    # device locks of this test only: tests run one at a time, but other sessions on the machine must not queue them
    monkeypatch.setenv("BATCH_SPLIT_LOCK_DIR", str(tmp_path.parent / f"{tmp_path.name}-locks"))
    GlobalHydra.instance().clear()
    yield
    GlobalHydra.instance().clear()


def run_cli(
    *args: str, cwd: Path, timeout: float = 300, env: dict | None = None, module: str = "pipeline.train"
) -> subprocess.CompletedProcess:
    """Run `python -m MODULE ARGS` (pipeline.train by default) in a real child interpreter."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    full_env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
    )


def wait_for_steps(job_tmp: Path, steps: int = 1, timeout: float = 180, alive=None) -> Path:
    """Wait until a job started with TMPDIR=`job_tmp` has logged `steps` optimizer steps (its steps.jsonl, written
    as it trains); return that file. `alive()` returning False ends the wait with a failure."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for path in job_tmp.glob("batch-split-job-*/steps.jsonl"):
            if len(path.read_text(encoding="utf-8").splitlines()) >= steps:
                return path
        assert alive is None or alive(), "the process ended before its job trained"
        time.sleep(0.1)
    raise AssertionError(f"no job under {job_tmp} logged {steps} steps within {timeout:g} s")


def process_gone(pid: int) -> bool:
    """Exited (or a zombie waiting for a reaper that is not us)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def pytest_collection_modifyitems(config, items):
    """`gpu` tests need a CUDA device: skipped, with the reason, where there is none."""
    from pipeline.config.hardware import cuda_device_count

    if cuda_device_count():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
