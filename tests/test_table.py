"""The comparison table: configs pooled by identity, ranked only from paired rounds, with notes per config."""

from __future__ import annotations

import dataclasses
import math
import random
import statistics
from xml.etree import ElementTree

import pytest

from pipeline.compare.paired import Judgement
from pipeline.config.identity import short
from pipeline.records import Fit, RunKind, Status
from pipeline.render.headline import fastest_line, sweep_gain
from pipeline.render.rows import Criteria, comparison_rows, order, unranked
from pipeline.render.table import format_table, paired_text, rank_text, step_text
from pipeline.summaries import Interval
from tests.helpers.records import recorded


def test_repeats_pool_by_identity_rank_from_pairs_and_report_the_loss_deviation():
    rng = random.Random(0)
    jobs = []
    for repeat in range(4):
        jobs.append(recorded("m 1x4", "a", [0.30 + rng.uniform(0, 0.01) for _ in range(20)], repeat))
        jobs.append(recorded("m 4x1", "b", [0.10 + rng.uniform(0, 0.01) for _ in range(20)], repeat, 0.05))
    rows = {r.name: r for r in comparison_rows(jobs, Criteria())}
    assert len(rows["m 4x1"].jobs) == 4 and rows["m 4x1"].runs == 4 and rows["m 4x1"].ci is None
    assert rows["m 4x1"].judgement is Judgement.WINNER and rows["m 1x4"].judgement is Judgement.SLOWER
    assert paired_text(rows["m 4x1"]) == "fastest" and paired_text(rows["m 1x4"]).startswith("2.9")  # 0.305 / 0.105
    assert rows["m 1x4"].loss_dev == 0.0
    assert rows["m 4x1"].loss_dev == pytest.approx(0.05 / (5.0 - 0.1 * 19))


def test_the_h200_sweep_with_four_repeats_names_its_winner():
    """`train.gradient_checkpointing=true,false repeats=4` on the H200: every one of the four interleaved pairs
    favoured ckpt=off by 1.5-2x while the machine drifted (0.4194 vs 0.2376 s/step overall). One run each would name
    no winner; the pairs do."""
    on = [0.42, 0.36, 0.47, 0.41]
    off = [0.24, 0.22, 0.31, 0.21]
    jobs = [recorded("ckpt=on", "on", [t] * 10, r) for r, t in enumerate(on)]
    jobs += [recorded("ckpt=off", "off", [t] * 10, r) for r, t in enumerate(off)]
    rows = {r.name: r for r in comparison_rows(jobs, Criteria())}
    assert rows["ckpt=off"].judgement is Judgement.WINNER and rows["ckpt=on"].judgement is Judgement.SLOWER
    table = format_table(list(rows.values()), Criteria())
    assert "| winner" in table and "time vs fastest (95%, paired)" in table
    # several runs: the geometric mean of their trimmed means (the figure the pairs compare), no one run's interval
    assert f"{statistics.geometric_mean(on):.4f} (4 runs)" in table and "step s (mean of runs)" in table
    ratio = statistics.geometric_mean(on) / statistics.geometric_mean(off)
    assert 1 / rows["ckpt=on"].comparison.speedup == pytest.approx(ratio)  # every round complete: the columns' ratio


def test_a_study_report_judges_from_the_studys_answer_when_the_pairs_cannot_tell():
    """Two configs the pairs cannot separate, b's mean a little lower: a sweep's table starts from b, a study's
    report from the study's answer a (as the study judged), and both say equal."""
    jobs = []
    for repeat, (a, b) in enumerate([(1.0, 0.9), (1.0, 1.2), (1.0, 0.8)]):
        jobs += [recorded("a", "a", [a] * 5, repeat), recorded("b", "b", [b] * 5, repeat)]
    plain = {r.name: r for r in comparison_rows(jobs, Criteria())}
    assert plain["a"].comparison is not None and plain["b"].comparison is None  # b is the reference
    study = {r.name: r for r in comparison_rows(jobs, Criteria(), prefer="a")}
    assert study["a"].comparison is None and study["b"].judgement is Judgement.EQUAL
    # the ratios are against the answer, and say so: b reads below 1 (0.95x), so a is not called the fastest
    assert paired_text(study["a"]) == "answer" and paired_text(study["b"]).startswith("0.9")
    assert "time vs answer (95%, paired)" in format_table(list(study.values()), Criteria())
    assert "time vs fastest (95%, paired)" in format_table(list(plain.values()), Criteria())


def test_a_paired_run_counts_by_the_trimmed_mean_of_its_steps_as_the_study_does():
    """One stalled step in each of b's runs: its medians and trimmed means stay below a's, so b wins; a mean would
    have made b the slower."""
    jobs = []
    for repeat in range(3):
        jobs.append(recorded("a", "a", [1.0 + 0.01 * repeat] * 5, repeat))
        jobs.append(recorded("b", "b", [0.8, 0.8, 0.8, 0.8, 5.0], repeat))
    rows = {r.name: r for r in comparison_rows(jobs, Criteria())}
    assert rows["b"].judgement is Judgement.WINNER and rows["a"].judgement is Judgement.SLOWER
    assert rows["b"].rounds == {0: pytest.approx(0.8), 1: pytest.approx(0.8), 2: pytest.approx(0.8)}


