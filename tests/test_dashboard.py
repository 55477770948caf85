"""optuna-dashboard (0.21) and `optuna best-trial` (Optuna 5) over a study recorded the way the study records it, so
that what a person sees in the dashboard is what the study decided.

| outcome                                     | state    | value                     | constraint `memory_gib` (GiB)    |
|---------------------------------------------|----------|---------------------------|----------------------------------|
| measured, fits (peak <= cap)                | COMPLETE | step time, s              | peak - cap (<= 0)                |
| measured (to the end or to a stop) over cap | COMPLETE | its step time, s          | peak - cap, at least 1e-3 (> 0)  |
| skipped: predicted over the cap             | COMPLETE | the probes' step estimate | predicted - cap (> 0)            |
| pruned as slow                              | PRUNED   | none                      | peak - cap if a peak was measured |
| proposed again once decided                 | as the decided trial, labelled `repeat_of`                     |
| claimed elsewhere, crashed                  | FAIL     | none                      | none                             |

- optuna-dashboard 0.21 marks a COMPLETE trial with a positive constraint "infeasible" and plots its value, a grey
  dot among the step times (history, slice, parallel coordinates, distribution), often the lowest: over-the-cap
  configs are often the fastest; a PRUNED trial is not plotted. It calls the lowest COMPLETE value best,
  constraints ignored (optuna_dashboard/_app.py, `get_study_detail`). The value is named `step s`
  (`study.set_metric_names`).
- `python -m pipeline.dashboard` (`make dashboard`) serves the same app with each study detail changed: its
  `best_trials` recomputed from the storage (the study's answer, else the fastest feasible trial, or none when
  nothing fits, as Optuna's own `study.best_trial` and `optuna best-trial` decide); an infeasible trial listed
  without its value (no plot shows it among the step times; the timeline shows it "Infeasible", its attributes
  its step time and reason); a `repeat_of` proposal left out (it would be one more completed trial).
- Each constraint is written twice, with the same value, before `study.tell`: `trial.set_constraint("memory_gib",
  over)` (Optuna 5: system attr `constraints:memory_gib`) and the list `constraints` that optuna-dashboard 0.21 reads
  (optuna_dashboard/_serializer.py); Optuna reads both (optuna/study/_constrained_optimization.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

optuna = pytest.importorskip("optuna")
pytest.importorskip("optuna_dashboard", reason="optuna-dashboard is not installed (pip install optuna-dashboard)")
from optuna.trial import TrialState  # noqa: E402

from tests.helpers.browser import CHROMIUM, CHROMIUM_ARGS, screenshots_folder  # noqa: E402
from tests.helpers.cli import run_cli, start_cli  # noqa: E402
from tests.helpers.net import free_port  # noqa: E402
from tests.helpers.runs import the_study  # noqa: E402
from tests.helpers.settings import CPU_STUDY  # noqa: E402

pytestmark = pytest.mark.slow
try:
    from playwright import sync_api
except ImportError:  # the API tests still run; the browser's view is skipped
    sync_api = None

SPACE = ["1x8", "2x4", "4x2", "8x1"]
STARTUP_S = 60
WIDTH = 1280  # the browser's window: a laptop's


@dataclass(frozen=True)
class Outcome:
    split: str
    status: str  # ok, over-cap, oom, skipped, pruned, repeat
    step_s: float | None = None
    over_gib: float | None = None  # peak (or predicted) minus cap

    @property
    def fits(self) -> bool:
        return self.status == "ok" and self.over_gib is not None and self.over_gib <= 0


# The trap: 8x1 ran to the end faster than anything that fits, but its peak is over the cap.
MIXED = [
    Outcome("1x8", "ok", 1.40, -0.12),
    Outcome("2x4", "ok", 1.02, -0.12),
    Outcome("2x4", "repeat", 1.02, -0.12),
    Outcome("8x1", "ok", 0.74, 0.04),
    Outcome("4x2", "pruned", None, -0.07),
]
NONE_FITS = [Outcome("1x8", "skipped", 1.5, 0.15), Outcome("8x1", "skipped", 0.6, 0.29), Outcome("4x2", "oom", 0.9)]
STUDIES = {"mixed": MIXED, "none-fits": NONE_FITS}


def record(study: optuna.Study, outcome: Outcome) -> None:
    """One trial, told the way the table in this module's docstring says."""
    trial = study.ask()
    trial.suggest_categorical("batch.split", SPACE)
    over = outcome.over_gib
    if outcome.status == "oom" and over is None:
        over = 1e-3  # no peak measured: infeasible all the same
    if outcome.status == "repeat":
        trial.set_user_attr("repeat_of", SPACE.index(outcome.split))
    else:
        trial.set_user_attr("label", f"batch.split={outcome.split}")
        trial.set_user_attr("status", outcome.status)
        trial.set_user_attr("step_time_median_s", outcome.step_s)
    if over is not None:
        trial.set_constraint("memory_gib", over)
        trial.storage.set_trial_system_attr(trial._trial_id, "constraints", [over])
    if outcome.status == "pruned":
        study.tell(trial, state=TrialState.PRUNED)
    else:
        study.tell(trial, outcome.step_s)


