"""Statistics of one job's steps, memory fits against the cap, the job summary, and the meter's stop rules, on known inputs."""

from __future__ import annotations

import random

import pytest

from pipeline.measure.callback import StepMeter
from pipeline.measure.stats import max_relative_deviation, median_ci, order_coverage, summarize
from pipeline.measure.summary import summarize_job
from pipeline.records import Fit, Status, Step, StopRule, fit_of
from pipeline.summaries import Interval, JobSummary
from tests.helpers.records import result


def test_median_ci_matches_the_binomial_table():
    # n=25 at 95%: the classic order statistics are the 8th and 18th values, coverage 95.7%
    ci = median_ci([float(i) for i in range(1, 26)])
    assert (ci.low, ci.high) == (8.0, 18.0) and ci.level == pytest.approx(0.9567, abs=1e-4)
    # n=10 at 95%: 2nd and 9th, coverage 97.9%
    ci = median_ci([float(i) for i in range(1, 11)])
    assert (ci.low, ci.high) == (2.0, 9.0) and ci.level == pytest.approx(0.9785, abs=1e-4)
    # too few values to reach 95%: the whole range, with the coverage it really has
    assert median_ci([1.0, 2.0, 3.0]) == Interval(1.0, 3.0, 0.75)
    assert median_ci([1.0, 2.0]) == Interval(1.0, 2.0, 0.5)