def test_a_config_out_of_memory_in_a_confirmation_run_is_not_ranked_however_fast_its_other_runs():
    """A study's trials a, b and c fit; b's rounds are the fastest, and one of its confirmation runs ran out of memory under
    the cap (the allocator's slack, a process's draw): the table ranks a alone, as the study's answer does
    (`search._confirmation.plan.winner`), and says b ran out of memory."""
    jobs = [recorded(c, c, [t] * 5, 0, kind=RunKind.TRIAL) for c, t in (("a", 1.0), ("b", 0.8), ("c", 2.0))]
    for n in range(3):
        jobs += [confirm(recorded(c, c, [t + 0.01 * n] * 5, n), n) for c, t in (("a", 1.0), ("b", 0.8), ("c", 2.0))]
    fine = {r.name: r for r in comparison_rows(jobs, Criteria(), prefer="a")}
    assert fine["b"].judgement is Judgement.WINNER and fine["b"].fit.feasible
    oom = recorded("b", "b", [0.8, 0.8], 3)
    jobs.append(
        confirm(dataclasses.replace(oom, summary=dataclasses.replace(oom.summary, status=Status.OOM, fit=Fit.OOM)), 3)
    )
    rows = {r.name: r for r in comparison_rows(jobs, Criteria(), prefer="a")}
    assert rows["b"].fit is Fit.OOM and rows["b"].judgement is None and rows["b"].role is None
    assert rows["a"].role == "answer" and rows["c"].judgement is Judgement.SLOWER
    (line,) = [line for line in format_table(list(rows.values()), Criteria()).splitlines() if line.startswith("| b ")]
    assert "| oom " in line


def confirm(job, number):
    return dataclasses.replace(job, kind=RunKind.CONFIRM, round=number, run_id=f"confirm-{job.run_id}")


def test_one_run_per_config_ranks_nothing_and_says_why():
    jobs = [recorded("m 1x4", "a", [0.3] * 10), recorded("m 4x1", "b", [0.1] * 10)]
    rows = comparison_rows(jobs, Criteria())
    assert all(r.judgement is None for r in rows)
    table = format_table(rows, Criteria())
    assert "| winner" not in table and "| slower" not in table
    assert "one run per config: an interval covers the step noise of that one process" in table
    assert [r.name for r in order(rows)] == ["m 4x1", "m 1x4"]


def test_one_config_run_twice_is_said_to_be_one_config_not_one_run_per_config():
    """Seen with `repeats=2` on one config: `one run per config ... rank with repeats=3 or more` beside `step s of
    several runs`, and a headline `(one run per config: not ranked)`. One config has nothing to rank it against."""
    jobs = [recorded("m 4x1", "a", [0.1] * 10, repeat=r) for r in range(2)]
    rows = comparison_rows(jobs, Criteria())
    assert rows[0].runs == 2 and unranked(rows) == "one config"
    table = format_table(rows, Criteria())
    assert "one run per config" not in table and "one config: nothing is ranked" in table
    assert "the figure their pairs compare" not in table
    assert fastest_line(rows, None).endswith("(one config: not ranked)")
    assert sweep_gain(rows[0], rows[0], rows).why == "one config: nothing is ranked"
    single = comparison_rows([recorded("m 1x4", "a", [0.3] * 10), recorded("m 4x1", "b", [0.1] * 10)], Criteria())
    assert unranked(single) == "one run per config"


def test_ties_state_the_margin_they_certify_and_are_equal_only_within_the_tie_tolerance():
    """A tie whose interval leaves ±13% open is `not told apart` under the default tie tolerance (5%) and `equal`
    under one of 20%; a tie certified within ±3% is `equal` under the default."""
    jobs = []
    for repeat, (a, b) in enumerate([(1.0, 1.05), (1.1, 1.0), (0.9, 0.95), (1.0, 1.02)]):
        jobs += [recorded("a", "a", [a] * 5, repeat), recorded("b", "b", [b] * 5, repeat)]
    rows = {r.name: r for r in comparison_rows(jobs, Criteria())}
    other = next(r for r in rows.values() if r.comparison is not None)
    margin = math.ceil(100 * other.comparison.margin)
    assert other.judgement is Judgement.EQUAL and margin == 13
    assert rank_text(other) == "not told apart (within ±13%)"
    reference = next(r for r in rows.values() if r.role)
    assert rank_text(reference) == f"fastest; not told apart from {other.name}"
    loose = {r.name: r for r in comparison_rows(jobs, Criteria(tie_tolerance=0.2))}
    assert rank_text(loose[other.name]) == "equal ±13%"
    assert rank_text(next(r for r in loose.values() if r.role)) == f"fastest; equal with {other.name}"
    close = []
    for repeat, (a, b) in enumerate([(1.0, 1.01), (1.0, 0.99), (1.0, 1.0), (1.0, 1.005), (1.0, 0.995)]):
        close += [recorded("a", "a", [a] * 5, repeat), recorded("b", "b", [b] * 5, repeat)]
    tied = next(r for r in comparison_rows(close, Criteria()) if r.comparison is not None)
    assert tied.comparison.margin < 0.05 and rank_text(tied).startswith("equal ±")