def _script(name: str) -> str:
    """A console script of this interpreter's environment (optuna, optuna-dashboard)."""
    beside = Path(sys.executable).with_name(name)
    return str(beside) if beside.exists() else shutil.which(name) or name


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


@pytest.fixture(scope="module")
def storage(tmp_path_factory) -> str:
    """One sqlite file with a study per case, plus one recorded with `set_constraint` alone."""
    url = f"sqlite:///{tmp_path_factory.mktemp('optuna') / 'optuna.db'}"
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for name, outcomes in STUDIES.items():
        study = optuna.create_study(study_name=name, storage=url, sampler=optuna.samplers.RandomSampler(seed=0))
        study.set_metric_names(["step s"])
        for outcome in outcomes:
            study.enqueue_trial({"batch.split": outcome.split}, skip_if_exists=False)
            record(study, outcome)
    alone = optuna.create_study(study_name="set-constraint-only", storage=url)
    trial = alone.ask()
    trial.suggest_categorical("batch.split", SPACE)
    trial.set_constraint("memory_gib", -0.1)
    alone.tell(trial, 1.0)
    return url


@contextlib.contextmanager
def serving(storage: str):
    """optuna-dashboard over `storage`, as `make dashboard` starts it; yields its API's base address."""
    port = free_port()
    args = ["--storage", storage, "--host", "127.0.0.1", "--port", str(port)]
    proc = start_cli(
        *args,
        cwd=Path.cwd(),
        module="pipeline.dashboard",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}/api"
    try:
        deadline = time.time() + STARTUP_S
        while True:
            assert proc.poll() is None, "optuna-dashboard exited"
            try:
                _get(f"{base}/studies")
                break
            except OSError:
                assert time.time() < deadline, "optuna-dashboard did not answer"
                time.sleep(0.5)
        yield base
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)


@pytest.fixture(scope="module")
def dashboard(storage):
    with serving(storage) as base:
        yield base


def _study(base: str, name: str) -> dict:
    ids = {s["study_name"]: s["study_id"] for s in _get(f"{base}/studies")["study_summaries"]}
    return _get(f"{base}/studies/{ids[name]}")


def _over(outcome: Outcome) -> float | None:
    return 1e-3 if outcome.status == "oom" and outcome.over_gib is None else outcome.over_gib


def _shown(name: str) -> list[tuple[int, Outcome]]:
    """The trials the dashboard lists, by number: every one but the repeated proposals."""
    return [(number, o) for number, o in enumerate(STUDIES[name]) if o.status != "repeat"]


@pytest.mark.parametrize("name", list(STUDIES))
def test_the_dashboard_lists_each_decided_trial_once_with_its_constraint_and_a_value_only_where_it_fits(
    dashboard, name
):
    detail = _study(dashboard, name)
    assert detail["objective_names"] == ["step s"]
    trials = sorted(detail["trials"], key=lambda t: t["number"])
    assert [t["number"] for t in trials] == [number for number, _ in _shown(name)]  # no repeated proposal
    for trial, (number, outcome) in zip(trials, _shown(name), strict=True):
        over = _over(outcome)
        assert trial["constraints"] == ([] if over is None else [pytest.approx(over)]), (number, outcome)
        # over the cap, measured or predicted: complete with a positive constraint ("Infeasible" in the timeline),
        # and no value: no plot puts its step time among those of the configs that fit
        assert trial["state"] == ("Pruned" if outcome.status == "pruned" else "Complete")
        assert trial.get("values") == ([outcome.step_s] if outcome.fits else None), (number, outcome)
        if trial["state"] == "Complete" and not outcome.fits:  # its step time, measured or predicted, kept
            attrs = {a["key"]: a["value"] for a in trial["user_attrs"]}
            assert attrs["status"] == outcome.status and float(attrs["step_time_median_s"]) == outcome.step_s


