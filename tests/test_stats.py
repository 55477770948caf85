"""Statistics, verdicts and caps on known inputs."""

from __future__ import annotations

import random

import pytest

from pipeline.jobs.summary import summarize_job
from pipeline.measure.callback import StepMeter
from pipeline.measure.stats import Rank, max_relative_deviation, median_ci, order_coverage, rank, summarize
from pipeline.records import (
    Interval,
    JobResult,
    JobSummary,
    Memory,
    Placement,
    RecordedJob,
    RunKind,
    Status,
    Step,
    StopRule,
    Verdict,
    verdict,
)
from pipeline.reporting.table import Criteria, comparison_rows, format_table


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
    assert level == pytest.approx(order_coverage(n, 1) if n <= 5 else level)
    error = 4 * (level * (1 - level) / trials) ** 0.5
    assert covered / trials >= level - error, (n, covered / trials, level)
    # and it does not understate it either (an interval far too wide would be useless)
    assert covered / trials <= level + error + 0.01, (n, covered / trials, level)


def test_summary_of_known_values():
    s = summarize([1.0, 2.0, 3.0, 4.0, 100.0])
    assert (s.n, s.median, s.mean) == (5, 3.0, 22.0)
    assert s.p10 == pytest.approx(1.4) and s.p90 == pytest.approx(61.6)
    assert s.cv == pytest.approx(1902.5**0.5 / 22.0, rel=1e-9)  # sample stdev / mean


def _ci(low, high, level=0.96):
    return Interval(low, high, level)


def test_rank_names_a_winner_only_from_separated_intervals_at_the_confidence():
    assert rank({"4x1": (1.0, _ci(0.9, 1.1)), "1x4": (2.0, _ci(1.9, 2.1))}, 0.95) == {
        "4x1": Rank.WINNER,
        "1x4": Rank.SLOWER,
    }
    assert rank({"4x1": (1.0, _ci(0.9, 1.5)), "2x2": (1.2, _ci(1.1, 1.3)), "1x4": (2.0, _ci(1.9, 2.1))}, 0.95) == {
        "4x1": Rank.TIE,
        "2x2": Rank.TIE,
        "1x4": Rank.SLOWER,
    }
    # apart, but one interval covers only 75% (three repeats): no winner at 95%
    assert rank({"4x1": (1.0, _ci(0.9, 1.1, 0.75)), "1x4": (2.0, _ci(1.9, 2.1))}, 0.95) == {
        "4x1": Rank.UNSURE,
        "1x4": Rank.UNSURE,
    }


def test_loss_deviation():
    assert max_relative_deviation([1.0, 2.02], [1.0, 2.0]) == pytest.approx(0.01)
    assert max_relative_deviation([], [1.0]) is None


@pytest.mark.parametrize(
    ("status", "peak", "cap", "expected"),
    [
        (Status.OK, 10, 20, Verdict.FITS),
        (Status.OK, 20, 20, Verdict.FITS),
        (Status.OK, 21, 20, Verdict.OVER_CAP),
        (Status.OOM, None, 20, Verdict.OOM),
        (Status.OK, 5, None, Verdict.NO_CAP),
        (Status.FAILED, 5, 20, Verdict.FAILED),
    ],
)
def test_cap_verdicts(status, peak, cap, expected):
    assert verdict(status, peak, cap) is expected


def _result(times, loss_offset=0.0, peak=2**30, cap=None, tokens=100):
    steps = tuple(
        Step(
            step=i + 1,
            step_time_s=t,
            forward_s=t / 4,
            backward_s=t / 2,
            optimizer_s=t / 8,
            data_s=t / 16,
            other_s=t / 16,
            micro_batches=1,
            tokens=tokens,
            padded_tokens=128,
            samples=4,
            peak_bytes=peak,
            loss=5.0 - 0.1 * i + loss_offset,
        )
        for i, t in enumerate(times)
    )
    placement = Placement("cuda", "gpu", 80.0, None, "bf16", 100.0, True)
    return JobResult(
        status=Status.OK,
        steps=steps,
        memory=Memory(peak_bytes=peak, cap_bytes=cap),
        placement=placement,
        model_flops_per_token=1e9,
    )


def test_job_summary_skips_warmup_and_takes_rates_from_the_median():
    # one stalled steady step pulls the mean up; the rates follow the median, as the step column does
    record = _result([9.0, 9.0, 1.0, 1.0, 1.0, 1.0, 30.0], peak=3 * 2**30, cap=2 * 2**30)
    s = summarize_job(record, warmup_steps=2, confidence=0.95)
    assert s.step_time.n == 5 and s.median == 1.0
    m = s.metrics()
    assert m["tokens_per_s"] == 100.0 and m["padded_tokens_per_s"] == 128.0 and m["samples_per_s"] == 4.0
    assert m["mfu"] == pytest.approx(100.0 * 1e9 / 100e12)
    assert s.verdict is Verdict.OVER_CAP and s.peak_gib == 3.0
    # what MLflow holds reads back as the same summary
    assert JobSummary.from_metrics(s.status, s.verdict, m).metrics() == m