def test_notes_are_per_config_not_per_repeat():
    """`launch-bound (GPU busy 29-41%)` and `drift up to 23% in 3 of 4 runs`, once per config."""
    drifting = [[1.0] * 6 + [1.23] * 6, [1.0] * 6 + [1.15] * 6, [1.0] * 12, [1.0] * 6 + [1.12] * 6]
    jobs = [
        recorded("m", "a", times, r, busy=busy)
        for r, (times, busy) in enumerate(zip(drifting, [0.29, 0.41, 0.35, 0.3], strict=True))
    ]
    (row,) = comparison_rows(jobs, Criteria())
    assert row.notes == ["drift up to 23% in 3 of 4 runs", "launch-bound (GPU busy 29-41%)"]
    (single,) = comparison_rows([recorded("m", "a", [1.0] * 6 + [1.23] * 6, busy=0.9)], Criteria())
    assert single.notes == ["drift 23%"]


def test_configs_that_share_a_name_but_not_an_identity_stay_apart():
    jobs = [recorded("m 4x1", "a", [0.1] * 10), recorded("m 4x1", "b", [0.2] * 10)]
    assert len(comparison_rows(jobs, Criteria())) == 2


def test_the_plot_axis_states_the_coverage_and_source_the_table_states():
    """One run per config: the bars are medians, the whiskers one run's steps at the table's confidence; with
    repeats: the mean of runs, and above a bar its time ratio, as the table's columns say."""
    from pipeline.render.plots import step_label

    single = comparison_rows([recorded("a", "a", [0.1] * 10), recorded("b", "b", [0.2] * 10)], Criteria(0.9))
    assert "(median; whiskers: 90% interval of one run's steps)" in step_label(single, 0.9)
    assert "90% CI of one run's steps" in format_table(single, Criteria(0.9))
    jobs = [recorded(n, n, [t * (1 + r / 10)] * 5, r) for r in range(3) for n, t in (("a", 0.1), ("b", 0.2))]
    paired = comparison_rows(jobs, Criteria(0.9))
    assert "(mean of paired runs)\nranked: the fastest's times its time vs fastest, paired (above)" in step_label(
        paired, 0.9
    )
    assert "time vs fastest (90%, paired)" in format_table(paired, Criteria(0.9))


def _study_with_an_open_interval() -> list:
    """A study as its report reads it: one trial each (about 2 s/step, with its steps' interval), and a
    confirmation round of two rounds that leaves b's ratio to the answer a open: 0.81x [0.00, 349.00]."""
    from pipeline.records import RunKind

    jobs = [
        recorded("a", "a", [2.0, 2.1, 1.9, 2.0, 2.05, 1.95, 2.0], kind=RunKind.TRIAL),
        recorded("b", "b", [2.3, 2.2, 2.4, 2.3, 2.35, 2.25, 2.3], kind=RunKind.TRIAL),
    ]
    for r, (a, b) in enumerate([(1.0, 0.5), (1.0, 1.3)]):
        for name, t in (("a", a), ("b", b)):
            jobs.append(dataclasses.replace(recorded(name, name, [t] * 4, kind=RunKind.CONFIRM), round=r))
    return jobs


def test_an_open_interval_never_sets_the_step_axis_and_the_bars_and_labels_are_one_number(tmp_path):
    """The study of the bug: b's paired interval against the answer runs to hundreds of times; the axis is set by the
    bars of about 2 s, the answer has its bar (its step column), and is not called the fastest. b's bar is the
    answer's times b's paired ratio, the label above it (its search median, 2.3 s, is another source: the bar
    said 2.3 / 2.0 = 1.15 beside a label of 0.81x)."""
    from pipeline.render.plots import RANKS, Context, axis_top, bar_height, rank_of, step_times

    rows = order(comparison_rows(_study_with_an_open_interval(), Criteria(), prefer="a"))
    by_name = {r.name: r for r in rows}
    b = by_name["b"].comparison
    assert 1 / b.low > 300 and b.judgement is Judgement.EQUAL  # the open interval of the bug
    assert [r.name for r in rows] == ["b", "a"]  # ordered by the ratio: b reads 0.81x of the answer's time
    assert [paired_text(r) for r in rows] == [f"0.81x [0.00, {1 / b.low:.2f}]", "answer"]
    assert by_name["a"].median == pytest.approx(2.0) and by_name["b"].median == pytest.approx(2.3)
    assert bar_height(by_name["a"], rows) == by_name["a"].median
    assert bar_height(by_name["b"], rows) / bar_height(by_name["a"], rows) == pytest.approx(1 / b.speedup)
    assert axis_top(rows) == pytest.approx(1.3 * 2.0)  # by the bars: 2 s, never 700 s
    assert rank_of(by_name["a"]) is RANKS["answer"] and rank_of(by_name["b"]) is RANKS["apart"]
    context = Context("Study", "s", "cpu", "2026-12-01", 1.0, True)
    plot = step_times(rows, context, 0.95, tmp_path / "steps.png")
    assert plot.png.stat().st_size > 0
    svg = {e.get("id"): e for e in ElementTree.fromstring(plot.svg).iter() if e.get("id")}
    for i, row in enumerate(rows):  # in the table's order, each bar labelled with its `time vs answer` cell
        assert f"step-bar-{i}" in svg and "".join(svg[f"step-label-{i}"].itertext()).strip() == paired_text(row)


