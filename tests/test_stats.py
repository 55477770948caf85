"""Statistics, verdicts and caps on known inputs."""

from __future__ import annotations

import pytest

from pipeline.jobs.summary import summarize_job
from pipeline.measure.callback import StepMeter
from pipeline.measure.memory import verdict
from pipeline.measure.stats import max_relative_deviation, median_ci, rank, summarize
from pipeline.reporting.table import comparison_rows


def test_median_ci_matches_the_binomial_table():
    # n=25 at 95%: the classic order statistics are the 8th and 18th values
    assert median_ci([float(i) for i in range(1, 26)]) == (8.0, 18.0)
    # n=10 at 95%: 2nd and 9th
    assert median_ci([float(i) for i in range(1, 11)]) == (2.0, 9.0)
    # too few values to reach 95%: the whole range
    assert median_ci([1.0, 2.0, 3.0]) == (1.0, 3.0)


def test_summary_of_known_values():
    s = summarize([1.0, 2.0, 3.0, 4.0, 100.0])
    assert (s.n, s.median, s.mean) == (5, 3.0, 22.0)
    assert s.p10 == pytest.approx(1.4) and s.p90 == pytest.approx(61.6)
    assert s.cv == pytest.approx(1902.5**0.5 / 22.0, rel=1e-9)  # sample stdev / mean


def test_rank_says_winner_only_without_overlap():
    assert rank({"4x1": (1.0, 0.9, 1.1), "1x4": (2.0, 1.9, 2.1)}) == {"4x1": "winner", "1x4": "slower"}
    assert rank({"4x1": (1.0, 0.9, 1.5), "2x2": (1.2, 1.1, 1.3), "1x4": (2.0, 1.9, 2.1)}) == {
        "4x1": "tie",
        "2x2": "tie",
        "1x4": "slower",
    }


def test_loss_deviation():
    assert max_relative_deviation([1.0, 2.02], [1.0, 2.0]) == pytest.approx(0.01)
    assert max_relative_deviation([], [1.0]) is None


@pytest.mark.parametrize(
    ("status", "peak", "cap", "expected"),
    [
        ("ok", 10, 20, "fits"),
        ("ok", 20, 20, "fits"),
        ("ok", 21, 20, "over-cap"),
        ("oom", None, 20, "oom"),
        ("ok", 5, None, "no-cap"),
        ("failed", 5, 20, "failed"),
    ],
)
def test_cap_verdicts(status, peak, cap, expected):
    assert verdict(status, peak, cap) == expected


def _record(times, loss_offset=0.0, peak=2**30, cap=None):
    steps = [
        {
            "step": i + 1,
            "step_time_s": t,
            "forward_s": t / 4,
            "backward_s": t / 2,
            "optimizer_s": t / 8,
            "data_s": t / 16,
            "other_s": t / 16,
            "tokens": 100,
            "padded_tokens": 128,
            "samples": 4,
            "loss": 5.0 - 0.1 * i + loss_offset,
        }
        for i, t in enumerate(times)
    ]
    return {
        "status": "ok",
        "steps": steps,
        "memory": {"peak_bytes": peak, "cap_bytes": cap},
        "placement": {"peak_tflops": 100.0},
        "model_flops_per_token": 1e9,
    }


def test_job_summary_skips_warmup_and_computes_throughput():
    record = _record([9.0, 9.0, 1.0, 1.0, 1.0, 1.0], peak=3 * 2**30, cap=2 * 2**30)
    s = summarize_job(record, warmup_steps=2, confidence=0.95)
    assert s["steady_steps"] == 4 and s["step_time_median_s"] == 1.0
    assert s["tokens_per_s"] == 100.0 and s["padded_tokens_per_s"] == 128.0 and s["samples_per_s"] == 4.0
    assert s["mfu"] == pytest.approx(100.0 * 1e9 / 100e12)
    assert s["verdict"] == "over-cap" and s["peak_gib"] == 3.0


def test_comparison_pools_repeats_and_reports_loss_deviation():
    def result(name, times, offset=0.0):
        record = _record(times, offset)
        return {
            "name": name,
            "status": "ok",
            "run_id": name,
            "summary": summarize_job(record, 0, 0.95),
            "losses": [s["loss"] for s in record["steps"]],
        }

    fast = [0.10] * 20
    slow = [0.30] * 20
    rows = comparison_rows(
        [
            result("m 1x4 #0", slow),
            result("m 4x1 #0", fast, 0.05),
            result("m 1x4 #1", slow),
            result("m 4x1 #1", fast, 0.05),
        ]
    )
    by = {r["config"]: r for r in rows}
    assert by["m 4x1"]["jobs"] == 2 and by["m 4x1"]["rank"] == "winner" and by["m 1x4"]["rank"] == "slower"
    assert by["m 1x4"]["loss_dev"] == 0.0
    assert by["m 4x1"]["loss_dev"] == pytest.approx(0.05 / (5.0 - 0.1 * 19))


def test_predictor_calibrates_to_two_probes_and_keeps_the_formula_shape():
    from pipeline.search.predictor import GIB, Knobs, Predictor, Shape

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
    from pipeline.search.predictor import GIB, Knobs, Predictor, Shape

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


def _meter_with_steps(times: list[float], stop: dict) -> tuple[StepMeter, list[str | None]]:
    meter = StepMeter(cuda=False, stop=stop)
    reasons = []
    for step, seconds in enumerate(times, start=1):
        record = {"step": step, "step_time_s": seconds, "peak_rss_bytes": 1}
        reasons.append(meter._should_stop(record, step))
        meter.steps.append(record)
    return meter, reasons


def test_a_slow_trial_is_pruned_on_the_median_after_the_first_step():
    stop = {"prune_after": 3, "prune_threshold_s": 1.3}
    # the first step (one-off costs) is ignored; steps 2-4 have median 1.4 > 1.3: pruned at step 4, not before
    _, reasons = _meter_with_steps([9.0, 1.4, 1.0, 1.5, 1.0], stop)
    assert reasons == [None, None, None, "pruned", None]
    # one slow step among fast ones does not prune (median 1.2)
    _, reasons = _meter_with_steps([9.0, 2.0, 1.2, 1.1, 1.0], stop)
    assert reasons == [None] * 5


def test_an_over_cap_step_stops_at_once():
    _, reasons = _meter_with_steps([1.0, 1.0], {"cap_bytes": 0.5})
    assert reasons == ["over-cap", "over-cap"]
