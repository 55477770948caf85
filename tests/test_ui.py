"""What a person sees: the MLflow UI and the reports of a real sweep with repeats and of a real study, in a real
browser (headless Chromium driven by Playwright).

A sweep of three splits with three repeats (paired rounds) and a study under a cap whose confirmation round has
three short rounds (its intervals are wide, often open: `0.83x [0.00, 1212.40]`), both in one store, their reports,
then the MLflow server started by `python -m pipeline.ui` with the arguments `make ui` gives it. The link it prints
must open the experiment's runs in the UI's "Model training" view (MLflow 3.17 opens experiments in its GenAI view
otherwise) in the project's saved view. On a screen 1280 px wide, 900 high, with no click: the sweep's own row first,
with its winner (or the fastest and its ties) and by how much, whole and in view; every run in view with its rank,
`time vs fastest` and status whole and its note begun; the study's groups told apart by their names, whole (its
trials, its probes, its confirmation runs, what went over the cap), the confirmation group's row showing no step time
to read as faster than a trial. On a wider one every run's figures as recorded (rounded as the console prints them),
its rank, `time vs fastest` and notes as the console's table said them, whole. The run page and the compare page
reached from there must stay in the training view, the run's step times must be charted apart from its warm-up's,
and the compare page must plot the step time. Each report, opened through MLflow's artifact viewer (which serves the
page, not the files beside it), must name its baseline and its claim at the top and show its four plots; its
step-time plot's bars and labels must be one number (the reference's bar its step column, every other ranked bar that
times the `time vs` cell above it), in the table's order, the axis set by the bars and not by an interval. The loss
deviation of every config must be one number in the console, the card, the report and MLflow.
`BATCH_SPLIT_SCREENSHOTS=docs` (`make screenshots`) also saves docs/mlflow-ui.png, docs/report.png and
docs/report-study.png.

Needs Chromium (`apt-get install chromium`; Playwright's own browser download is not used) and the `playwright`
package; skipped without them.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
import pytest

from tests.helpers.browser import CHROMIUM, CHROMIUM_ARGS, screenshots_folder
from tests.helpers.cli import run_cli, start_cli
from tests.helpers.net import free_port
from tests.helpers.settings import CPU_STUDY

if TYPE_CHECKING:
    from mlflow.entities import Run

FAST = ["train.steps=6", "measure.warmup_steps=1", "train.progress_bar=false"]
SPLITS = ["1x4", "2x2", "4x1"]
STUDY = [  # the README's CPU study, shorter, its confirmation round three rounds of every config that fits
    *CPU_STUDY,
    "optimize.confirm=always",
    "optimize.confirm_rounds=3",
    "optimize.confirm_share=0.8",
    "optimize.confirm_steps=3",
    "optimize.prune_factor=100",  # every config that fits measured in full, however busy the machine: a round to rank
]
COLUMNS = ("step_time_median_s", "tokens_per_s", "peak_gib")  # in the view, with the tags below
TAGS = ("rank", "time_vs_fastest", "note")
MAX_DRIFT, MAX_CV = 0.10, 0.25  # measure.max_drift, measure.max_cv: beyond them a run's note says so
WIDTH = 1920
NARROW, FOLD = 1280, 900  # the screen of the first look: every answer column in view, no click
LOAD_S = 90  # first load of the UI's bundle on a busy 2-core machine

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (apt-get install -y chromium)"),
]
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")


def _start_ui(folder: Path, port: int) -> tuple[subprocess.Popen, Path]:
    """`make ui`'s command, in its own session so that stopping it stops the server's workers too."""
    log = folder / "ui.log"
    args = ["--store", "mlruns", "--host", "127.0.0.1", "--port", str(port)]
    with open(log, "w") as out:  # MLflow's job runner as pipeline.ui sets it, not as this shell might
        proc = start_cli(
            *args,
            cwd=folder,
            module="pipeline.ui",
            env={"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": None},
            stdout=out,
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


def _runs(folder: Path) -> list[Run]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{folder / 'mlruns' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("batch-split")
    return client.search_runs([experiment.experiment_id], max_results=1000)


def _table(stdout: str) -> list[list[str]]:
    """The rows of the comparison table a sweep printed, as cells."""
    return [[c.strip() for c in line.split("|")[1:-1]] for line in stdout.splitlines() if line.startswith("| tiny ")]


def _own_notes(run: Run) -> str:
    """What a run's note must say of its own steps, from its metrics: the console's words."""
    m = run.data.metrics  # drift and cv logged as the console's percents
    drift = abs(m["step_time_drift_pct"]) / 100 if "step_time_drift_pct" in m else 0.0  # none over a few steps
    said = [f"drift {100 * drift:.0f}%"] if drift > MAX_DRIFT else []
    said += [f"cv {m['step_time_cv_pct']:.0f}%"] if m["step_time_cv_pct"] / 100 > MAX_CV else []
    return "; ".join(said) or "-"


def _in_training_view(page) -> None:
    """The UI's "Model training" view: none of the GenAI view's navigation."""
    for genai_only in ("Evaluation runs", "Judges", "Sessions", "Evaluations"):
        assert page.get_by_text(genai_only, exact=True).count() == 0, (genai_only, page.url)


def _cell(page, run: Run, column: str):
    cell = page.locator(f'[role=row][row-id$=".{run.info.run_id}"] [role=gridcell][col-id="{column}"]')
    cell.wait_for()
    return cell


def _check_run_row(page, run: Run, expected: dict[str, str]) -> None:
    """One run's row: its figures as stored, its tags as `expected`, every cell in view and whole (no ellipsis)."""
    for key in COLUMNS:
        cell = _cell(page, run, f"metrics.`{key}`")
        assert float(cell.inner_text()) == pytest.approx(run.data.metrics[key], rel=1e-6), (run.info.run_name, key)
    for key in TAGS:
        cell = _cell(page, run, f"tags.`{key}`")
        assert cell.inner_text() == expected[key] == run.data.tags.get(key, "-"), (run.info.run_name, key)
    for key in [*(f"metrics.`{k}`" for k in COLUMNS), *(f"tags.`{k}`" for k in TAGS)]:
        cell = _cell(page, run, key)
        box = cell.bounding_box()
        assert box is not None and box["x"] + box["width"] <= WIDTH, (run.info.run_name, key, box)
        whole = cell.evaluate("c => [...c.querySelectorAll('*'), c].every(e => e.scrollWidth <= e.clientWidth)")
        assert whole, (run.info.run_name, key, cell.inner_text())