def test_a_config_whose_medians_and_pairs_disagree_is_ranked_and_drawn_from_its_pairs(tmp_path):
    """a's runs have the lower median, but two slow steps in each make it slower by the pairs (their trimmed
    means): its step column is the figure the pairs compare, so the step column, the ratio and the rank agree (the
    table and the plot ranked a and b apart before), and the plot is drawn."""
    from pipeline.render.plots import Context, step_times

    jobs = []
    for repeat in range(3):
        jobs.append(recorded("a", "a", [0.5, 0.5, 0.5, 2.0 + 0.01 * repeat, 2.0], repeat))
        jobs.append(recorded("b", "b", [0.8 + 0.01 * repeat] * 5, repeat))
    rows = {r.name: r for r in comparison_rows(jobs, Criteria())}
    assert statistics.median(j.summary.median for j in rows["a"].jobs) < rows["b"].median
    assert rows["a"].judgement is Judgement.SLOWER and rows["a"].median > rows["b"].median
    assert rows["a"].median / rows["b"].median == pytest.approx(1 / rows["a"].comparison.speedup)
    context = Context("Sweep", "s", "cpu", "2026-12-01", None, True)
    assert step_times(order(list(rows.values())), context, 0.95, tmp_path / "steps.png").png.stat().st_size > 0


def _three_way_tie() -> list:
    jobs = []
    for repeat, (a, b, c) in enumerate([(1.0, 1.01, 0.4), (1.0, 0.99, 2.6), (1.0, 1.0, 1.0)]):
        jobs += [recorded("a", "a", [a] * 5, repeat), recorded("b", "b", [b] * 5, repeat)]
        jobs.append(recorded("c", "c", [c] * 5, repeat))
    return jobs


def test_the_reports_headline_says_which_ties_are_close_and_which_the_rounds_could_not_tell_apart():
    from pipeline.render.headline import fastest_line

    rows = comparison_rows(_three_way_tie(), Criteria(), prefer="a")
    by_name = {r.name: r for r in rows}
    assert by_name["b"].comparison.margin < 0.1 and by_name["c"].comparison.margin > 1
    line = fastest_line(rows, None)
    assert line.startswith("The study's answer: **a**, 1.0000 s/step; equal with b (±")
    assert "; not told apart from c (within " in line and line.endswith("x either way) (paired rounds)")
    assert "((" not in line and "))" not in line


def test_the_reference_of_a_tie_says_with_whom():
    """`equal` alone on the fastest row said nothing (equal to what?): it names the rows tied with it, the close
    ones apart from those the rounds could not tell apart, and each of those rows says its margin."""
    rows = {r.name: r for r in comparison_rows(_three_way_tie(), Criteria())}
    reference = next(r for r in rows.values() if r.role)
    others = sorted(set(rows) - {reference.name})
    assert reference.judgement is Judgement.EQUAL and reference.role == "fastest"
    near = [n for n in others if rows[n].comparison.margin < 1]
    apart = [n for n in others if rows[n].comparison.margin >= 1]
    assert near and apart
    assert rank_text(reference) == f"fastest; equal with {', '.join(near)}; not told apart from {', '.join(apart)}"
    assert all(rank_text(rows[n]).startswith("equal ±") for n in near)
    assert all(rank_text(rows[n]).startswith("not told apart (within ") for n in apart)
    assert rank_text(comparison_rows(_three_way_tie(), Criteria(), prefer="a")[0]).startswith("answer; equal with b")


