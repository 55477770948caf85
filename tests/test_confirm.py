"""The confirmation round's paired comparison, on simulated machines whose speed drifts between rounds."""

from __future__ import annotations

import math
import random
import re

import pytest

from pipeline.search.confirm import Decision, Round, compare


def machine(rng: random.Random, true_times: dict[str, float], drift: float, noise: float):
    """A `measure` for Round.run: each round the whole machine is up to `drift` slower or faster (shared by every
    job of the round), and each job adds its own `noise` (lognormal)."""
    speed = {}

    def measure(name: str, number: int) -> tuple[float, float]:
        factor = speed.setdefault(number, math.exp(rng.uniform(-drift, drift)))
        return true_times[name] * factor * math.exp(rng.gauss(0.0, noise)), 10.0

    return measure


def test_a_real_gain_is_found_through_drift_that_dwarfs_it():
    """B is 8% faster than A; the machine drifts by up to +-30% between rounds. Unpaired, the rounds' medians of A
    and B overlap; paired per round, B is decided faster within the rounds allowed."""
    state = Round(["A", "B"], confidence=0.95, tolerance=0.03)
    state.run(machine(random.Random(1), {"A": 1.0, "B": 1 / 1.08}, drift=0.3, noise=0.01), rounds=12, budget_s=1e9)
    (comparison,) = state.comparisons()
    assert comparison.decision is Decision.FASTER and state.winner() == "B"
    assert abs(comparison.speedup / 1.08 - 1) < 0.03 and comparison.low > 1.03
    assert min(state.medians["A"]) < max(state.medians["B"])  # the raw medians alone could not tell
    assert re.fullmatch(r"B is 1\.\d\dx \[1\.\d\d, 1\.\d\d\] faster than A", comparison.sentence(0.03))


def test_equal_configs_are_called_a_tie_and_the_round_stops_when_decided():
    state = Round(["A", "B", "C"], confidence=0.95, tolerance=0.03)
    times = {"A": 1.0, "B": 1.0, "C": 1.5}
    state.run(machine(random.Random(2), times, drift=0.2, noise=0.005), rounds=20, budget_s=1e9)
    decisions = {c.challenger: c.decision for c in state.comparisons()}
    assert decisions == {"B": Decision.EQUAL, "C": Decision.SLOWER}
    assert state.winner() == "A"
    assert len(state.medians["A"]) < 20  # stopped once both comparisons were decided
    assert "tie within ±3%" in state.comparisons()[0].sentence(0.03)


def test_the_order_rotates_and_the_budget_stops_the_round():
    state = Round(["A", "B", "C"], confidence=0.95, tolerance=0.03)
    assert [state.order(n) for n in range(3)] == [["A", "B", "C"], ["B", "C", "A"], ["C", "A", "B"]]
    state.run(machine(random.Random(3), {"A": 1.0, "B": 1.01, "C": 0.99}, drift=0.3, noise=0.2), 50, budget_s=95)
    assert state.seconds == 120.0  # stops after the round in which the budget ran out (4 rounds x 3 x 10 s)
    assert all(c.decision is Decision.UNDECIDED for c in state.comparisons())


@pytest.mark.parametrize("rounds", [3, 5, 10])
def test_the_interval_of_the_gain_covers_it_as_often_as_it_says(rounds):
    """Paired log ratios with normal noise: the 95% interval of the speed-up covers the true one 95% of the time."""
    rng = random.Random(rounds)
    covered, trials = 0, 3000
    for _ in range(trials):
        ratios = [math.exp(math.log(1 / 1.1) + rng.gauss(0.0, 0.05)) for _ in range(rounds)]
        c = compare("B", "A", ratios, 0.95, 0.03)
        covered += c.low <= 1.1 <= c.high
    error = 4 * (0.95 * 0.05 / trials) ** 0.5
    assert abs(covered / trials - 0.95) <= error, covered / trials


@pytest.mark.parametrize("order", [["A", "B"], ["B", "A"]])
def test_the_answers_ratio_to_the_baseline_is_the_paired_one_when_both_were_finalists(order):
    """The search measured the answer A and the baseline B once each, on a machine that happened to be 25% slower
    for B; the round pairs them (A is truly 1.08x faster) and the answer's ratio is the round's, whichever of the two
    the round started from, not the one-job-each ratio of 1.35x."""
    from optuna.trial import TrialState

    from pipeline.search.answer import confirmed_speedup, speedup
    from pipeline.search.finals import record
    from pipeline.search.trials import TrialRecord

    state = Round(order, confidence=0.95, tolerance=0.03)
    state.run(machine(random.Random(3), {"A": 1.0, "B": 1.08}, drift=0.3, noise=0.01), rounds=12, budget_s=1e9)
    assert state.winner() == "A"
    best = TrialRecord(0, TrialState.COMPLETE, label="A", median=1.0, step_times=(0.99, 1.0, 1.01) * 4)
    baseline = TrialRecord(1, TrialState.COMPLETE, label="B", median=1.35, step_times=(1.34, 1.35, 1.36) * 4)
    assert speedup(best, baseline, 0.95).low > 1.3  # what one job each would claim

    gain = confirmed_speedup(best, baseline, record(state, order))
    assert gain is not None and gain.low < 1.08 < gain.high and abs(gain.ratio / 1.08 - 1) < 0.03, gain
    assert gain.text(0.95).startswith(f"{gain.ratio:.2f}x the baseline's tokens/s") and "paired over" in gain.text(0.95)
    other = TrialRecord(2, TrialState.COMPLETE, label="C", median=1.2, step_times=(1.2,) * 12)
    assert confirmed_speedup(best, other, record(state, order)) is None
