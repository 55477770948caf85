"""Shared fixtures: every test runs in its own temporary folder with a clean environment and Hydra state; `cfg` and
`compose` give it job configs composed in that state."""

from __future__ import annotations

import contextlib
import copy
import signal
import tempfile
from pathlib import Path

import psutil
import pytest
from hydra.core.global_hydra import GlobalHydra

from pipeline.config import plan
from pipeline.jobs import context
from tests.helpers.configs import composed
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
    # device locks of this test only: neither the other pytest worker nor other sessions on the machine queue them
    monkeypatch.setenv("BATCH_SPLIT_LOCK_DIR", str(tmp_path.parent / f"{tmp_path.name}-locks"))
    GlobalHydra.instance().clear()
    context.COMMAND.sweep, context.COMMAND.left_out = None, 0  # a command: its sweep ended
    plan.PRECHECKED.plan = None  # and its precheck's configs
    before = {child.pid for child in psutil.Process().children()}
    yield
    GlobalHydra.instance().clear()
    _end_leftover_commands(before)


@pytest.fixture(scope="session")
def cfg_global():
    """The default job config (conf/config.yaml, no overrides), composed once. What it reads of the environment
    (tracking.uri from MLFLOW_TRACKING_URI) stays an interpolation, resolved in each test's clean environment."""
    return composed()


@pytest.fixture
def cfg(cfg_global):
    """The default job config, a copy of this test's own: it may change it."""
    return copy.deepcopy(cfg_global)


@pytest.fixture(scope="session")
def store(tmp_path_factory):
    """A real MLflow store (sqlite) shared by the tests that record runs of their own into it, each under a parent
    run of its own (`tests.helpers.records.record_run`): a new store's schema costs seconds."""
    from pipeline.tracking.store import Tracker

    folder = tmp_path_factory.mktemp("store")
    return Tracker(f"sqlite:///{folder}/mlflow.db", "batch-split", str(folder / "artifacts"))


@pytest.fixture
def compose():
    """Compose the job config of some overrides, in this test's clean state: `compose("batch.split=4x1")`."""
    return composed


def _end_leftover_commands(before: set[int]) -> None:
    """Kill what a test started and left running (a command it gave up waiting on, after a failed assert), with
    everything under it: a leftover sweep would hold a device lock and train on beside the next tests. Not the
    processes multiprocessing keeps for this interpreter (fork server, resource tracker)."""
    for child in psutil.Process().children():
        try:
            if child.pid in before or "multiprocessing" in " ".join(child.cmdline()):
                continue
            tree = [child, *child.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
        for process in tree:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        psutil.wait_procs(tree, timeout=10)


def pytest_configure(config):
    """Ctrl-C reaches the processes the tests start, wherever pytest runs: a shell's background job (`make test &`,
    nohup) starts with SIGINT ignored, children inherit that through exec, and the tests that interrupt a sweep or a
    study would then wait on a process that never hears them."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(config, items):
    """The one-node SLURM clusters' tests keep to one pytest worker (`--dist loadgroup`): each cluster names its node
    `localhost`, and two at once would share the machine's CPUs as two nodes that each think they own them. `gpu`
    tests need a CUDA device: skipped, with the reason, where there is none."""
    from pipeline.config.devices import cuda_device_count

    for item in items:
        if {"slurm_cluster", "slurm_cluster_with_accounting"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.xdist_group("slurm"))
    if cuda_device_count():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