def test_the_page_asks_for_the_trials_after_those_it_was_given(dashboard):
    """The page holds the trials it was given and asks for those after its n-th: n counts in the list without the
    repeated proposal (the app's own count would skip the trial after it, or send one twice)."""
    shown = [number for number, _ in _shown("mixed")]
    ids = {s["study_name"]: s["study_id"] for s in _get(f"{dashboard}/studies")["study_summaries"]}
    for after in range(len(shown) + 1):
        later = _get(f"{dashboard}/studies/{ids['mixed']}?after={after}")["trials"]
        assert [t["number"] for t in later] == shown[after:], after


def test_the_dashboards_best_trial_is_the_fastest_that_fits(dashboard):
    """The trap: 8x1 ran faster than anything that fits, but its peak is over the cap."""
    best = _study(dashboard, "mixed")["best_trials"]
    fastest = min((o for o in MIXED if o.fits), key=lambda o: o.step_s)
    assert [t["number"] for t in best] == [MIXED.index(fastest)]
    assert best[0]["values"] == [fastest.step_s] and best[0]["constraints"] == [pytest.approx(fastest.over_gib)]
    assert _study(dashboard, "none-fits")["best_trials"] == []  # nothing fits: no best


def test_set_constraint_alone_is_not_shown_by_the_dashboard(dashboard):
    """Why the list form is written too; if this fails, optuna-dashboard reads Optuna 5's keys and the list can go."""
    (trial,) = _study(dashboard, "set-constraint-only")["trials"]
    assert trial["constraints"] == []


def test_optuna_best_trial_agrees(storage):
    mixed = optuna.load_study(study_name="mixed", storage=storage)
    fastest = min((o for o in MIXED if o.fits), key=lambda o: o.step_s)
    assert mixed.best_trial.number == MIXED.index(fastest)
    assert mixed.best_trial.constraints == {"0": pytest.approx(fastest.over_gib), "memory_gib": fastest.over_gib}
    with pytest.raises(ValueError):
        _ = optuna.load_study(study_name="none-fits", storage=storage).best_trial

    cli = [_script("optuna"), "best-trial", "--storage", storage, "-f", "json", "--study-name"]
    found = subprocess.run([*cli, "mixed"], capture_output=True, text=True, timeout=120)
    assert found.returncode == 0, found.stderr[-2000:]
    answer = json.loads(found.stdout)
    assert answer["number"] == MIXED.index(fastest) and answer["params"] == {"batch.split": fastest.split}
    assert answer["user_attrs"]["status"] == "ok" and answer["state"] == "COMPLETE"
    nothing = subprocess.run([*cli, "none-fits"], capture_output=True, text=True, timeout=120)
    assert nothing.returncode == 1 and "ValueError" in nothing.stderr