def _check_sweep_rows(page, stdout: str, runs: list[Run]) -> None:
    """Each job: its config's rank and `time vs fastest` as the console's table printed them, and its own notes;
    the parent: the fastest (the table's first row), and the next config's ratio to it."""
    table = {row[0]: row for row in _table(stdout)}
    jobs = [r for r in runs if r.data.tags.get("kind") == "job"]
    assert sorted(r.data.tags["display_name"] for r in jobs) == sorted(f"tiny {s}" for s in SPLITS for _ in range(3))
    first, second = _table(stdout)[:2]
    for run in jobs:
        row = table[run.data.tags["display_name"]]
        rank = _in_short(row[9], _table(stdout)) if row[0] == first[0] else row[9]
        _check_run_row(page, run, {"rank": rank, "time_vs_fastest": row[3], "note": _own_notes(run)})
    (parent,) = [r for r in runs if r.data.tags.get("kind") == "sweep"]
    assert parent.data.metrics["step_time_median_s"] == pytest.approx(float(first[2].split()[0]), abs=6e-5)
    expected = {
        "rank": f"{first[0]}: {_in_short(first[9], _table(stdout)).partition('; ')[0]}",  # its ties: `next`'s interval
        "time_vs_fastest": f"next: {second[3]}",
        "note": "9 of 9 jobs finished",
    }
    _check_run_row(page, parent, expected)


def _in_short(rank: str, table: list[list[str]]) -> str:
    """The fastest's rank in the runs table, from the console's: `winner`, or `fastest; 2 not told apart`,
    counting the rows tied with it."""
    if rank == "winner":
        return rank
    near = sum(1 for row in table if row[9].startswith("equal ±"))
    apart = sum(1 for row in table if row[9].startswith("not told apart ("))
    return "; ".join(
        ["fastest", *([f"equal with {near}"] if near else []), *([f"{apart} not told apart"] if apart else [])]
    )