def _recorded(name, config_id, times, repeat=0, offset=0.0):
    result = _result(times, offset)
    return RecordedJob(
        run_id=f"{name}#{repeat}",
        name=name,
        config_id=config_id,
        repeat=repeat,
        kind=RunKind.JOB,
        summary=summarize_job(result, 0, 0.95),
        losses=tuple(s.loss for s in result.steps),
    )


def test_comparison_pools_repeats_by_identity_and_reports_loss_deviation():
    rng = random.Random(0)
    jobs = []
    for repeat in range(6):
        jobs.append(_recorded("m 1x4", "a", [0.30 + rng.uniform(0, 0.01) for _ in range(20)], repeat))
        jobs.append(_recorded("m 4x1", "b", [0.10 + rng.uniform(0, 0.01) for _ in range(20)], repeat, 0.05))
    rows = {r.name: r for r in comparison_rows(jobs, Criteria())}
    assert len(rows["m 4x1"].jobs) == 6 and rows["m 4x1"].pooled
    assert rows["m 4x1"].ci.level >= 0.95  # six repeats reach 95% (96.9%)
    assert rows["m 4x1"].rank is Rank.WINNER and rows["m 1x4"].rank is Rank.SLOWER
    assert rows["m 1x4"].loss_dev == 0.0
    assert rows["m 4x1"].loss_dev == pytest.approx(0.05 / (5.0 - 0.1 * 19))


def test_three_repeats_say_what_their_interval_covers_and_name_no_winner():
    jobs = [_recorded("m 1x4", "a", [0.3] * 10, r) for r in range(3)]
    jobs += [_recorded("m 4x1", "b", [0.1] * 10, r) for r in range(3)]
    rows = comparison_rows(jobs, Criteria())
    assert {r.rank for r in rows} == {Rank.UNSURE}
    table = format_table(rows, Criteria())
    assert "(75%)" in table and "too few repeats for 95%" in table and "| winner" not in table


def test_configs_that_share_a_name_but_not_an_identity_stay_apart():
    jobs = [_recorded("m 4x1", "a", [0.1] * 10), _recorded("m 4x1", "b", [0.2] * 10)]
    assert len(comparison_rows(jobs, Criteria())) == 2


def test_predictor_calibrates_to_two_probes_and_keeps_the_formula_shape():
    from pipeline.records import GIB
    from pipeline.search.predictor import Knobs, Predictor, Shape

    shape = Shape(
        hidden=2048, intermediate=6144, layers=28, heads=16, kv_heads=8, head_dim=128, vocab=151936, tied=True
    )
    predictor = Predictor(shape, 16, ["all-linear"])
    small, large = Knobs(1, 512, "bf16", False), Knobs(4, 512, "bf16", False)
    predictor.calibrate([(small, 5.756 * GIB), (large, 10.676 * GIB)])
    assert predictor.predict(small) / GIB == pytest.approx(5.756)
    assert predictor.predict(large) / GIB == pytest.approx(10.676)
    # checkpointing keeps far less per token: the H200 measured 4.771 GiB for 4x1 with checkpointing
    assert predictor.predict(Knobs(4, 512, "bf16", True)) / GIB == pytest.approx(4.771, rel=0.05)
    # one probe: the offset alone, scale 1
    single = Predictor(shape, 16, ["all-linear"])
    single.calibrate([(small, 5.756 * GIB)])
    assert single.scale == 1.0 and single.predict(small) / GIB == pytest.approx(5.756)