def test_the_runs_table_gives_the_fastests_rank_in_short_and_the_parent_who_won_and_by_how_much():
    """What MLflow's runs table shows of a ranked sweep: the fastest's rank counts its ties (its row beside them
    would not fit their names), the parent names the fastest and the next config's ratio to it; a winner is named so;
    without ranks, the lowest median, said to be unranked."""
    from pipeline.render.runs_table import in_short, parent_tags

    rows = comparison_rows(_three_way_tie(), Criteria())
    reference = next(r for r in rows if r.role)
    assert in_short(reference) == "fastest; equal with 1; 1 not told apart"  # b within 5%, c not
    strict = comparison_rows(_three_way_tie(), Criteria(tie_tolerance=0.001))
    assert in_short(next(r for r in strict if r.role)) == "fastest; 2 not told apart"
    nearest = next(r for r in order(rows) if r.comparison is not None)
    tags, best = parent_tags(rows)
    assert best is reference
    assert tags == {"rank": f"{reference.name}: fastest", "time_vs_fastest": f"next: {paired_text(nearest)}"}
    on, off = [0.42, 0.36, 0.47, 0.41], [0.24, 0.22, 0.31, 0.21]
    jobs = [recorded("ckpt=on", "on", [t] * 10, r) for r, t in enumerate(on)]
    jobs += [recorded("ckpt=off", "off", [t] * 10, r) for r, t in enumerate(off)]
    tags, _ = parent_tags(comparison_rows(jobs, Criteria()))
    assert tags["rank"] == "ckpt=off: winner" and tags["time_vs_fastest"].startswith("next: 1.7")
    single = comparison_rows([recorded("m 1x4", "a", [0.3] * 10), recorded("m 4x1", "b", [0.1] * 10)], Criteria())
    assert parent_tags(single)[0] == {"rank": "m 4x1: lowest median (not ranked: one run)", "time_vs_fastest": "-"}


def test_a_cap_is_named_only_where_a_job_went_over_one():
    """The sweep's last line and the runs table's parent row say `under the cap` only where a job went over one:
    a job that failed, or ran out of memory, with no cap set did not miss a cap."""
    from pipeline import exits
    from pipeline.records import Fit, RunKind, Status
    from pipeline.render.runs_table import parent_tags
    from pipeline.summaries import JobSummary, RecordedJob

    failed, oom = (Status.FAILED, Fit.FAILED), (Status.OOM, Fit.OOM)
    assert exits.jobs_exit_code([(Status.OK, Fit.NO_CAP), failed]) == (1, "1 of 2 jobs did not finish (1 failed)")
    assert exits.jobs_exit_code([oom]) == (1, "1 of 1 jobs did not finish (1 oom)")
    assert exits.jobs_exit_code([(Status.OK, Fit.OVER_CAP), failed]) == (
        1,
        "2 of 2 jobs did not finish under their cap (1 failed, 1 over-cap)",
    )
    assert exits.jobs_exit_code([(Status.OK, Fit.NO_CAP)]) == (0, "1 of 1 jobs finished")

    def job(name: str, status: Status, fit: Fit) -> RecordedJob:
        return RecordedJob(name, name, name, 0, RunKind.JOB, JobSummary(status=status, fit=fit))

    lost = [job("m 1x4", *failed), job("m 4x1", *oom)]
    assert parent_tags(comparison_rows(lost, Criteria()))[0]["rank"] == "no config finished"
    over = [job("m 1x4", *failed), job("m 4x1", Status.OVER_CAP, Fit.OVER_CAP)]
    assert parent_tags(comparison_rows(over, Criteria()))[0]["rank"] == "no config finished under the cap"


def test_the_figures_a_person_reads_in_mlflow_are_logged_as_the_console_prints_them():
    """MLflow's table prints a value whole: step times to four significant digits and at least four decimals (the
    tables' `.4f`), rates to four significant digits, memory to at least three decimals; metrics that say nothing
    happened are left out; a run's description says its drift as the console does, and needs no drift."""
    from pipeline.measure.summary import summarize_job
    from pipeline.tracking import figures
    from tests.helpers.records import result

    assert figures.shown(0.03739772099993388, 4) == 0.0374
    assert figures.shown(3.4124493, 4) == 3.4124 and figures.shown(0.00512349, 4) == 0.005123
    assert figures.shown(27067.1948, 0) == 27067 and figures.shown(12.3456, 0) == 12.35
    assert figures.shown(0.466796875, 3) == 0.4668 and figures.shown(14.12345, 3) == 14.123
    summary = summarize_job(result([0.1] * 6 + [0.126] * 6, peak=int(0.466796875 * 2**30)), 0, 0.95)
    logged = figures.metrics(summary)
    assert list(logged)[:3] == list(figures.LEADING_METRICS) and logged["peak_gib"] == 0.4668
    assert "context_gib" not in logged and "compile_s" not in logged  # no CUDA context recorded, nothing compiled
    assert figures.ranked(0.677736826249884) == 0.677737  # what ranks: six significant digits
    assert logged["step_time_trimmed_s"] == figures.ranked(summary.step_time.trimmed)
    assert logged["step_time_drift_pct"] == 26.0 and logged["step_time_cv_pct"] == round(100 * summary.step_time.cv, 1)
    noisy = summarize_job(result([0.1, 0.137, 0.09, 0.1555555, 0.1, 0.1234567]), 0, 0.95)
    for key, value in figures.metrics(noisy).items():  # nothing logged with more digits than a person reads
        assert value == int(value) or float(f"{value:.6g}") == value, (key, value)
    text = figures.description("m 1x4", summary, ["rank: slower"])
    assert text.startswith("**m 1x4**: ok, step 0.1130 s (median of 12 steady steps, ")
    assert "drift +26% (the last third of steady steps against the first)" in text and text.endswith("rank: slower")
    short = summarize_job(result([0.1, 0.1]), 0, 0.95)
    assert short.drift is None and "drift" not in figures.description("m", short)


