"""The study's sampler replayed against the grid recorded on one H200 (bench/results/grid-h200-seed.json: 40 configs
of the seed's setting's 52-config knob space, each measured in full): a thousand studies on a simulated machine whose
processes differ by up to +-15% and whose speed drifts, each with the study's pruning, skip by prediction and
confirmation round (bench/replay.py)."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from bench import replay

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"
GRID = RESULTS / "grid-h200-seed.json"
CHATS = RESULTS / "record-h100-1205b" / "grid-chats.json"
SMALL = RESULTS / "record-h100-1206" / "grid-small.json"


@pytest.mark.slow
def test_the_model_sampler_finds_the_grids_fastest_in_nine_studies_of_ten_at_a_quarter_of_its_device_time():
    """Measured: 91.4% at 24.0% (BENCHMARKS.md); the confirmation round's later processes of a compiled config read
    its compilation from the study's cache, and the round plans them so."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    grid = replay.Grid.load(GRID)
    found = replay.summary(grid, "model", replays=1000, trials_budget=10)
    assert found["found"] >= 0.90, found
    assert found["share_mean"] <= 0.25, found


@pytest.mark.slow
def test_the_model_sampler_on_the_chats_grid_at_a_quarter_of_its_device_time_no_worse_than_today():
    """The variable-length chats (Qwen3-0.6B, 1,024 tokens, effective batch 8) recorded on an H100, all 38 configs,
    under a 20 GiB cap, a budget of a quarter of them (9). Measured: 80.7% within 5% of the grid's best at 24.1% of its
    device time, short of the 90% asked (budgets 7, 10, 12: 79.1%, 83.8%, 85.7%; at 28 of the configs, budget 7, it
    was 100%): a miss answers the runner-up (the best without CUDA graphs, 8.3% slower) in 29 of 33 misses, the two
    not told apart under the process noise the replay draws (BENCHMARKS.md). Kept from getting worse."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    grid = replay.Grid.load(CHATS)
    found = replay.summary(grid, "model", replays=1000, trials_budget=9)
    assert found["found"] >= 0.78, found
    assert found["share_mean"] <= 0.25, found


@pytest.mark.slow
def test_the_model_sampler_on_a_grid_nothing_was_tuned_on_no_worse_than_today():
    """grid-small (Qwen3-0.6B at 1,024 tokens, effective batch 8, 40 configs on an H100, under a 20 GiB cap), a budget
    of a quarter of them (10). Measured: 83.6% within 5% of the grid's best at 31.4% of its device time, short of
    the 90% at 25% asked; 66.9% before the screening broke its ties by the knob model's estimate (the compiled loss,
    over the cap at 8x1 without CUDA graphs, was screened at a slow 4x2 and the best went unmeasured in a quarter of
    the replays: BENCHMARKS.md). Kept from getting worse."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    grid = replay.Grid.load(SMALL)
    found = replay.summary(grid, "model", replays=1000, trials_budget=10)
    assert found["found"] >= 0.82, found
    assert found["share_mean"] <= 0.32, found


def test_a_replayed_study_decides_its_budget_and_answers_from_the_grid():
    """One replay, read closely: the budget of configs decided, the answer a config of the grid that fits, the
    device time between the probes' and the grid's."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    grid = replay.Grid.load(GRID)
    outcome = replay.replay(grid, "model", seed=7, trials_budget=10)
    assert outcome.decided == 10
    assert outcome.answer is not None and grid.fits(outcome.answer)
    assert outcome.ratio == outcome.answer.step_s / grid.best.step_s >= 1.0
    assert 0 < outcome.seconds < grid.seconds
