"""Shared fixtures: every test runs in its own temporary folder with a clean environment and Hydra state."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hydra.core.global_hydra import GlobalHydra

from tests.helpers.services import (  # noqa: F401 - fixtures for every test
    mlflow_server,
    postgres_server,
    postgres_url,
    slurm_cluster,
    slurm_cluster_with_accounting,
)


@pytest.fixture(autouse=True)
def clean_state(tmp_path, monkeypatch):
    """Each test in tmp_path, with no MLflow URI or sweep ids leaking in from the environment or other tests, and a
    temp folder of its own (TMPDIR, inherited by the processes it starts): the clean-up of one command must not find
    the folders another test's killed processes left. Beside tmp_path (pytest's retention removes it) and kept short:
    multiprocessing puts a socket path in it."""
    temp = Path(tempfile.mkdtemp(prefix="t-", dir=tmp_path.parent))
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    monkeypatch.chdir(tmp_path)
    for key in ("MLFLOW_TRACKING_URI", "BATCH_SPLIT_SWEEP", "BATCH_SPLIT_HOST"):
        monkeypatch.delenv(key, raising=False)
    # device locks of this test only: tests run one at a time, but other sessions on the machine must not queue them
    monkeypatch.setenv("BATCH_SPLIT_LOCK_DIR", str(tmp_path.parent / f"{tmp_path.name}-locks"))
    GlobalHydra.instance().clear()
    yield
    GlobalHydra.instance().clear()


def pytest_collection_modifyitems(config, items):
    """`gpu` tests need a CUDA device: skipped, with the reason, where there is none."""
    from pipeline.config.devices import cuda_device_count

    if cuda_device_count():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