def test_a_sweep_whose_first_config_wins_states_its_speedup_over_the_runner_up():
    """`1x4,2x2,4x1` where 1x4, the baseline, is fastest: its speed-up over itself (1.00x) said nothing; the answer's
    figure is over the nearest config the rounds compared with it. Where the baseline is another, over the baseline."""
    rng = random.Random(1)
    jobs = []
    for repeat in range(4):
        for name, config_id, step in (("m 1x4", "a", 0.10), ("m 2x2", "b", 0.20), ("m 4x1", "c", 0.30)):
            jobs.append(recorded(name, config_id, [step + rng.uniform(0, 0.005) for _ in range(12)], repeat))
    rows = comparison_rows(jobs, Criteria())
    by = {r.name: r for r in rows}
    gain = sweep_gain(by["m 1x4"], by["m 1x4"], rows)
    assert gain.against == "m 2x2" and gain.speedup == pytest.approx(2.0, rel=0.05)
    assert gain.low <= gain.speedup <= gain.high and gain.low > 1
    assert gain.line("m 1x4") == (
        f"m 1x4: {gain.speedup:.2f}x the tokens/s of m 2x2 [{gain.low:.2f}, {gain.high:.2f}] (95%, paired)"
    )
    gain = sweep_gain(by["m 1x4"], by["m 4x1"], rows)
    assert gain.against == "m 4x1" and gain.speedup == pytest.approx(3.0, rel=0.05)


def test_a_sweeps_speedup_is_a_figure_only_where_its_interval_excludes_1():
    """Two configs the rounds cannot tell apart (the fastest's ratio 1.08x [0.13, 8.97] in the README's busy
    sweep): no figure, one line saying why."""
    jobs = []
    for repeat, (a, b) in enumerate([(1.0, 0.6), (1.0, 1.5), (1.0, 1.1)]):
        jobs += [recorded("m 1x4", "a", [a] * 5, repeat), recorded("m 4x1", "b", [b] * 5, repeat)]
    rows = comparison_rows(jobs, Criteria())
    best = next(r for r in rows if r.role)
    gain = sweep_gain(best, rows[0], rows)
    assert gain.speedup is None and gain.low is None
    assert gain.line(best.name).startswith("no speed-up is claimed: 3 paired rounds could not tell ")
    assert "(within " in gain.line(best.name) and "either way)" in gain.line(best.name)


# ---- the console's table: 120 columns wide, the full one in MLflow, the report and with wide=true ---------------

BASE = {
    "train.adapter_dtype": "fp32",
    "model.attn_implementation": "sdpa",
    "train.dtype": "fp32",
    "train.gradient_checkpointing": "false",
    "train.loss": "trl",
    "train.optimizer": "adamw_torch",
    "train.optimizer_step": "eager",
    "train.torch_compile": "off",
}
MOVES = [  # (split, the keys moved from BASE, seconds a step): a sweep over every knob, the first config its baseline
    ("1x4", {}, 0.40),
    ("4x1", {"train.dtype": "bf16", "train.loss": "compiled", "train.optimizer": "adamw_torch_fused"}, 0.20),
    ("2x2", {"train.gradient_checkpointing": "true", "train.adapter_dtype": "compute"}, 0.30),
    ("1x4", {"model.attn_implementation": "eager", "train.optimizer_step": "compiled"}, 0.38),
]


def _many_knobs() -> list[tuple[list[str], str, float]]:
    from pipeline.config.identity import display_name

    configs = []
    for split, moved, seconds in MOVES:
        values = {**BASE, **moved}
        overrides = [f"batch.split={split}", *(f"{k}={v}" for k, v in values.items())]
        configs.append((overrides, display_name("tiny", split, list(values.items())), seconds))
    return configs


def _sweep_of(store, sweep_id: str, configs, wide: bool) -> tuple[str, str]:
    """A sweep of `configs` in two paired rounds, recorded in `store` and ended as a sweep ends: what it printed
    and its parent run."""
    from pipeline.commands.sweep_callback import SweepCallback
    from pipeline.jobs.context import SweepContext
    from pipeline.records import RunKind
    from pipeline.tracking import runs
    from tests.helpers.configs import composed
    from tests.helpers.records import record_run

    parent = runs.open_parent(store, f"sweep {sweep_id}", {runs.SWEEP: sweep_id, runs.KIND: RunKind.SWEEP})
    for repeat in range(2):
        for overrides, name, seconds in configs:
            record_run(store, parent, overrides, name, [seconds * (1 + 0.03 * repeat)] * 6, repeat)
    callback = SweepCallback()
    callback.tracker, callback.context = store, SweepContext(sweep_id, parent, tuple(BASE))
    callback._end(composed(*(["wide=true"] if wide else [])))
    return parent


def _rows_of(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("|")]


