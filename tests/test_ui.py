"""What a person sees: the MLflow UI and the HTML report of a real sweep, in a real browser (headless Chromium driven
by Playwright).

A small sweep and its report, then the MLflow server started by `python -m pipeline.ui` with the arguments `make ui`
gives it. The link it prints must open the experiment's runs in the UI's "Model training" view (MLflow 3.17 opens
experiments in its GenAI view otherwise), the sweep's jobs must be there by name, and the column chooser must show
each job's `step_time_median_s` as recorded. The report must show its four plots, loaded, and its table.
`BATCH_SPLIT_SCREENSHOTS=docs` (`make screenshots`) also saves docs/mlflow-ui.png and docs/report.png.

Needs Chromium (`apt-get install chromium`; Playwright's own browser download is not used) and the `playwright`
package; skipped without them.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from tests.helpers.cli import REPO, run_cli
from tests.helpers.net import free_port

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = [
    "--no-sandbox",  # runs as root in containers
    "--headless",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
FAST = ["train.steps=6", "measure.warmup_steps=1", "train.progress_bar=false"]
SPLITS = ["1x4", "2x2", "4x1"]
METRIC = "step_time_median_s"
LOAD_S = 90  # first load of the UI's bundle on a busy 2-core machine

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (apt-get install -y chromium)"),
]
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")


def _start_ui(folder: Path, port: int) -> tuple[subprocess.Popen, Path]:
    """`make ui`'s command, in its own session so that stopping it stops the server's workers too."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    for key in ("MLFLOW_TRACKING_URI", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION"):
        env.pop(key, None)
    log = folder / "ui.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pipeline.ui", "--store", "mlruns", "--host", "127.0.0.1", "--port", str(port)],
            cwd=folder,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    return proc, log


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def _wait_for_url(proc: subprocess.Popen, log: Path, port: int) -> str:
    """The link `pipeline.ui` prints, once the server behind it answers."""
    deadline = time.time() + LOAD_S
    url = None
    while True:
        assert proc.poll() is None, f"the UI server exited:\n{log.read_text()[-3000:]}"
        assert time.time() < deadline, f"the UI server did not come up:\n{log.read_text()[-3000:]}"
        url = url or next(iter(re.findall(r"runs of batch-split: (\S+)", log.read_text())), None)
        if url:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                    return url
            except OSError:
                pass
        time.sleep(0.5)


def _shots() -> Path | None:
    folder = os.environ.get("BATCH_SPLIT_SCREENSHOTS")
    return (REPO / folder) if folder else None


def _jobs(folder: Path) -> dict[str, tuple[str, float]]:
    """Job run name -> (run id, step_time_median_s), straight from the store."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{folder / 'mlruns' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("batch-split")
    runs = client.search_runs([experiment.experiment_id])
    return {
        r.info.run_name: (r.info.run_id, r.data.metrics[METRIC]) for r in runs if r.data.tags.get("kind") != "sweep"
    }


def test_mlflow_ui_and_report_in_a_browser(tmp_path):
    proc = run_cli("-m", f"batch.split={','.join(SPLITS)}", *FAST, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = subprocess.run(
        [sys.executable, "-m", "pipeline.report"], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert report.returncode == 0, report.stderr[-3000:]
    (html,) = (tmp_path / "mlruns" / "reports").glob("*/report.html")
    jobs = _jobs(tmp_path)
    names = [f"tiny {split}" for split in SPLITS]
    assert sorted(jobs) == sorted(names)

    port = free_port()
    server, log = _start_ui(tmp_path, port)
    shots = _shots()
    try:
        url = _wait_for_url(server, log, port)
        assert url.endswith("?workflowType=machine_learning")
        # only the web server runs: the CLI and its uvicorn worker, no job runner or huey consumers
        tree = [psutil.Process(server.pid), *psutil.Process(server.pid).children(recursive=True)]
        commands = [" ".join(p.cmdline()) for p in tree]
        assert len(tree) == 2 and not any("huey" in c or "_job_runner" in c for c in commands), commands

        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch_persistent_context(
                str(tmp_path / "chromium-profile"),  # a fresh profile: no remembered "Model training" choice
                executable_path=CHROMIUM,
                args=CHROMIUM_ARGS,
                headless=True,
                viewport={"width": 1600, "height": 720},
            )
            try:
                page = browser.new_page()
                page.set_default_timeout(LOAD_S * 1000)
                page.goto(url)
                sweep = page.get_by_role("link", name=re.compile(r"^sweep \d{8}-"))
                sweep.wait_for()
                # the training view: its runs page is headed "Runs" ("Training runs" in the GenAI view), and the
                # GenAI view's navigation is absent
                assert page.get_by_role("heading", name="Runs", exact=True).is_visible()
                for genai_only in ("Evaluation runs", "Judges", "Sessions"):
                    assert page.get_by_text(genai_only, exact=True).count() == 0, genai_only
                assistant = page.locator('[data-component-id="mlflow.assistant.chat_panel.close"]')
                if assistant.count():
                    assistant.click()  # the assistant panel opens by itself on a first visit

                # the sweep's jobs, nested under it
                page.locator("[role=gridcell]", has=sweep).locator("button").first.click()
                for name in names:
                    page.get_by_role("link", name=name, exact=True).wait_for()

                # the metric, added through the column chooser
                page.get_by_test_id("column-selection-dropdown").first.click()
                page.get_by_placeholder("Search columns").fill(METRIC)
                tree_view = page.get_by_test_id("column-selector-tree")
                node = tree_view.locator(".du-bois-light-tree-treenode").filter(has_text=re.compile(rf"^{METRIC}$"))
                node.locator("[class*=checkbox]").first.click()
                page.keyboard.press("Escape")
                for name in names:
                    run_id, value = jobs[name]
                    rows = page.locator(f'[role=row][row-id="{run_id}"]')
                    assert rows.get_by_role("link", name=name, exact=True).count() == 1, name
                    cell = rows.locator(f'[role=gridcell][col-id="metrics.`{METRIC}`"]')
                    cell.wait_for()
                    assert float(cell.inner_text()) == pytest.approx(value, rel=1e-6), name
                if shots:
                    page.screenshot(path=str(shots / "mlflow-ui.png"))

                # the report: four plots that loaded, and the comparison table
                page.set_viewport_size({"width": 1500, "height": 900})  # two plots a row
                page.goto(html.as_uri())
                images = page.locator("img")
                assert images.count() == 4
                for i in range(4):
                    image = images.nth(i)
                    loaded = image.evaluate("img => img.complete && img.naturalWidth > 0 && img.naturalHeight > 0")
                    assert loaded, image.get_attribute("src")
                headers = page.locator("table th").all_inner_texts()
                assert headers[:3] == ["config", "status", "step s (median [95% CI])"], headers
                for name in names:
                    row = page.locator("table tr", has=page.get_by_role("cell", name=name, exact=True))
                    assert row.locator("td").nth(1).inner_text() == "ok", name
                if shots:
                    page.screenshot(path=str(shots / "report.png"), full_page=True)
            finally:
                browser.close()
    finally:
        _stop(server)