def _whole(locator) -> bool:
    """Nothing in it cut: every element as wide as what it holds (no ellipsis); the group's colour picker, hidden in
    a box a pixel wide, aside."""
    return locator.evaluate(
        "c => [...c.querySelectorAll('*'), c].every(e => e.clientWidth <= 1 || e.scrollWidth <= e.clientWidth)"
    )


def _check_on_open(page, url: str, runs: list[Run], study_name: str) -> None:
    """The first look, 1280 x 900, no click: the sweep's own run first, its winner and by how much whole and in
    view; every run drawn with its rank, time ratio and status whole and in view, its note begun; the study's groups
    named whole, each a role (its trials, probes, confirmation runs, over the cap); the confirmation group's row
    showing no step time (its runs' figures are a round's few steps, not a config's)."""
    sweep = next(r for r in runs if r.data.tags.get("kind") == "sweep")
    page.goto(url)
    own = page.locator(f'[role=row][row-id$=".{sweep.info.run_id}"]').first
    own.wait_for()
    assert own.get_attribute("row-index") == "1", "the sweep's own run is not the first under its group"
    right = page.locator(".ag-body-viewport").bounding_box()
    right = right["x"] + right["width"]
    for run in [r for r in runs if r.data.tags.get("kind") in ("sweep", "job", "study", "trial")]:
        row = page.locator(f'[role=row][row-id$=".{run.info.run_id}"]').first
        box = row.bounding_box() if row.count() else None
        if box is None or box["y"] + box["height"] > FOLD:
            continue  # below the fold: the grid draws what is in view
        for key in ("rank", "time_vs_fastest", "status"):
            cell = _cell(page, run, f"tags.`{key}`")
            edge = cell.bounding_box()
            assert edge["x"] + edge["width"] <= right and _whole(cell), (run.info.run_name, key, cell.inner_text())
        assert _cell(page, run, "tags.`note`").bounding_box()["x"] < right - 60, run.info.run_name
    parent = [_cell(page, sweep, f"tags.`{k}`").inner_text() for k in ("rank", "time_vs_fastest")]
    assert parent == [sweep.data.tags["rank"], sweep.data.tags["time_vs_fastest"]], parent
    groups = {r.data.tags["group"] for r in runs if r.data.tags.get("study")}
    expected = {f"study {study_name}", f"probes · {study_name}", f"confirm · {study_name}"}
    assert expected <= groups and groups <= expected | {f"over cap · {study_name}"}, groups
    for group in sorted(groups):
        label = _scrolled_to(page, f'[role=row][row-id="tag.group.{group}"] [col-id="attributes.`Run Name`"]')
        said = label.inner_text().splitlines()  # beside the name: the group's colour and its count of runs
        assert f"Group: {group}" in said and _whole(label), (group, said)
    step = '[col-id="metrics.`step_time_median_s`"]'
    confirm = _scrolled_to(page, f'[role=row][row-id="tag.group.confirm · {study_name}"] {step}')
    assert not re.search(r"\d", confirm.inner_text()), confirm.inner_text()  # `- (min)`: no round's few steps


def _scrolled_to(page, selector: str):
    """The element `selector` finds, the grid scrolled down until it draws it (it draws the rows in view)."""
    viewport = page.locator(".ag-body-viewport").first
    found = page.locator(selector).first
    for top in range(0, 20000, 300):
        viewport.evaluate("(v, top) => { v.scrollTop = top; }", top)
        page.wait_for_timeout(100)
        if found.count():
            found.scroll_into_view_if_needed()
            return found
    raise AssertionError(f"the grid never drew {selector}")


def _check_run_page(page, run: Run) -> None:
    """A job's page from the table: still the training view, its description in the console's words (its rank,
    time ratio, drift), its steady step times charted apart from the warm-up."""
    name = run.info.run_name
    page.get_by_role("link", name=name, exact=True).click()
    page.get_by_role("heading", name=name).wait_for()
    _in_training_view(page)
    page.get_by_text(re.compile(rf"^{re.escape(run.data.tags['display_name'])}: ok, step \d\.\d{{4}} s")).wait_for()
    page.get_by_role("tab", name="Model metrics").click()
    for chart in ("step_time_s", "step_time_warmup_s"):  # charts render as they scroll into view: one at a time
        page.get_by_placeholder("Search metric charts").fill(chart)
        page.get_by_text(chart, exact=True).first.wait_for()
    _in_training_view(page)