def test_a_sweep_over_many_knobs_prints_120_columns_and_mlflow_and_the_report_hold_the_full_table(
    store, tmp_path, capsys
):
    """The table that wrapped on a terminal (over 300 columns: every knob of every config, the notes beside): the
    console's is 120 wide, each config by what differs from the sweep's first config; MLflow's summary.md and the
    report keep every column and every name in full."""
    from pipeline.answer import results
    from pipeline.render.document import write_report
    from pipeline.tracking.readback import read_text

    configs = _many_knobs()
    parent = _sweep_of(store, "many", configs, wide=False)
    printed = capsys.readouterr().out
    table = _rows_of(printed)
    assert table and max(len(line) for line in table) <= 120, printed
    cells = [line.split("|")[1].strip() for line in table[2:]]
    at = next(i for i, cell in enumerate(cells) if cell.startswith("tiny 1x4"))  # in full, over continuation rows
    assert " ".join(cells[at:]).startswith(configs[0][1])
    assert "| 4x1 dtype=bf16 loss=compiled" in printed and "| 2x2 adapters=compute ckpt=on " in printed
    assert "| attn=eager optim_step=compiled " in printed
    summary = read_text(store, parent, "summary.md")
    result = results.read(store, parent)
    full = format_table(result.rows, result.criteria)
    assert full in summary and max(len(line) for line in _rows_of(full)) > 120
    report = (write_report(store, "many", tmp_path, None) / "report.md").read_text(encoding="utf-8")
    for _, name, _ in configs:
        assert f"| {name} " in summary and f"| {name} " in report
    assert "| 1x4 attn=eager" not in summary and "notes" in _rows_of(full)[0]


def test_wide_true_prints_the_full_table(store, capsys):
    from pipeline.tracking.readback import read_text

    parent = _sweep_of(store, "wide", _many_knobs()[:2], wide=True)
    printed = capsys.readouterr().out
    summary = read_text(store, parent, "summary.md")
    assert _rows_of(printed) == _rows_of(summary) and max(len(line) for line in _rows_of(printed)) > 120


def test_a_studys_trials_are_120_columns_wide_each_by_every_key_it_differs_in():
    """A study's labels name the keys that vary in its space; the baseline beside it names all (`dtype=fp32`), so
    a trial whose label reads like the baseline's may differ from it in a key the space fixes (`dtype=bf16`): the
    compact table names it by its overrides, every key of the space."""
    from optuna.trial import TrialState

    from pipeline.answer.table import compact_trials, format_trials
    from pipeline.search._trials import Role, TrialRecord

    def trial(number, split, moved, label_keys, role=Role.TRIAL, seconds=0.3):
        values = {**BASE, **moved}
        label = " ".join(["tiny", split, *(short(k, values[k]) for k in label_keys)])
        overrides = (f"batch.split={split}", *(f"{k}={v}" for k, v in values.items()))
        return TrialRecord(
            number, TrialState.COMPLETE, label=label, config_id=str(number), overrides=overrides,
            status=Status.OK, median=seconds, ci=Interval(seconds * 0.9, seconds * 1.1, 0.95), peak_gib=0.4,
            predicted_gib=0.41, feasible=True, role=role, note="pruned at step 3 (step 3 ran 1.4 s > 2 x 0.4 s)",
        )  # fmt: skip

    searched = ["train.gradient_checkpointing", "train.loss", "train.optimizer", "train.torch_compile"]
    baseline = trial(0, "1x4", {}, list(BASE), Role.BASELINE, 0.4)
    records = [baseline, trial(1, "1x4", {"train.dtype": "bf16"}, searched)]
    records.append(trial(2, "4x1", {"train.dtype": "bf16", "train.loss": "compiled"}, searched, seconds=0.2))
    compact = compact_trials(records, 0.95, baseline)
    table = _rows_of(compact)
    assert max(len(line) for line in compact.splitlines()) <= 120, compact
    cells = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in table[2:] if line.split("|")[1].strip()}
    assert cells["1"] == "dtype=bf16" and cells["2"] == "4x1 dtype=bf16 loss=compiled"
    assert baseline.label.startswith(cells["0"])  # the baseline in full, over continuation rows
    assert "  #1: pruned at step 3 (step 3 ran 1.4 s > 2 x 0.4 s)" in compact.splitlines()
    full = format_trials(records, 0.95, baseline)
    assert all(f"| {r.label} " in full for r in records) and max(len(line) for line in full.splitlines()) > 120