def test_the_dashboard_reads_a_real_mixed_study_as_it_printed_itself(tmp_path):
    """A study of the pipeline itself (tiny model) under a cap that rules out the largest micro-batch (8x1, by
    prediction or measured): the dashboard shows every decided trial's constraint as the storage holds it, the
    over-the-cap ones complete with a positive constraint (infeasible), and as best the answer the study printed.
    The cap leaves room over 1x8's peak (0.46 GiB): a study where nothing fits has no best to show."""
    import re

    proc = run_cli(*CPU_STUDY, cwd=tmp_path, module="pipeline.optimize", timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    printed = re.search(r"best feasible: (tiny \d+x\d+) ", proc.stdout).group(1)
    url = f"sqlite:///{tmp_path / 'mlruns' / 'optuna.db'}"
    study = the_study(url)
    stored = {t.number: t for t in study.trials}
    with serving(url) as base:
        shown = _study(base, study.study_name)
    decided = [t for t in shown["trials"] if "label" in stored[t["number"]].user_attrs]
    assert len(decided) == 4
    over = [t for t in decided if stored[t["number"]].user_attrs["status"] in ("skipped", "over-cap", "oom")]
    assert over, proc.stdout  # the cap ruled something out
    for trial in decided:
        assert trial["constraints"] == [pytest.approx(stored[trial["number"]].system_attrs["constraints:memory_gib"])]
    for trial in over:
        assert trial["state"] == "Complete" and "values" not in trial and trial["constraints"][0] > 0
    (best,) = shown["best_trials"]
    assert stored[best["number"]].user_attrs["label"] == printed
    if CHROMIUM is not None and sync_api is not None:
        numbers = {t["number"] for t in over}
        feasible = {
            t["number"]: t["values"][0] for t in decided if t["state"] == "Complete" and t["number"] not in numbers
        }
        _see_it_in_a_browser(url, study.study_name, best["number"], feasible, numbers, stored)


def _trace(page, plot: str, name: str) -> list[tuple]:
    """The (x, y) points of the plotly traces called `name` of one of the dashboard's plots, as the browser holds
    them."""
    data = page.evaluate(
        "([plot, name]) => (document.getElementById(plot).data || []).filter(t => t.name === name)"
        ".map(t => ({x: Array.from(t.x), y: Array.from(t.y)}))",
        [plot, name],
    )
    return [(x, y) for trace in data for x, y in zip(trace["x"], trace["y"], strict=True)]


def _see_it_in_a_browser(storage: str, name: str, best: int, feasible: dict, over: set, stored: dict) -> None:
    """The study's pages in Chromium, 1280 px wide: the history plots the trials that fit, at their step times, and
    none over the cap (which were its lowest grey dots); the timeline shows those apart, in its "Infeasible" colour;
    the best trial is the study's answer, its value as the console prints it; the study's attributes table keeps its
    card's width; a trial over the cap is badged `Infeasible`, never `Complete`; a trial's page fits the window and
    shows its reason."""
    with serving(storage) as base, sync_api.sync_playwright() as playwright:
        ids = {s["study_name"]: s["study_id"] for s in _get(f"{base}/studies")["study_summaries"]}
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": WIDTH, "height": 1000})
            page.set_default_timeout(STARTUP_S * 1000)
            study_page = f"{base.removesuffix('/api')}/dashboard/studies/{ids[name]}"
            page.goto(study_page)
            page.get_by_text(f"Best Trial (number={best})", exact=True).wait_for()
            page.get_by_text("Infeasible", exact=True).first.wait_for()  # the timeline's legend
            assert page.get_by_text("step s", exact=True).count() >= 1  # the history's axis and its y-axis choice
            history = dict(_trace(page, "plot-history", f"step s of {name}"))  # trial number -> step s
            assert history == pytest.approx(feasible) and not set(history) & over
            assert _trace(page, "plot-history", f"Infeasible Trial of {name}") == []
            timeline = _trace(page, "graph-timeline", "Infeasible")  # bars along time: y is the trial's number
            assert sorted(y for _, y in timeline) == sorted(over)
            card = page.get_by_text(f"Best Trial (number={best})", exact=True).locator("xpath=..")
            best_value = card.get_by_text(re.compile(r"^\d+(\.\d+)?$")).first.inner_text()
            assert float(best_value) == pytest.approx(feasible[best], abs=1e-9) and len(best_value) <= 8, best_value
            attributes = page.get_by_text("Study User Attributes", exact=True).locator("xpath=..").locator("table")
            width = attributes.evaluate("t => [t.scrollWidth, t.parentElement.clientWidth]")
            assert width[0] <= width[1], width  # no value cut at the card's edge, no scroll bar
            shots = screenshots_folder()
            if shots:
                page.screenshot(path=str(shots / "optuna-dashboard.png"), full_page=True)
            page.goto(f"{study_page}/trials")
            for trial in sorted(over | set(feasible)):  # the list's badges: what each trial is
                entry = page.locator(".MuiListItemButton-root", has=page.get_by_text(f"Trial {trial}", exact=True))
                entry.locator(".MuiChip-label").first.wait_for()
                badges = entry.locator(".MuiChip-label").all_inner_texts()
                assert ("Infeasible" in badges) is (trial in over) and ("Complete" in badges) is (trial not in over)
            number = min(over)
            page.goto(f"{study_page}/trials?numbers={number}")
            reason = page.get_by_text(f"reason {stored[number].user_attrs['reason']}", exact=True)
            reason.wait_for()
            assert page.get_by_text("Infeasible", exact=True).count() >= 1
            assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH  # long attributes wrap
            box = reason.evaluate(
                "e => { const b = e.parentElement.parentElement; return [b.scrollHeight, b.clientHeight]; }"
            )
            assert box[0] <= box[1] + 1, box  # every attribute in sight, none in a box that scrolls
        finally:
            browser.close()