def _check_compare_page(page, url: str, runs: list[Run]) -> None:
    """Two jobs compared from the table: the training view still, and the step time plotted."""
    page.goto(url)
    for run in runs[:2]:
        row = page.locator(f'[role=row][row-id$=".{run.info.run_id}"]').first
        row.locator(".ag-checkbox-input-wrapper").first.click()
    page.get_by_role("button", name="Compare", exact=True).click()
    page.get_by_text("Parallel Coordinates Plot").first.wait_for()
    _in_training_view(page)
    chosen = page.get_by_text("Metrics:", exact=True).locator("xpath=following-sibling::div[1]")
    assert chosen.locator("[class*=selection-item-content]").all_inner_texts() == [COLUMNS[0]]


def _check_report(page, base: str, parent: Run, sweep: bool, baseline: str):
    """The report as MLflow's artifact viewer shows it: its baseline and its claim under the headline; its four
    plots drawn; its step-time plot's bars and labels one number, in the table's order: the reference's bar its step
    column, every other ranked bar that times its `time vs` cell (the label above it), an unranked bar its own step
    column; the axis set by the bars (the tallest reaches 1/1.3 of it, whatever an interval says); in a sweep, the
    bars rise as the ranks. Its table's rows, as cells."""
    experiment, run_id = parent.info.experiment_id, parent.info.run_id
    page.goto(f"{base}/#/experiments/{experiment}/runs/{run_id}/artifacts/report/report.html")
    page.locator("iframe").first.wait_for()
    report = next(f for f in _wait_for_frames(page) if f.url.startswith("blob:"))
    report.locator("table").wait_for()
    said = report.locator("p.claim").all_inner_texts()
    assert said[0].startswith(f"Baseline: {baseline} ("), said
    claim = said[1]
    figure = re.search(r"\d+\.\d+x the (?:baseline's )?tokens/s (?:of [^[]+)?\[(\d+\.\d+), (\d+\.\d+)\]", claim)
    assert claim.startswith("Claim: ") and (figure or "no speed-up" in claim), said
    if figure:  # a figure only where its interval excludes 1
        assert float(figure[1]) > 1 or float(figure[2]) < 1, claim
    figures = report.locator("figure svg")
    assert figures.count() == 4
    for i in range(4):
        box = figures.nth(i).bounding_box()
        assert box is not None and box["width"] > 300 and box["height"] > 150, (i, box)
    rows = [r.locator("td").all_inner_texts() for r in report.locator("table tr").all()[1:]]
    axes = _geometry(report.locator("#step-axes"))
    # every bar the plot draws: a step time, or a pruned config's first steps (hatched), which may be the tallest
    bars = _bar_values(rows)
    heights = {i: _geometry(report.locator(f"#step-bar-{i}")) for i in bars}
    tallest = max(bars, key=bars.get)
    assert heights[tallest] == pytest.approx(axes / 1.3, rel=0.02)
    for i, value in bars.items():
        assert heights[i] / heights[tallest] == pytest.approx(value / bars[tallest], abs=0.02), (rows[i], heights)
    ranked = [i for i, r in enumerate(rows) if r[3] != "-"]
    assert len(ranked) >= 2, rows  # paired rounds ranked them
    for i in ranked:
        assert report.locator(f"#step-label-{i}").text_content().strip() == rows[i][3], rows[i]
    if sweep:
        assert [heights[i] for i in ranked] == sorted(heights[i] for i in ranked), (rows, heights)
    return rows


def _geometry(locator) -> float:
    """An SVG element's height as drawn, without its outline (a hatched bar has one, a filled bar none)."""
    return locator.evaluate("e => (e.querySelector('path') || e).getBBox().height")