def test_a_fitted_table_wraps_its_long_cells_at_spaces_and_keeps_to_its_width():
    from pipeline.render.text import fitted_table

    lines = [["config", "step s", "rank"], ["tiny 4x1 " + " ".join(f"knob{i}=value{i}" for i in range(12)), "0.1"]]
    lines[1].append("not told apart (within 34.6x)")
    lines.append(["tiny 1x4", "0.2", "fastest"])
    text = fitted_table(lines, 60, wrapped=(0, 2))
    rows = text.splitlines()
    assert all(len(line) <= 60 for line in rows) and rows[1].startswith("|---")
    firsts = [c.split("|")[1].strip() for c in rows[2:]]
    assert " ".join(firsts).split() == lines[1][0].split() + ["tiny", "1x4"]  # every word, in order
    assert sum(1 for c in rows[2:] if c.split("|")[2].strip()) == 2  # one figure a config, the rest continuation
    narrow = fitted_table([["c"], ["averyveryverylongword"]], 12, wrapped=(0,))
    assert all(len(line) <= 12 for line in narrow.splitlines())  # a word breaks only where nothing else fits
    assert fitted_table([["config", "step s"]], 60) == "| config | step s |\n|--------|--------|"  # no row yet


def test_a_study_stopped_before_any_trial_prints_its_empty_table():
    """Ctrl-C during the probes: the study still says what it holds, an empty table (it raised on it)."""
    from pipeline.answer.table import compact_trials

    assert compact_trials([], 0.95, None).splitlines()[:2] == [
        "| # | config | status | step s | tokens/s | peak GiB | pred. GiB | fits | loss dev |",
        "|---|--------|--------|--------|----------|----------|-----------|------|----------|",
    ]


def test_the_answers_sftconfig_fits_the_console_and_reads_back_as_the_same_call():
    """A study's answer prints its SFTConfig (twenty-odd arguments, 690 characters on one line before): wrapped at its
    arguments, every line of it fits 120 columns beside its indent, and the lines joined are the same call."""
    import ast

    from pipeline.answer.study import sft_call

    kwargs = {f"argument_{n}": value for n, value in enumerate([2, 0.0002, "linear", True, None, "steps"] * 5)}
    text = "  " + sft_call(kwargs)
    assert all(len(line) <= 120 for line in text.splitlines()) and len(text.splitlines()) > 1
    call = ast.parse(" ".join(line.strip() for line in text.splitlines()), mode="eval").body
    assert call.func.id == "SFTConfig"
    assert {k.arg: ast.literal_eval(k.value) for k in call.keywords} == kwargs
    assert sft_call({}) == "SFTConfig()"


def test_one_steady_step_has_no_interval_and_says_so():
    """Seen with train.steps=6 and 5 warm-up steps: `0.0288 [0.0288, 0.0288] (0%)`, an interval of one step."""
    rows = comparison_rows([recorded("m 4x1", "a", [0.0288])], Criteria())
    assert step_text(rows[0], 0.95) == "0.0288 (1 step)"
    table = format_table(rows, Criteria())
    assert "(1 step): one steady step, no interval" in table and "(n%)" not in table


def test_why_nothing_is_ranked_counts_the_configs_that_compete_within_the_cap():
    """Two configs at repeats=3 of which one went over the cap: not `fewer than two paired rounds`, which would send
    a user who ran repeats=3 to run it; one config fits. Nothing timed at all: no config finished."""
    from pipeline.render.rows import Row

    fits = Row("a", "m 1x4", [], median=0.3, runs=3, fit=Fit.FITS)
    over = Row("b", "m 4x1", [], median=0.1, runs=3, fit=Fit.OVER_CAP)
    assert unranked([fits, over]) == "one config that fits"
    assert unranked([Row("a", "m 1x4", [], fit=Fit.FAILED)]) == "no config finished"
    assert unranked([over]) == "no config finished within the cap"
    twice = [Row("a", "m 1x4", [], median=0.3, runs=2), Row("b", "m 4x1", [], median=0.1, runs=1)]
    assert unranked(twice) == "fewer than two paired rounds"


def test_a_sweep_whose_every_job_failed_says_so_not_that_nothing_fits():
    """Seen on a folder of data without a text column: both jobs failed before a step, each with the peak of its
    model's load (0.38 GiB), and the headline read "Nothing fits: the smallest need is 0.38 GiB (measured); raise
    mem_cap" with no cap set. A failed job's peak is no need; the line says what failed."""
    jobs = []
    for name in ("m 1x4", "m 4x1"):
        job = recorded(name, name, [0.1] * 4)
        summary = dataclasses.replace(
            job.summary, status=Status.FAILED, fit=Fit.FAILED, step_time=None, memory_gib={"peak": 0.38}
        )
        jobs.append(dataclasses.replace(job, summary=summary, note="ValueError: Column name ['text'] not in"))
    rows = comparison_rows(jobs, Criteria())
    assert (
        fastest_line(rows, None)
        == "**Nothing finished**: 2 of 2 configs failed (ValueError: Column name ['text'] not in)"
    )
    over = recorded("m 8x1", "m 8x1", [0.1] * 4)
    summary = dataclasses.replace(
        over.summary, status=Status.OOM, fit=Fit.OOM, step_time=None, memory_gib={"peak": 9.5}
    )
    rows = comparison_rows([*jobs, dataclasses.replace(over, summary=summary)], Criteria())
    assert fastest_line(rows, 8.0).startswith(
        "**Nothing fits under the cap of 8.00 GiB**: the smallest need is 9.50 GiB"
    )
