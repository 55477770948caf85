"""What a person sees: the MLflow UI and the HTML report of a real sweep, in a real browser (headless Chromium driven
by Playwright).

A small sweep and its report, then the MLflow server started by `python -m pipeline.ui` with the arguments `make ui`
gives it. The link it prints must open the experiment's runs in the UI's "Model training" view (MLflow 3.17 opens
experiments in its GenAI view otherwise) in the project's saved view: every job of the sweep on the page, without a
click, with its step time, tokens/s, peak memory and rank as recorded, and the sweep's name whole. The run page and
the compare page reached from there must stay in the training view, the run's step times must be charted apart
from its warm-up's, and the compare page must plot the step time. The report must show its four plots, loaded, and
its table. `BATCH_SPLIT_SCREENSHOTS=docs` (`make screenshots`) also saves docs/mlflow-ui.png and docs/report.png.

Needs Chromium (`apt-get install chromium`; Playwright's own browser download is not used) and the `playwright`
package; skipped without them.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
import pytest

from tests.helpers.browser import CHROMIUM, CHROMIUM_ARGS, screenshots_folder
from tests.helpers.cli import run_cli
from tests.helpers.net import free_port

if TYPE_CHECKING:
    from mlflow.entities import Run

FAST = ["train.steps=6", "measure.warmup_steps=1", "train.progress_bar=false"]
SPLITS = ["1x4", "2x2", "4x1"]
COLUMNS = ("step_time_median_s", "tokens_per_s", "peak_gib")  # in the view, with the tag rank
WIDTH = 1600
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


def _jobs(folder: Path) -> dict[str, Run]:
    """Job run name -> its run, straight from the store."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{folder / 'mlruns' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("batch-split")
    runs = client.search_runs([experiment.experiment_id])
    return {r.info.run_name: r for r in runs if r.data.tags.get("kind") != "sweep"}


def _in_training_view(page) -> None:
    """The UI's "Model training" view: none of the GenAI view's navigation."""
    for genai_only in ("Evaluation runs", "Judges", "Sessions", "Evaluations"):
        assert page.get_by_text(genai_only, exact=True).count() == 0, (genai_only, page.url)


def _check_runs_table(page, jobs: dict[str, Run], width: int) -> None:
    """Every job's step time, tokens/s, peak memory and rank, as recorded, in cells that are in view; the sweep's
    name whole (no ellipsis)."""
    for name, run in jobs.items():
        row = page.locator(f'[role=row][row-id$=".{run.info.run_id}"]')
        assert row.get_by_role("link", name=name, exact=True).count() == 1, name
        for column, expected in [
            *[(f"metrics.`{m}`", run.data.metrics[m]) for m in COLUMNS],
            ("tags.`rank`", run.data.tags["rank"]),
        ]:
            cell = row.locator(f'[role=gridcell][col-id="{column}"]')
            cell.wait_for()
            box = cell.bounding_box()
            assert box is not None and box["x"] + box["width"] <= width, (name, column, box)
            text = cell.inner_text()
            assert (
                (float(text) == pytest.approx(expected, rel=1e-6))
                if column.startswith("metrics")
                else (text == expected)
            ), (name, column, text, expected)
    sweep = page.get_by_role("link", name=re.compile(r"^sweep \d{8}-\d{6}-[0-9a-f]{6}$"))
    assert sweep.evaluate("link => link.scrollWidth <= link.clientWidth"), "the sweep's name is cut"


def _check_run_page(page, name: str) -> None:
    """A job's page from the table: still the training view, its steady step times charted apart from the warm-up."""
    page.get_by_role("link", name=name, exact=True).click()
    page.get_by_role("heading", name=name).wait_for()
    _in_training_view(page)
    page.get_by_role("tab", name="Model metrics").click()
    for chart in ("step_time_s", "step_time_warmup_s"):  # charts render as they scroll into view: one at a time
        page.get_by_placeholder("Search metric charts").fill(chart)
        page.get_by_text(chart, exact=True).first.wait_for()
    _in_training_view(page)


def _check_compare_page(page, url: str, names: list[str]) -> None:
    """Two jobs compared from the table: the training view still, and the step time plotted."""
    page.goto(url)
    for name in names[:2]:
        row = page.locator("[role=row]", has=page.get_by_role("link", name=name, exact=True)).first
        row.locator(".ag-checkbox-input-wrapper").first.click()
    page.get_by_role("button", name="Compare", exact=True).click()
    page.get_by_text("Parallel Coordinates Plot").first.wait_for()
    _in_training_view(page)
    chosen = page.get_by_text("Metrics:", exact=True).locator("xpath=following-sibling::div[1]")
    assert chosen.locator("[class*=selection-item-content]").all_inner_texts() == [COLUMNS[0]]


def _check_warmup_apart(folder: Path, jobs: dict[str, Run]) -> None:
    """The warm-up step (measure.warmup_steps=1) is charted as step_time_warmup_s, the steady ones as step_time_s."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{folder / 'mlruns' / 'mlflow.db'}")
    for run in jobs.values():
        steady = sorted(m.step for m in client.get_metric_history(run.info.run_id, "step_time_s"))
        warmup = sorted(m.step for m in client.get_metric_history(run.info.run_id, "step_time_warmup_s"))
        assert (warmup, steady) == ([1], [2, 3, 4, 5, 6]), run.info.run_name


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
    _check_warmup_apart(tmp_path, jobs)

    port = free_port()
    server, log = _start_ui(tmp_path, port)
    shots = screenshots_folder()
    try:
        url = _wait_for_url(server, log, port)
        experiment = next(iter(jobs.values())).info.experiment_id
        assert url == f"http://127.0.0.1:{port}/batch-split/runs?experiment={experiment}"
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
                viewport={"width": WIDTH, "height": 720},
            )
            try:
                page = browser.new_page()
                page.set_default_timeout(LOAD_S * 1000)
                page.goto(url)
                page.get_by_role("link", name=names[0], exact=True).wait_for()  # no click: the jobs are in view
                # the training view: its runs page is headed "Runs" ("Training runs" in the GenAI view)
                assert page.get_by_role("heading", name="Runs", exact=True).is_visible()
                _in_training_view(page)
                _check_runs_table(page, jobs, WIDTH)
                # nothing over the table: the link's page told the UI its assistant has opened once already
                assert page.locator('[data-component-id="mlflow.assistant.chat_panel.close"]').count() == 0
                if shots:
                    page.screenshot(path=str(shots / "mlflow-ui.png"))
                _check_run_page(page, names[0])
                _check_compare_page(page, url, names)

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
                assert headers[:4] == [
                    "config",
                    "status",
                    "step s (median [95% CI of one run's steps])",
                    "time vs fastest (95%, paired)",
                ], headers
                for name in names:
                    row = page.locator("table tr", has=page.get_by_role("cell", name=name, exact=True))
                    assert row.locator("td").nth(1).inner_text() == "ok", name
                if shots:
                    page.screenshot(path=str(shots / "report.png"), full_page=True)
            finally:
                browser.close()
    finally:
        _stop(server)