def _bar_values(rows: list[list[str]]) -> dict[int, float]:
    """What each bar must be, from the report's table: the reference's step column (`fastest`, `answer`) times a
    ranked row's time ratio; an unranked row's own step column."""
    steps = {i: float(r[2].split()[0]) for i, r in enumerate(rows) if re.match(r"\d", r[2])}
    reference = next((steps[i] for i, r in enumerate(rows) if r[3] in ("fastest", "answer")), None)
    ratios = {i: float(r[3].split("x")[0]) for i, r in enumerate(rows) if re.match(r"\d", r[3])}
    return {i: reference * ratios[i] if i in ratios else value for i, value in steps.items()}


def _check_loss_deviation(folder: Path, runs: list[Run], *printed: tuple[str, list[list[str]]]) -> None:
    """Each config's loss deviation is one number: in the console's table (a sweep's, a study's trials), its card,
    its report's table and its runs' `loss_max_rel_dev` in MLflow."""
    for console, report in printed:
        study = re.search(r"^\[study\] \S+:", console, re.M) is not None
        card = run_cli(*(["--study"] if study else ["--sweep"]), _name(console), cwd=folder, module="pipeline.card")
        assert card.returncode == 0, card.stderr[-2000:]
        said = {row[1 if study else 0]: row[8] for row in _console_rows(console, study)}
        in_card = {r["config"]: _e(r["loss_dev"]) for r in json.loads(card_json(folder, console).read_text())["rows"]}
        in_report = {row[0]: row[8] for row in report}
        kinds = ("trial",) if study else ("job",)
        logged = {
            r.data.tags["display_name"]: _e(r.data.metrics.get("loss_max_rel_dev"))
            for r in runs
            if r.data.tags.get("kind") in kinds and r.data.tags.get(_scope(study)) == _name(console)
        }
        assert said and said == in_report == {k: v for k, v in in_card.items() if k in said}, (said, in_card, in_report)
        assert {k: v for k, v in logged.items() if v != "-"} == {k: v for k, v in said.items() if v != "-"}, logged


def _name(console: str) -> str:
    return re.search(r"^\[(?:sweep|study)\] (\S+):", console, re.M)[1]


def _scope(study: bool) -> str:
    return "study" if study else "sweep_id"


def card_json(folder: Path, console: str) -> Path:
    return folder / "cards" / f"{_name(console)}.json"


def _e(value: float | None) -> str:
    return "-" if value is None else f"{value:.1e}"


def _console_rows(console: str, study: bool) -> list[list[str]]:
    """The rows of the table a sweep printed (`| tiny ...`), or of a study's trials (`| 0 | tiny ...`)."""
    pattern = r"^\| \d+ +\| tiny " if study else r"^\| tiny "
    return [[c.strip() for c in line.split("|")[1:-1]] for line in console.splitlines() if re.match(pattern, line)]


def _wait_for_frames(page) -> list:
    deadline = time.time() + LOAD_S
    while not any(f.url.startswith("blob:") for f in page.frames):
        assert time.time() < deadline, "the artifact viewer showed no page"
        page.wait_for_timeout(200)
    return page.frames


def _run_sweep_and_study(folder: Path) -> tuple[str, str, str]:
    """The study, then the sweep (the newest group is the table's first), each with its report; their console
    output, and the study's name."""
    # the console's tables in full (wide=true), cell for cell as the report's and the card's
    study = run_cli(
        *STUDY, "train.progress_bar=false", "wide=true", cwd=folder, timeout=1200, module="pipeline.optimize"
    )
    assert study.returncode == 0, study.stdout[-3000:] + study.stderr[-3000:]
    sweep = run_cli("-m", f"batch.split={','.join(SPLITS)}", "repeats=3", "wide=true", *FAST, cwd=folder, timeout=1200)
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    name = re.search(r"^\[study\] (\S+):", study.stdout, re.M)[1]
    sweep_id = re.search(r"^\[sweep\] (\S+):", sweep.stdout, re.M)[1]
    for which in (["--sweep", sweep_id], ["--study", name]):
        report = run_cli(*which, cwd=folder, timeout=300, module="pipeline.report")
        assert report.returncode == 0, report.stderr[-3000:]
    return sweep.stdout, study.stdout, name


def test_mlflow_ui_and_reports_of_a_sweep_and_a_study_in_a_browser(tmp_path):
    _look(tmp_path, *_run_sweep_and_study(tmp_path))


