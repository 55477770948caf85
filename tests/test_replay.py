"""The study's sampler replayed against recorded grids (the seed's setting on one H200, bench/results/grid-h200-seed.json:
40 configs of its 52-config knob space, each measured in full; two settings on an H100): a thousand studies on a
simulated machine whose processes differ by as much as the grid's setting was measured to (bench.machine) and whose
speed drifts, each with the study's pruning, skip by prediction and confirmation round (bench/replay.py)."""

from __future__ import annotations

import json
import math
import random
import statistics
from pathlib import Path

import optuna
import pytest

from bench import grid as recorded
from bench import grid_export, replay
from bench.machine import Machine, process_spread

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"
GRID = RESULTS / "grid-h200-seed.json"
CHATS = RESULTS / "record-h100-1205b" / "grid-chats.json"
SMALL = RESULTS / "record-h100-1206" / "grid-small.json"


@pytest.mark.slow
def test_the_model_sampler_finds_the_grids_fastest_in_nine_studies_of_ten_at_a_quarter_of_its_device_time():
    """Measured: 92.3% at 19.7% (BENCHMARKS.md); the confirmation round's later processes of a compiled config read
    its compilation from the study's cache, and so does a trial whose layers an earlier trial compiled (this grid
    recorded no compilation apart: a group's first trial is charged its own start-up)."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    grid = recorded.Grid.load(GRID)
    found = replay.summary(grid, "model", replays=1000, trials_budget=10)
    assert found["found"] >= 0.90, found
    assert found["share_mean"] <= 0.25, found


@pytest.mark.slow
def test_the_model_sampler_on_the_chats_grid_at_a_quarter_of_its_device_time_no_worse_than_today():
    """The variable-length chats (Qwen3-0.6B, 1,024 tokens, effective batch 8) recorded on an H100, all 38 configs,
    under a 20 GiB cap, a budget of 8, each process within the +-9% measured on this model and length. Measured:
    88.6% within 5% of the grid's best at 23.8% of its device time, short of the 90% asked (budget 9: 91.4% at 26.1%):
    a miss answers the runner-up (the best without CUDA graphs, 8.3% slower), the two not told apart under the
    processes' offsets (BENCHMARKS.md). Kept from getting worse."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    grid = recorded.Grid.load(CHATS)
    assert process_spread(grid.setting) == 0.09
    found = replay.summary(grid, "model", replays=1000, trials_budget=8)
    assert found["found"] >= 0.87, found
    assert found["share_mean"] <= 0.25, found


@pytest.mark.slow
def test_the_model_sampler_on_a_grid_nothing_was_tuned_on_at_a_quarter_of_its_device_time():
    """grid-small (Qwen3-0.6B at 1,024 tokens, effective batch 8, 40 configs on an H100, under a 20 GiB cap), a budget
    of 6, each process within the +-9% measured on this model and length. Measured: 97.1% within 5% of the grid's best
    at 20.1% of its device time (89.1% under the +-15% drawn before the spread of this setting was measured;
    BENCHMARKS.md)."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    grid = recorded.Grid.load(SMALL)
    assert process_spread(grid.setting) == 0.09
    found = replay.summary(grid, "model", replays=1000, trials_budget=6)
    assert found["found"] >= 0.90, found
    assert found["share_mean"] <= 0.25, found


def test_each_grid_draws_the_process_spread_measured_on_its_setting():
    """The 0.6B settings measured +-9% at most from process to process, the seed's setting +-15% (and a setting
    measured nowhere gets the seed's): a wrong match would replay a grid under another setting's spread."""
    settings = {path: recorded.Grid.load(path).setting for path in (GRID, CHATS, SMALL)}
    assert {path: process_spread(s) for path, s in settings.items()} == {GRID: 0.15, CHATS: 0.09, SMALL: 0.09}
    assert process_spread("model=qwen3-0.6b train.max_length=512") == 0.15
    assert process_spread("model=qwen3-0.6b train.max_length=10240") == 0.15  # another length, not a prefix of one
    rng = random.Random(0)
    box = Machine(rng, offset=process_spread(settings[SMALL]), drift=0.0, step_cv=0.005)  # the offsets alone
    medians = [statistics.median(box.job(0.1, 12, 2).steady) for _ in range(400)]
    assert 0.1 * 0.88 < min(medians) < 0.1 * 0.93 and 0.1 * 1.07 < max(medians) < 0.1 * 1.12


def test_a_replayed_study_decides_its_budget_and_answers_from_the_grid():
    """One replay, read closely: the budget of configs decided, the answer a config of the grid that fits, the
    device time between the probes' and the grid's."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    grid = recorded.Grid.load(GRID)
    outcome = replay.replay(grid, "model", seed=7, trials_budget=10)
    assert outcome.decided == 10
    assert outcome.answer is not None and grid.fits(outcome.answer)
    assert outcome.ratio == outcome.answer.step_s / grid.best.step_s >= 1.0
    assert 0 < outcome.seconds < grid.seconds