@pytest.mark.parametrize("n", [2, 3, 5, 15, 95])
def test_the_stated_coverage_holds_on_a_skewed_distribution(n):
    """Draws from a lognormal (skewed like step times, true median 1.0): the interval covers the true median at
    least as often as its stated level says, within simulation error (4 standard errors)."""
    rng = random.Random(n)
    trials, covered, levels = 4000, 0, []
    for _ in range(trials):
        ci = median_ci(sorted(rng.lognormvariate(0.0, 0.6) for _ in range(n)), 0.95)
        covered += ci.low <= 1.0 <= ci.high
        levels.append(ci.level)
    level = levels[0]
    assert all(x == level for x in levels)  # the level depends on n only
    # the narrowest order-statistic interval that reaches 95%, or the whole range where none does
    wider, narrower = order_coverage(n, 1), [order_coverage(n, r) for r in range(2, (n + 1) // 2 + 1)]
    reaching = [c for c in narrower if c >= 0.95]
    assert level == pytest.approx(min(reaching) if reaching else wider)
    error = 4 * (level * (1 - level) / trials) ** 0.5
    assert covered / trials >= level - error, (n, covered / trials, level)
    # and it does not understate it either (an interval far too wide would be useless)
    assert covered / trials <= level + error + 0.01, (n, covered / trials, level)


def test_summary_of_known_values():
    s = summarize([1.0, 2.0, 3.0, 4.0, 100.0])
    assert (s.n, s.median, s.mean) == (5, 3.0, 22.0)
    assert s.p10 == pytest.approx(1.4) and s.p90 == pytest.approx(61.6)
    assert s.cv == pytest.approx(1902.5**0.5 / 22.0, rel=1e-9)  # sample stdev / mean


def test_loss_deviation():
    assert max_relative_deviation([1.0, 2.02], [1.0, 2.0]) == pytest.approx(0.01)
    assert max_relative_deviation([], [1.0]) is None


@pytest.mark.parametrize(
    ("status", "peak", "cap", "expected"),
    [
        (Status.OK, 10, 20, Fit.FITS),
        (Status.OK, 20, 20, Fit.FITS),
        (Status.OK, 21, 20, Fit.OVER_CAP),
        (Status.OOM, None, 20, Fit.OOM),
        (Status.OK, 5, None, Fit.NO_CAP),
        (Status.FAILED, 5, 20, Fit.FAILED),
    ],
)
def test_memory_fits_against_the_cap(status, peak, cap, expected):
    assert fit_of(status, peak, cap) is expected


def test_job_summary_skips_warmup_and_takes_rates_from_the_median():
    # one stalled steady step pulls the mean up; the rates follow the median, as the step column does
    record = result([9.0, 9.0, 1.0, 1.0, 1.0, 1.0, 30.0], peak=3 * 2**30, cap=2 * 2**30)
    s = summarize_job(record, warmup_steps=2, confidence=0.95)
    assert s.step_time.n == 5 and s.median == 1.0
    m = s.metrics()
    assert m["tokens_per_s"] == 100.0 and m["padded_tokens_per_s"] == 128.0 and m["samples_per_s"] == 4.0
    assert m["mfu"] == pytest.approx(100.0 * 1e9 / 100e12)
    assert s.fit is Fit.OVER_CAP and s.peak_gib == 3.0
    # what MLflow holds reads back as the same summary
    assert JobSummary.from_metrics(s.status, s.fit, m).metrics() == m


def _meter_with_steps(times: list[float], stop: StopRule) -> list[Status | None]:
    meter = StepMeter(cuda=False, stop=stop)
    reasons = []
    for step, seconds in enumerate(times, start=1):
        reasons.append(meter._should_stop(seconds, 1, step))
        meter.steps.append(result([seconds]).steps[0])
        meter.steps[-1] = Step(**{**meter.steps[-1].__dict__, "step": step})
    return reasons


def test_a_slow_trial_is_pruned_on_the_median_after_the_first_step():
    stop = StopRule(prune_after=3, prune_threshold_s=1.3)
    # the first step (one-off costs) is ignored; steps 2-4 have median 1.4 > 1.3: pruned at step 4, not before
    assert _meter_with_steps([9.0, 1.4, 1.0, 1.5, 1.0], stop) == [None, None, None, Status.PRUNED, None]
    # one slow step among fast ones does not prune (median 1.2)
    assert _meter_with_steps([9.0, 2.0, 1.2, 1.1, 1.0], stop) == [None] * 5


def test_a_compiling_trial_is_judged_only_after_its_warm_up():
    """Steps 2-4 of a job whose CUDA graphs are being recorded are slow for a one-off reason: a window that starts
    after the warm-up (`prune_from`) does not prune on them, and still prunes a config slow after it."""
    slow_start = [9.0, 3.0, 3.0, 3.0, 1.0, 1.0, 1.0, 1.0]
    assert _meter_with_steps(slow_start, StopRule(prune_after=3, prune_threshold_s=1.3))[3] is Status.PRUNED
    after_warm_up = StopRule(prune_after=3, prune_threshold_s=1.3, prune_from=4)
    assert _meter_with_steps(slow_start, after_warm_up) == [None] * 8
    assert _meter_with_steps([9.0, 3.0, 3.0, 3.0, 1.4, 1.5, 1.4, 1.0], after_warm_up)[6] is Status.PRUNED


def test_an_over_cap_step_stops_at_once():
    assert _meter_with_steps([1.0, 1.0], StopRule(cap_bytes=0)) == [None, None]  # no cap set: 0 means none
    assert _meter_with_steps([1.0, 1.0], StopRule(cap_bytes=1)) == [None, None]  # at the cap fits
    meter = StepMeter(cuda=False, stop=StopRule(cap_bytes=1))
    assert meter._should_stop(1.0, 2, 1) is Status.OVER_CAP


def test_tokens_are_the_records_own_whatever_the_layout():
    """Padded rows count their attention mask; a padding-free row (position ids, no mask) counts up to its last
    record, not the positions 0 a collator pads its end with to reach a multiple."""
    import torch

    from pipeline.measure.clock import real_tokens, samples_from_positions

    ids = torch.ones(2, 6, dtype=torch.long)
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]])
    assert int(real_tokens({"attention_mask": mask}, ids)) == 10
    row = torch.tensor([[0, 1, 2, 0, 1, 2, 3, 0, 1, 0, 0, 0]])  # records of 3, 4 and 2 tokens, then 3 pads
    flat = torch.ones(1, 12, dtype=torch.long)
    assert int(real_tokens({"position_ids": row}, flat)) == 9
    assert int(samples_from_positions({"position_ids": row}, flat)) == 3
    unpadded = torch.tensor([[0, 1, 2, 0, 1]])
    assert int(real_tokens({"position_ids": unpadded}, flat[:, :5])) == 5
    assert int(samples_from_positions({"position_ids": unpadded}, flat[:, :5])) == 2
    assert real_tokens({}, ids) == 12