def _look(tmp_path: Path, sweep_out: str, study_out: str, study_name: str) -> None:
    """Everything the test looks at, in the store of `tmp_path`."""
    runs = _runs(tmp_path)
    jobs = [r for r in runs if r.data.tags.get("kind") == "job"]
    for run in jobs:  # the warm-up step charted as step_time_warmup_s, the steady ones as step_time_s; no empty ones
        assert "compile_s" not in run.data.metrics and "context_gib" not in run.data.metrics, run.info.run_name
    sweep_parent = next(r for r in runs if r.data.tags.get("kind") == "sweep")
    study_parent = next(r for r in runs if r.data.tags.get("kind") == "study")
    answer = next(
        r for r in runs if r.data.tags.get("kind") == "trial" and r.data.tags.get("time_vs_fastest") == "answer"
    )
    # the answer, or the winner where its round told it faster than every other finalist
    assert study_parent.data.tags["rank"] in {f"{answer.data.tags['display_name']}: {w}" for w in ("answer", "winner")}

    port = free_port()
    server, log = _start_ui(tmp_path, port)
    shots = screenshots_folder()
    try:
        url = _wait_for_url(server, log, port)
        assert url == f"http://127.0.0.1:{port}/batch-split/runs?experiment={sweep_parent.info.experiment_id}"
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
                viewport={"width": WIDTH, "height": 1700},  # every row drawn: the grid draws those in view
            )
            try:
                first = browser.new_page()
                first.set_default_timeout(LOAD_S * 1000)
                first.set_viewport_size({"width": NARROW, "height": FOLD})
                _check_on_open(first, url, runs, study_name)
                if shots:
                    first.goto(url)
                    first.get_by_role("link", name=sweep_parent.info.run_name, exact=True).wait_for()
                    first.screenshot(path=str(shots / "mlflow-ui.png"))
                first.close()
                page = browser.new_page()
                page.set_default_timeout(LOAD_S * 1000)
                page.goto(url)
                page.get_by_role("link", name=jobs[0].info.run_name, exact=True).wait_for()  # no click: in view
                # the training view: its runs page is headed "Runs" ("Training runs" in the GenAI view)
                assert page.get_by_role("heading", name="Runs", exact=True).is_visible()
                _in_training_view(page)
                _check_sweep_rows(page, sweep_out, runs)
                _check_run_row(page, answer, {k: answer.data.tags.get(k, "-") for k in TAGS})
                for group in ("study ", "probes · ", "confirm · "):  # a study's probes and short runs apart
                    page.get_by_text(re.compile(rf"^Group: {re.escape(group + study_name)}$")).wait_for()
                sweep_name = page.get_by_role("link", name=sweep_parent.info.run_name, exact=True)
                assert sweep_name.evaluate("link => link.scrollWidth <= link.clientWidth"), "the sweep's name is cut"
                # nothing over the table: the link's page told the UI its assistant has opened once already
                assert page.locator('[data-component-id="mlflow.assistant.chat_panel.close"]').count() == 0
                _check_run_page(page, jobs[0])
                _check_compare_page(page, url, jobs)

                base = url.split("/batch-split/")[0]
                first_config = f"tiny {SPLITS[0]}"  # the sweep's baseline: its first config
                sweep_rows = _check_report(page, base, sweep_parent, True, first_config)
                assert [r[0] for r in sweep_rows] == [row[0] for row in _table(sweep_out)]
                baseline = re.search(r"^\| \d+ +\| (tiny \S+) .*\| baseline", study_out, re.M)[1]
                study_rows = _check_report(page, base, study_parent, False, baseline)
                _check_loss_deviation(tmp_path, runs, (sweep_out, sweep_rows), (study_out, study_rows))
                if shots:  # each report as a page of its own, two plots a row
                    page.set_viewport_size({"width": 1750, "height": 900})
                    for name, which in (("report.png", sweep_parent), ("report-study.png", study_parent)):
                        folder = which.data.tags.get("sweep_id") or which.data.tags["study"]
                        page.goto((tmp_path / "mlruns" / "reports" / folder / "report.html").as_uri())
                        page.screenshot(path=str(shots / name), full_page=True)
            finally:
                browser.close()
    finally:
        _stop(server)
