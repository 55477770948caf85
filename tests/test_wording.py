"""The words every comparison is said in, over many simulated rounds: `equal` only where the interval is certified
within the tie tolerance (`optimize.tie_tolerance`, 5%), anything wider `not told apart (within ...)`, and no
speed-up given as a figure while its interval holds 1 (one line says why not instead). Checked on every text that
says it: the rank column, the runs table's short rank and its parent row, the headline, a sweep's claim, a study's
confirmation lines and claim (against a baseline that fits, and one over the cap), and the answer on one device."""

from __future__ import annotations

import math
import random
import re

import pytest
from optuna.trial import TrialState

from pipeline.answer import speedup
from pipeline.answer.scaling import world_lines
from pipeline.compare.paired import compare_speedups
from pipeline.render.headline import fastest_line, sweep_gain
from pipeline.render.rows import Criteria, comparison_rows
from pipeline.render.runs_table import in_short, parent_tags
from pipeline.render.table import format_table, rank_text
from pipeline.search._confirmation import ConfirmationRecord
from pipeline.search._confirmation.plan import ConfirmationRound
from pipeline.search._trials import TrialRecord
from tests.helpers.records import recorded

EQUAL = re.compile(r"\bequal (?:within )?±(\d+)%")  # `equal ±3%`, `equal within ±3%`
EQUAL_WITH = re.compile(r"equal with ([^;()]+)")  # the reference's `equal with tiny 4x1`
FIGURE = re.compile(r"(\d+\.\d+)x the (?:baseline's )?tokens/s (?:of [^[]+)?\[(\d+\.\d+), (\d+\.\d+)\]")


def _speedups(rng: random.Random) -> list[float]:
    """Per-round speed-ups of every width: ties, near ties, clear wins, wild rounds."""
    truth = rng.choice([1.0, 1.02, 1.08, 1.3, 2.0])
    spread = rng.choice([0.005, 0.02, 0.08, 0.3, 0.8])
    return [truth * math.exp(rng.gauss(0, spread)) for _ in range(rng.choice([2, 3, 4, 6, 10]))]


def _check(text: str, tolerance: float, margins: dict[str, float] | None = None) -> None:
    """No `equal` wider than the tolerance (a margin is rounded up to a whole percent), no figure holding 1."""
    for found in EQUAL.findall(text):
        assert int(found) <= math.ceil(100 * tolerance), text
    for low, high in ((float(lo), float(hi)) for _, lo, hi in FIGURE.findall(text)):
        assert low > 1 or high < 1, text  # rounded to two decimals: 1.00 never passes as excluding 1
    for names in EQUAL_WITH.findall(text):
        for name in names.split(","):
            if margins is not None and name.strip() in margins:
                assert margins[name.strip()] <= tolerance + 1e-12, text


@pytest.mark.parametrize("tolerance", [0.05, 0.2])
def test_a_sweeps_words_say_equal_only_within_the_tolerance_and_no_figure_holds_1(tolerance):
    rng = random.Random(int(100 * tolerance))
    criteria, said_equal, said_apart = Criteria(tie_tolerance=tolerance), 0, 0
    for _ in range(300):
        a, b = _speedups(rng), None
        jobs = [recorded("m a", "a", [1.0] * 5, r) for r in range(len(a))]
        jobs += [recorded("m b", "b", [1.0 / s] * 5, r) for r, s in enumerate(a)]
        if rng.random() < 0.5:  # a third config, sometimes
            b = _speedups(rng)[: len(a)]
            jobs += [recorded("m c", "c", [1.0 / s] * 5, r) for r, s in enumerate(b)]
        rows = comparison_rows(jobs, criteria)
        margins = {r.name: r.comparison.margin for r in rows if r.comparison and r.comparison.margin is not None}
        reference = next((r for r in rows if r.role), None)
        texts = [rank_text(r) for r in rows] + [format_table(rows, criteria), fastest_line(rows, None)]
        if reference is not None:
            texts += [in_short(reference), *parent_tags(rows)[0].values()]
            first = next(r for r in rows if r.config_id == "a")
            texts.append(sweep_gain(reference, first, rows).line(reference.name))
        for text in texts:
            _check(text, tolerance, margins)
        said_equal += any("equal ±" in rank_text(r) for r in rows)
        said_apart += any("not told apart (within" in rank_text(r) for r in rows)
    assert said_equal > 10 and said_apart > 10  # both words were put to the test


def _trial(label: str, number: int, feasible: bool = True, peak: float = 0.4) -> TrialRecord:
    return TrialRecord(
        number, TrialState.COMPLETE, label, label, median=1.0, peak_gib=peak, feasible=feasible, status=None
    )


@pytest.mark.parametrize("over_cap", [False, True])
def test_a_studys_claim_and_round_say_equal_only_within_the_tolerance_and_no_figure_holds_1(over_cap):
    rng = random.Random(7 + over_cap)
    best, other = _trial("tiny 4x2", 1), _trial("tiny 2x4", 2)
    baseline = _trial("tiny 1x8", 0, feasible=not over_cap, peak=0.7 if over_cap else 0.4)
    claimed = told = 0
    for _ in range(300):
        tolerance = rng.choice([0.05, 0.1])
        over_base, over_other = _speedups(rng), _speedups(rng)
        rounds = min(len(over_base), len(over_other))
        state = ConfirmationRound([best.label, baseline.label, other.label], 0.95, tolerance)
        state.times = {
            best.label: dict.fromkeys(range(rounds), 1.0),
            baseline.label: {r: over_base[r] for r in range(rounds)},
            other.label: {r: over_other[r] for r in range(rounds)},
        }
        record = ConfirmationRecord(state, 1, 3, 100.0, baseline.label)
        found = speedup.claim(
            best, baseline, [baseline], record, enabled=True, confirm_off=False, fits={best.label, other.label},
            cap_gib=0.56,
        )  # fmt: skip
        texts = [*found.lines(), *(c.sentence() for c in state.comparisons())]
        one = _trial("tiny 8x1 ws2", 3)
        lines, _ = world_lines(
            TrialRecord(4, TrialState.COMPLETE, best.label, best.label, median=1.0, world_size=2),
            [one], record, "cuda", [one],
        )  # fmt: skip
        texts += lines
        for text in texts:
            _check(text, tolerance)
        assert ("does not fit under the cap (0.70 GiB of 0.56 GiB)" in found.line()) is over_cap
        assert (found.fitting is not None) is over_cap
        claimed += found.speedup is not None
        told += found.speedup is None and found.why.startswith(f"{rounds} paired rounds")
    assert claimed > 20 and told > 20


def test_one_round_of_words_each_way():
    """The words themselves: a tie certified within 5% is equal, a wider one is not told apart, a win is a figure."""
    close = compare_speedups("b", "a", [1.01, 0.99, 1.0, 1.005, 0.995, 1.002], 0.95)
    assert close.equal and close.tie_text().startswith("equal ±") and "equal within ±" in close.sentence()
    wide = compare_speedups("b", "a", [1.3, 0.8, 1.1], 0.95)
    assert not wide.equal and not wide.claimed
    assert wide.tie_text() == f"not told apart (within ±{math.ceil(100 * wide.margin)}%)"
    assert "not told apart (within ±" in wide.sentence() and "either way" in wide.sentence()
    win = compare_speedups("b", "a", [1.5, 1.6, 1.55], 0.95)
    assert win.claimed and not win.equal
