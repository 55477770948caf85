"""optuna-dashboard (0.21) and `optuna best-trial` (Optuna 5) over a study recorded the way it must be for them to show
the memory constraint and to call only a config that fits "best".

What each trial of the study has to be (the test builds its studies with the real Optuna API in this layout):

| outcome                                     | state    | value          | constraint `memory_gib` (GiB)     |
|---------------------------------------------|----------|----------------|-----------------------------------|
| measured, fits (peak <= cap)                | COMPLETE | step time, s   | peak - cap (<= 0)                 |
| measured to the end, but peak over the cap  | PRUNED   | none           | peak - cap (> 0)                  |
| stopped over the cap, or out of memory      | PRUNED   | none           | peak - cap, at least 1e-3 (> 0)   |
| skipped: predicted over the cap             | PRUNED   | none           | predicted - cap (> 0)             |
| pruned as slow                              | PRUNED   | none           | peak - cap if a peak was measured |
| duplicate, claimed elsewhere, crashed       | FAIL     | none           | none                              |

- COMPLETE only for a config measured to fit. optuna-dashboard's best trial is the storage's lowest COMPLETE value,
  constraints ignored (optuna_dashboard/_app.py:267-271), so an infeasible COMPLETE trial with its real, often
  faster, step time would be called best; with a stand-in value (1e6) it is not, but the history plot's axis runs to
  1e6 and flattens every real point. PRUNED trials have no value: not plotted, never best. Optuna's TPE still learns
  from them: a trial with a positive constraint is ranked infeasible whatever its state (optuna/samplers/_tpe/
  sampler.py:754-755).
- Each constraint is written twice, with the same value, before `study.tell`:
      trial.set_constraint("memory_gib", over)                                   # Optuna 5: "constraints:memory_gib"
      trial.storage.set_trial_system_attr(trial._trial_id, "constraints", [over])  # what optuna-dashboard reads
  Optuna 5's `set_constraint` stores the system attr `constraints:<name>` (optuna/trial/_trial.py:771-781);
  optuna-dashboard 0.21 reads only the older list under `constraints` (optuna_dashboard/_serializer.py:245), so with
  `set_constraint` alone every trial shows `constraints: []`. Optuna reads both forms (optuna/study/
  _constrained_optimization.py:38-55), as `{"0": over, "memory_gib": over}`.
- No `trial.report` on a trial that ends PRUNED for memory: a PRUNED trial takes its last intermediate value as its
  value (optuna/study/_tell.py:134-144).
- User attrs carry the rest: `status` (ok, over-cap, oom, skipped, pruned), `feasible`, `reason`, and the measured
  `step_time_median_s` / `peak_gib` (or `predicted_gib`) even when they are not the value.

Then the dashboard shows each trial's constraint and the fastest feasible trial as best, or no best when nothing
fits; `optuna best-trial` answers the same trial, or exits 1 when nothing fits.
"""

from __future__ import annotations

import contextlib
import json
import os
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

from tests.helpers.net import free_port  # noqa: E402

pytestmark = pytest.mark.slow

SPACE = ["1x8", "2x4", "4x2", "8x1"]
STARTUP_S = 60


@dataclass(frozen=True)
class Outcome:
    split: str
    status: str  # ok, over-cap, oom, skipped, pruned, duplicate
    step_s: float | None = None
    over_gib: float | None = None  # peak (or predicted) minus cap

    @property
    def fits(self) -> bool:
        return self.status == "ok" and self.over_gib is not None and self.over_gib <= 0


# The trap: 8x1 ran to the end faster than anything that fits, but its peak is over the cap.
MIXED = [
    Outcome("1x8", "ok", 1.40, -0.12),
    Outcome("2x4", "ok", 1.02, -0.12),
    Outcome("8x1", "ok", 0.74, 0.04),
    Outcome("4x2", "pruned", None, -0.07),
    Outcome("2x4", "duplicate"),
]
NONE_FITS = [Outcome("1x8", "skipped", None, 0.15), Outcome("8x1", "skipped", None, 0.29), Outcome("4x2", "oom")]
STUDIES = {"mixed": MIXED, "none-fits": NONE_FITS}