def _grid(tmp_path, second: dict) -> recorded.Grid:
    """A grid of three configs: the baseline (eager), one with compiled layers, and `second`, which compiles 30 s as
    the other does, recorded each in a process of its own."""
    space = {
        "train.torch_compile": ["off", "regional"],
        "train.loss": ["trl", "model"],
        "train.liger_kernel": [False, True],
    }
    configs = [
        {"params": {"train.torch_compile": "off", "train.loss": "trl", "train.liger_kernel": False}, "fixed_s": 2.0},
        {
            "params": {"train.torch_compile": "regional", "train.loss": "trl", "train.liger_kernel": False},
            "fixed_s": 32,
        },
        {"params": {"train.torch_compile": "regional", "train.liger_kernel": False, "train.loss": "trl", **second}},
    ]
    for i, c in enumerate(configs):
        c.update(status="ok", step_s=0.2 - 0.05 * i, peak_gib=5.0, fixed_s=c.get("fixed_s", 32.0), step_sd=0.01)
        c["compile_s"] = c["fixed_s"] - 2.0
    path = tmp_path / f"grid-{len(tmp_path.name)}-{'-'.join(map(str, second.values()))}.json"
    raw = {"setting": "", "space": space, "baseline": configs[0]["params"], "cap_gib": 10.0, "steps": 12, "warmup": 4}
    path.write_text(json.dumps({**raw, "configs": configs}), encoding="utf-8")
    return recorded.Grid.load(path)


def test_a_trial_whose_layers_an_earlier_trial_compiled_compiles_from_the_cache(tmp_path):
    """A config that changes only the loss beside compiled layers a trial already compiled costs its study
    SHARED_COMPILE_S of its 30 s compilation; one that changes the layers (Liger's kernels) compiles them anew."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    loss = replay.replay(_grid(tmp_path, {"train.loss": "model"}), "bruteforce", seed=3, trials_budget=3)
    layers = replay.replay(_grid(tmp_path, {"train.liger_kernel": True}), "bruteforce", seed=3, trials_budget=3)
    assert loss.decided == layers.decided == 3
    saved = 30.0 - recorded.SHARED_COMPILE_S
    assert saved - 3.0 < layers.seconds - loss.seconds < saved + 3.0, (layers.seconds, loss.seconds)


def test_a_configs_steps_vary_in_its_process_as_the_grid_recorded_them():
    """A job's steps spread as the config's recorded `step_sd`, not the machine's default 15%."""
    box = Machine(random.Random(0), drift=0.0)
    quiet, noisy = box.job(0.1, 200, 0, step_cv=0.01), box.job(0.1, 200, 0)
    spread = [statistics.stdev(math.log(t) for t in run.steady) for run in (quiet, noisy)]
    assert 0.008 < spread[0] < 0.012 and 0.13 < spread[1] < 0.17, spread


def test_a_recorded_steps_spread_is_not_moved_by_a_step_that_recompiles():
    """`bench.grid_export.step_sd`: eleven steps of 1% noise and one of 30x (a recompile for a new shape) read as about
    1%, where the standard deviation of the logs reads about 100%."""
    rng = random.Random(1)
    times = [0.1 * math.exp(rng.gauss(0.0, 0.01)) for _ in range(11)] + [3.0]
    assert 0.005 < grid_export.step_sd(times) < 0.02
    assert statistics.stdev(math.log(t) for t in times) > 0.9


def test_eager_layers_share_no_compilation_between_trials():
    """Two eager configs apart in the loss alone: the second's compilation (a compiled loss's) is its own, charged in
    full; two compiled ones apart in the loss share their layers'."""
    eager = recorded.GridConfig({"train.torch_compile": "off", "train.loss": "trl"}, "ok", 0.1, 1.0, 2.0)
    compiled = recorded.GridConfig({"train.torch_compile": "regional", "train.loss": "trl"}, "ok", 0.1, 1.0, 2.0)
    assert recorded.layers(eager) is None
    other_loss = recorded.GridConfig({**compiled.params, "train.loss": "compiled"}, "ok", 0.1, 1.0, 2.0)
    assert recorded.layers(compiled) == recorded.layers(other_loss) is not None


def test_a_studys_first_trial_of_compiled_layers_compiles_them_in_full():
    """The grid compiled a group's layers once, in its first config (30 s), and read them back in the next (1.7 s): a
    study that meets the second first compiles 30 s there; a later config that compiled more (a resumed grid's empty cache,
    40 s) keeps its own; an eager config, and a grid that recorded no compilation, keep their start-up."""
    first = recorded.GridConfig({"train.torch_compile": "regional", "train.loss": "trl"}, "ok", 0.1, 1.0, 32.0, 1, 30.0)
    later = recorded.GridConfig({**first.params, "train.loss": "compiled"}, "ok", 0.1, 1.0, 3.7, 1, 1.7)
    eager = recorded.GridConfig({"train.torch_compile": "off", "train.loss": "trl"}, "ok", 0.1, 1.0, 2.0, 1, 0.0)
    own = recorded.GridConfig({**first.params, "train.loss": "liger"}, "ok", 0.1, 1.0, 42.0, 1, 40.0)
    grid = recorded.Grid({}, first.params, 10.0, 12, 4, [first, later, eager, own])
    assert grid.first_fixed_s(later) == pytest.approx(32.0)
    assert grid.first_fixed_s(first) == pytest.approx(32.0)
    assert grid.first_fixed_s(own) == pytest.approx(42.0)
    assert grid.first_fixed_s(eager) == pytest.approx(2.0)
    unrecorded = recorded.GridConfig(later.params, "ok", 0.1, 1.0, 3.7)
    assert recorded.Grid({}, first.params, 10.0, 12, 4, [first, unrecorded]).first_fixed_s(unrecorded) == 3.7