def test_predictor_follows_measurements_of_the_same_knobs():
    """H200 peaks (GiB) of the effective-batch-16 grid: calibrated on two checkpointed probes, the formula alone
    over-predicts the configs without checkpointing by 7-14%; measured neighbours with the same knobs fix that."""
    from pipeline.records import GIB
    from pipeline.search.predictor import Knobs, Predictor, Shape

    shape = Shape(
        hidden=2048, intermediate=6144, layers=28, heads=16, kv_heads=8, head_dim=128, vocab=151936, tied=True
    )
    predictor = Predictor(shape, 16, ["all-linear"])
    ckpt = [(Knobs(1, 512, "fp16", True), 4.326 * GIB), (Knobs(16, 512, "fp16", True), 6.541 * GIB)]
    predictor.calibrate(ckpt)
    predictor.measured = list(ckpt)
    no_ckpt = {1: 5.754, 2: 7.379, 4: 10.676}
    formula = predictor.predict(Knobs(4, 512, "bf16", False)) / GIB
    assert formula / no_ckpt[4] - 1 > 0.10  # the formula alone is off by more than 10% here
    # checkpointed configs lie on the line through the two probes (the H200 measured 4.771 at 4x4)
    assert predictor.predict(Knobs(4, 512, "bf16", True)) / GIB == pytest.approx(4.771, rel=0.01)
    # one measurement without checkpointing: the calibrated slope through it
    predictor.measured.append((Knobs(1, 512, "fp16", False), no_ckpt[1] * GIB))
    assert predictor.predict(Knobs(2, 512, "bf16", False)) / GIB == pytest.approx(no_ckpt[2], rel=0.10)
    # two: the line through them (bf16 and fp16 have the same bytes per element)
    predictor.measured.append((Knobs(2, 512, "bf16", False), no_ckpt[2] * GIB))
    assert predictor.predict(Knobs(4, 512, "fp16", False)) / GIB == pytest.approx(no_ckpt[4], rel=0.02)
    # fp32 shares no measurement: the formula
    assert predictor.predict(Knobs(4, 512, "fp32", False)) == predictor.formula(Knobs(4, 512, "fp32", False))


def test_splits_are_the_divisors():
    from pipeline.search.space import splits

    assert splits(16, 1) == ["1x16", "2x8", "4x4", "8x2", "16x1"]
    assert splits(8, 2) == ["1x4", "2x2", "4x1"]
    assert splits(4, 3) == []


def _meter_with_steps(times: list[float], stop: StopRule) -> list[Status | None]:
    meter = StepMeter(cuda=False, stop=stop)
    reasons = []
    for step, seconds in enumerate(times, start=1):
        reasons.append(meter._should_stop(seconds, 1, step))
        meter.steps.append(_result([seconds]).steps[0])
        meter.steps[-1] = Step(**{**meter.steps[-1].__dict__, "step": step})
    return reasons


def test_a_slow_trial_is_pruned_on_the_median_after_the_first_step():
    stop = StopRule(prune_after=3, prune_threshold_s=1.3)
    # the first step (one-off costs) is ignored; steps 2-4 have median 1.4 > 1.3: pruned at step 4, not before
    assert _meter_with_steps([9.0, 1.4, 1.0, 1.5, 1.0], stop) == [None, None, None, Status.PRUNED, None]
    # one slow step among fast ones does not prune (median 1.2)
    assert _meter_with_steps([9.0, 2.0, 1.2, 1.1, 1.0], stop) == [None] * 5


def test_an_over_cap_step_stops_at_once():
    assert _meter_with_steps([1.0, 1.0], StopRule(cap_bytes=0)) == [None, None]  # no cap set: 0 means none
    assert _meter_with_steps([1.0, 1.0], StopRule(cap_bytes=1)) == [None, None]  # at the cap fits
    meter = StepMeter(cuda=False, stop=StopRule(cap_bytes=1))
    assert meter._should_stop(1.0, 2, 1) is Status.OVER_CAP


def test_predictor_takes_a_lone_points_slope_from_the_nearest_measured_setting():
    """H200 peaks (GiB) of the knob study: compiled, bf16 adapters, no checkpointing measured once, at 1x4 (5.16);
    its 4x1 (8.70) is predicted with the slope of the nearest setting measured twice (compiled, fp32 adapters:
    5.38 at 1x4, 6.51 at 2x2), not with the formula's slope, which was calibrated with checkpointing (11.2 GiB)."""
    from pipeline.measure.flops import Shape
    from pipeline.records import GIB
    from pipeline.search.predictor import Knobs, Predictor

    shape = Shape(
        hidden=2048, intermediate=6144, layers=28, heads=16, kv_heads=8, head_dim=128, vocab=151936, tied=True
    )
    predictor = Predictor(shape, 16, ["all-linear"])
    ckpt = [(Knobs(1, 512, "fp16", True), 4.326 * GIB), (Knobs(4, 512, "fp16", True), 4.771 * GIB)]
    predictor.calibrate(ckpt)

    def knobs(micro: int, adapters: str, compile_: str) -> Knobs:
        return Knobs(micro, 512, "bf16", False, (("train.adapter_dtype", adapters), ("train.torch_compile", compile_)))

    predictor.measured = [
        *ckpt,
        (knobs(1, "fp32", "True"), 5.38 * GIB),
        (knobs(2, "fp32", "True"), 6.51 * GIB),
        (knobs(1, "compute", "True"), 5.16 * GIB),
    ]
    assert predictor.predict(knobs(4, "compute", "True")) / GIB == pytest.approx(8.70, rel=0.03)
    # a setting never measured takes the nearest measured line whole (here the compiled fp32 one's)
    assert predictor.predict(knobs(2, "fp32", "False")) / GIB == pytest.approx(6.51, rel=1e-9)