def record(study: optuna.Study, outcome: Outcome) -> None:
    """One trial, told the way the table in this module's docstring says."""
    trial = study.ask()
    trial.suggest_categorical("batch.split", SPACE)
    if outcome.status == "duplicate":
        trial.set_user_attr("duplicate_of", f"batch.split={outcome.split}")
        study.tell(trial, state=TrialState.FAIL)
        return
    over = outcome.over_gib
    if outcome.status == "oom" and over is None:
        over = 1e-3  # no peak measured: infeasible all the same
    trial.set_user_attr("label", f"batch.split={outcome.split}")
    trial.set_user_attr("status", outcome.status)
    trial.set_user_attr("feasible", outcome.fits if outcome.status != "pruned" else None)
    trial.set_user_attr("step_time_median_s", outcome.step_s)
    if over is not None:
        trial.set_constraint("memory_gib", over)
        trial.storage.set_trial_system_attr(trial._trial_id, "constraints", [over])
    if outcome.fits:
        study.tell(trial, outcome.step_s)
    else:
        trial.set_user_attr("reason", "over the cap" if outcome.status != "pruned" else "slower than the best")
        study.tell(trial, state=TrialState.PRUNED)


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
    """The real optuna-dashboard over `storage`, as `make dashboard` starts it; yields its API's base address."""
    port = free_port()
    proc = subprocess.Popen(
        [_script("optuna-dashboard"), storage, "--host", "127.0.0.1", "--port", str(port)],
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


@pytest.mark.parametrize("name", list(STUDIES))
def test_the_dashboard_shows_every_trials_memory_constraint(dashboard, name):
    trials = sorted(_study(dashboard, name)["trials"], key=lambda t: t["number"])
    assert len(trials) == len(STUDIES[name])
    for trial, outcome in zip(trials, STUDIES[name], strict=True):
        over = _over(outcome)
        assert trial["constraints"] == ([] if over is None else [pytest.approx(over)]), (trial["number"], outcome)
        expected_state = "Complete" if outcome.fits else "Fail" if outcome.status == "duplicate" else "Pruned"
        assert trial["state"] == expected_state
        # only configs that fit have a value, so only they are plotted: nothing stretches the history's axis
        assert trial.get("values") == ([outcome.step_s] if outcome.fits else None)


def test_the_dashboards_best_trial_is_the_fastest_that_fits(dashboard):
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


def test_the_dashboard_reads_a_real_study_as_it_printed_itself(tmp_path):
    """A study of the pipeline itself (tiny model, every split fits): the dashboard shows every decided trial's
    constraint as the storage holds it, and its best trial is the one the study printed as its answer."""
    import re

    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("MLFLOW_TRACKING_URI", None)
    cmd = [
        sys.executable,
        "-m",
        "pipeline.optimize",
        "mem_cap=16GiB",
        "optimize.trials=3",
        "train.steps=5",
        "measure.warmup_steps=1",
        "optimize.probe_steps=2",
        "optimize.confirm=never",
    ]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    printed = re.search(r"best feasible: (tiny \d+x\d+) ", proc.stdout).group(1)
    url = f"sqlite:///{tmp_path / 'mlruns' / 'optuna.db'}"
    (summary,) = [s for s in optuna.get_all_study_summaries(url) if ":" not in s.study_name]
    stored = {t.number: t for t in optuna.load_study(study_name=summary.study_name, storage=url).trials}
    with serving(url) as base:
        shown = _study(base, summary.study_name)
    decided = [t for t in shown["trials"] if t["state"] in ("Complete", "Pruned")]
    assert len(decided) == 3
    for trial in decided:
        assert trial["constraints"] == [pytest.approx(stored[trial["number"]].system_attrs["constraints:memory_gib"])]
    (best,) = shown["best_trials"]
    assert stored[best["number"]].user_attrs["label"] == printed
