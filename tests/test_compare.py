"""The comparison engine: the paired statistic, the ranking, the confirmation round, and a study's answer on
simulated machines whose speed drifts and whose processes each have an offset of their own."""

from __future__ import annotations

import dataclasses
import math
import random
import statistics

import pytest
from optuna.trial import TrialState

from bench.machine import Machine
from pipeline.answer import speedup, table
from pipeline.compare.paired import Judgement, compare, compare_speedups
from pipeline.compare.ranking import rank
from pipeline.measure.stats import trimmed_mean
from pipeline.records import Status
from pipeline.search import _confirmation as confirmation
from pipeline.search._confirmation.plan import MIN_ROUNDS, ConfirmationRound, Finalist, Plan, fit, plan
from pipeline.search._decided import Decided
from pipeline.search._trials import Role, TrialRecord
from tests.helpers.settings import confirm_settings

# True step times (s) of a split x checkpointing x dtype space on one GPU, shaped like the H200 study of
# BENCHMARKS.md: bf16 and fp16 truly tie, checkpointing doubles the step, smaller micro-batches cost more.
SPACE = {
    "4x1 ckpt=off bf16": 0.21,
    "4x1 ckpt=off fp16": 0.21,
    "4x1 ckpt=on bf16": 0.40,
    "4x1 ckpt=on fp16": 0.40,
    "2x2 ckpt=off bf16": 0.45,
    "2x2 ckpt=off fp16": 0.45,
    "2x2 ckpt=on bf16": 0.85,
    "2x2 ckpt=on fp16": 0.85,
    "1x4 ckpt=off bf16": 0.85,
    "1x4 ckpt=off fp16": 0.85,
    "1x4 ckpt=on bf16": 1.50,
    "1x4 ckpt=on fp16": 1.50,
}
BASELINE = "4x1 ckpt=on fp16"  # the seed's setting


def simulated_study(
    rng: random.Random,
    chosen: confirmation.RoundSettings,
    space=SPACE,
    trial_steps=15,
    warmup=5,
    baseline_label=BASELINE,
    **machine,
):
    """A study as `pipeline.optimize` runs it, on a simulated machine: two probes, the baseline first and the other
    configs in a random order, each trial pruned (from its second step on) when the median of three steps passes 1.3x
    the best so far; then the real finalist choice, confirmation round and paired speed-up. Returns the decided
    study, the device seconds of its search, and the true speed-up of its answer over the baseline."""
    box = Machine(rng, **machine)
    spent = box.job(0.1, 4, 1).seconds + box.job(space[baseline_label], 4, 1).seconds
    order = [baseline_label, *rng.sample([n for n in space if n != baseline_label], len(space) - 1)]
    records, best = [], None
    for number, name in enumerate(order):
        threshold = None if name == baseline_label or best is None else 1.3 * best

        def stop(step, times, threshold=threshold):
            return threshold is not None and step == 4 and statistics.median(times[1:4]) > threshold

        run = box.job(space[name], trial_steps, warmup, stop)
        spent += run.seconds
        ok = len(run.steady) == trial_steps - warmup
        records.append(
            TrialRecord(
                number,
                TrialState.COMPLETE if ok else TrialState.PRUNED,
                label=name,
                status=Status.OK if ok else Status.PRUNED,
                median=run.median,
                step_times=tuple(run.steady),
                warmup_times=tuple(run.warmup),
                gpu_seconds=run.seconds,
                feasible=True,
                role=Role.BASELINE if name == baseline_label else Role.TRIAL,
            )
        )
        if ok:
            best = min(best or math.inf, run.median)
    eligible = [r for r in records if r.status is Status.OK]
    baseline = records[0]

    def confirm_run(record: TrialRecord, number: int, warm: int, steps: int) -> tuple[float | None, float]:
        run = box.job(space[record.label], warm + steps, warm)
        return (trimmed_mean(run.steady) if run.steady else None), run.seconds

    finalists = confirmation.choose(eligible, baseline, chosen)
    record = confirmation.run_round(finalists, baseline.label, chosen, spent, confirm_run) if finalists else None
    decided = Decided(records, baseline, eligible, None, record)
    return decided, spent, space[baseline_label] / space[decided.best.label]


# ---- the paired statistic ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("rounds", [2, 3, 5, 10])
def test_the_interval_of_a_speedup_covers_it_as_often_as_it_says(rounds):
    """Paired log ratios with normal noise: the 95% interval covers the true speed-up 95% of the time."""
    rng = random.Random(rounds)
    covered, trials = 0, 3000
    for _ in range(trials):
        c = compare_speedups("B", "A", [1.1 * math.exp(rng.gauss(0.0, 0.05)) for _ in range(rounds)], 0.95)
        covered += c.low <= 1.1 <= c.high
    error = 4 * (0.95 * 0.05 / trials) ** 0.5
    assert abs(covered / trials - 0.95) <= error, covered / trials


def test_judgements_and_the_margin_an_interval_certifies():
    faster = compare_speedups("B", "A", [1.50, 1.60, 1.55, 1.58], 0.95)
    assert faster.judgement is Judgement.FASTER and faster.low > 1 and faster.settled(0.05)
    assert faster.sentence() == f"B is {faster.interval_text()} faster than A (95%, paired over 4 rounds)"
    slower = compare_speedups("B", "A", [1 / 1.5, 1 / 1.6, 1 / 1.55], 0.95)
    assert slower.judgement is Judgement.SLOWER and slower.high < 1
    assert slower.sentence().startswith("A is 1.55x [") and slower.sentence().endswith(
        "faster than B (95%, paired over 3 rounds)"
    )
    equal = compare_speedups("B", "A", [1.02, 0.97, 1.01, 0.99, 1.0], 0.95)
    assert equal.judgement is Judgement.EQUAL and equal.margin == max(equal.high, 1 / equal.low) - 1
    assert equal.margin < 0.05 and equal.settled(0.05)
    assert f"equal within ±{math.ceil(100 * equal.margin)}%" in equal.sentence()
    wide = compare_speedups("B", "A", [1.2, 0.8, 1.1], 0.95)
    assert wide.judgement is Judgement.EQUAL and wide.margin > 0.3 and not wide.settled(0.05)
    # the margin holds both ways: the time ratio's interval (the inverse) lies within it too
    assert 1 / wide.low <= 1 + wide.margin + 1e-12 and wide.high <= 1 + wide.margin + 1e-12
    # rounds that leave a factor of two or more open do not pass it off as a percentage
    lost = compare_speedups("B", "A", [3.0, 0.4, 1.0], 0.95)
    factor = max(lost.high, 1 / lost.low)
    assert (
        lost.margin >= 1 and f"not told apart (within {math.ceil(10 * factor) / 10:.1f}x either way)" in lost.sentence()
    )
    judged, _, confidence = lost.sentence().partition(" (95%, paired")
    assert "%" not in judged and confidence
    # one round is no comparison, and never settled
    alone = compare_speedups("B", "A", [1.7], 0.95)
    assert alone.judgement is None and not alone.settled(0.05) and "no comparison" in alone.sentence()


def test_pairs_are_taken_round_by_round():
    medians = {"A": {0: 1.0, 1: 2.0, 2: 1.0}, "B": {0: 0.5, 1: 1.0, 3: 9.0}}
    c = compare("B", "A", medians, 0.95)
    assert c.speedups == (2.0, 2.0)  # rounds 0 and 1: the only ones both ran in


# ---- ranks from paired rounds ----------------------------------------------------------------------------------------
def test_a_drifting_machine_still_yields_a_winner_when_every_pair_agrees():
    """The machine runs 40% slower in round 2, yet 4x1 beats 1x4 in every round: the winner is named, although the
    raw medians of the two overlap."""
    medians = {"4x1": {0: 0.20, 1: 0.24, 2: 0.33, 3: 0.21}, "1x4": {0: 0.40, 1: 0.41, 2: 0.56, 3: 0.30}}
    ranking = rank(medians, 0.95)
    assert ranking.reference == "4x1" and ranking.judgement("4x1") is Judgement.WINNER
    assert ranking.judgement("1x4") is Judgement.SLOWER
    assert max(medians["4x1"].values()) > min(medians["1x4"].values())


def test_configs_that_tie_are_equal_with_the_margin_they_have_and_one_run_is_not_ranked():
    medians = {"a": {0: 1.0, 1: 1.1, 2: 0.9}, "b": {0: 1.02, 1: 1.05, 2: 0.95}, "c": {0: 2.0, 1: 2.1, 2: 1.9}}
    ranking = rank(medians, 0.95)
    assert ranking.judgement(ranking.reference) is Judgement.EQUAL
    other = "b" if ranking.reference == "a" else "a"
    assert ranking.judgement(other) is Judgement.EQUAL and ranking.judgement("c") is Judgement.SLOWER
    assert ranking.ties() == [other]
    assert rank({"a": {0: 1.0}, "b": {0: 2.0}}, 0.95) is None  # one run each: nothing to rank
    assert rank({"a": {0: 1.0, 1: 1.0}}, 0.95) is None  # one config


# ---- the confirmation round -----------------------------------------------------------------------------------------
def _measure(rng: random.Random, truth: dict[str, float], spread: float = 0.1, seconds: float = 10.0):
    def measure(name: str, number: int, steps: int) -> tuple[float, float]:
        return truth[name] * math.exp(rng.gauss(0.0, spread)), seconds

    return measure


def _flat(steps: int, run_s: dict[str, float], budget_s: float) -> Plan:
    """A plan whose runs cost `run_s` whatever their length."""
    return Plan(steps, run_s, {name: 0.0 for name in run_s}, budget_s)


def test_the_round_rotates_stops_once_settled_and_drops_what_is_settled():
    state = ConfirmationRound(["A", "B", "C"], 0.95, 0.05)
    order = []

    def measure(name, number, steps):
        order.append((number, name))
        return {"A": 1.0, "B": 1.0, "C": 3.0}[name] * (1.001 if number % 2 else 0.999), 10.0

    state.run(measure, _flat(5, {"A": 10.0, "B": 10.0, "C": 10.0}, 1e9), max_rounds=20)
    rounds = [[n for r, n in order if r == k] for k in range(4)]
    assert rounds[:3] == [["A", "B", "C"], ["B", "C", "A"], ["C", "A", "B"]]
    assert [c.judgement for c in state.comparisons()] == [Judgement.EQUAL, Judgement.SLOWER]
    assert all(c.settled(0.05) for c in state.comparisons())
    assert len(order) == 9  # settled after the third round: no fourth
    assert state.winner() == "A"


def test_the_winner_is_where_the_tables_ranking_of_the_same_rounds_ends_among_the_configs_that_fit():
    """A (the search's best), B faster than A, and a baseline X over the cap faster than both, in pairs. The study
    once named X the winner, fell back to A (X cannot be the answer) while its runs table, ranking only what fits,
    named B: the answer had no `answer` row."""
    state = ConfirmationRound(["A", "B", "X"], 0.95, 0.05)
    state.times = {
        "A": {0: 1.00, 1: 1.02, 2: 0.99, 3: 1.01},
        "B": {0: 0.80, 1: 0.81, 2: 0.79, 3: 0.80},
        "X": {0: 0.50, 1: 0.52, 2: 0.49, 3: 0.51},
    }
    assert state.winner() == "X"
    assert state.winner(among={"A", "B"}) == "B" == rank({k: state.times[k] for k in "AB"}, 0.95, "A").reference
    state.times["A"] = {0: 1.0}  # the best without pairs: nothing is found faster than it
    assert state.winner(among={"A", "B"}) == "A"


def test_a_finalist_whose_run_failed_in_the_round_is_never_the_winner():
    """Under the cached allocator a loss that builds the logits fits a cap in some processes and not in others
    (BENCHMARKS.md: one config fit 20 GiB in 1 of 3): a run out of memory in the round takes its finalist out."""
    state = ConfirmationRound(["A", "B"], 0.95, 0.05)
    state.times = {"A": {0: 1.00, 1: 1.02, 2: 0.99}, "B": {0: 0.80, 1: 0.81, 2: 0.79}}
    assert state.winner() == "B"
    state.failed = ["B"]  # its fourth run ran out of memory
    assert state.winner() == "A"
    state.failed = ["A"]
    assert state.winner() is None  # the best's pairs are what the others were measured against


def test_the_searchs_best_out_of_memory_in_the_round_gives_the_answer_to_the_next():
    """The search's best fit in its trial and ran out of memory in its second confirmation run: the answer is the
    fastest of those left, the round's lines say why the best is not it, and nothing is compared against the best."""

    def record(n, label, median, role=Role.TRIAL):
        return TrialRecord(
            n, TrialState.COMPLETE, label=label, median=median, status=Status.OK, feasible=True, role=role
        )

    base, best, near = record(0, "base", 2.0, Role.BASELINE), record(1, "best", 1.0), record(2, "near", 1.1)
    speeds = {"base": 2.0, "best": 1.0, "near": 1.1}

    def run(r: TrialRecord, number: int, warmup: int, steps: int) -> tuple[float | None, float]:
        if r.label == "best" and number == 1:
            return None, 5.0
        return speeds[r.label] * (1.01 if number % 2 else 0.99), 5.0

    settings = confirm_settings(mode="always")
    finalists = confirmation.choose([base, best, near], base, settings)
    assert [f.label for f in finalists] == ["best", "base", "near"]
    round_ = confirmation.run_round(finalists, "base", settings, 100.0, run)
    assert round_.state.failed == ["best"]
    assert Decided([base, best, near], base, [base, best, near], None, round_).best is near
    lines = table.confirmation_lines(round_, "near", 100.0)
    assert lines[-1] == "  failed in the round (out of memory or a failed job), so not the answer: best"
    assert not any("best" in line for line in lines[1:-1])
    all_failed = dataclasses.replace(round_.state, failed=["best", "near", "base"])
    assert (
        Decided([base, best, near], base, [best, near], None, dataclasses.replace(round_, state=all_failed)).best
        is None
    )


def test_a_challenger_found_faster_wins_and_the_budget_is_never_overrun_by_a_whole_round():
    state = ConfirmationRound(["A", "B"], 0.95, 0.05)
    state.run(_measure(random.Random(1), {"A": 1.0, "B": 0.7}, spread=0.02), _flat(5, {"A": 10.0, "B": 10.0}, 1e9), 20)
    assert state.winner() == "B"
    state = ConfirmationRound(["A", "B"], 0.95, 0.05)
    state.run(_measure(random.Random(2), {"A": 1.0, "B": 1.0}, spread=0.3), _flat(5, {"A": 10.0, "B": 10.0}, 75.0), 20)
    assert state.seconds == 60.0  # three rounds of 2 x 10 s (x1.1 planned): a fourth would pass 75 s
    (c,) = state.comparisons()
    assert c.judgement is Judgement.EQUAL and c.margin > 0.05  # not settled: it says the margin it has


def test_the_first_rounds_are_secured_by_shorter_runs_when_runs_cost_more_than_planned():
    """Runs that take 1.3x their predicted seconds: the plan's 3 rounds of 10 steps would pass the budget, so the
    second and third rounds run shorter, and the round still gets the three rounds an interval needs."""
    chosen = Plan(10, {"A": 2.0, "B": 2.0}, {"A": 0.5, "B": 0.5}, 50.0, min_steps=3)
    assert chosen.affordable_rounds == 3  # 3 x 1.1 x 14 s = 46.2 s

    def measure(name, number, steps):
        return 1.0, 1.3 * (2.0 + 0.5 * steps)

    state = ConfirmationRound(["A", "B"], 0.95, 0.05)
    state.run(measure, chosen, 20)
    assert state.steps[0] == 10 and 3 <= state.steps[2] <= state.steps[1] < 10
    assert len(state.times["A"]) == 3 and state.seconds <= 50.0
    rigid = 3 * 1.3 * 2 * (2.0 + 0.5 * 10)
    assert rigid > 50.0  # without the shorter runs the third round would not have fitted


def _finalist_record(number: int, label: str, step_s: float, role: Role = Role.TRIAL) -> TrialRecord:
    steps = tuple(step_s * (1 + 0.02 * (i % 3 - 1)) for i in range(10))
    return TrialRecord(
        number,
        TrialState.COMPLETE,
        label=label,
        status=Status.OK,
        median=statistics.median(steps),
        step_times=steps,
        warmup_times=(3 * step_s,),
        gpu_seconds=5.0 + sum(steps) + 3 * step_s,
        feasible=True,
        role=role,
    )


def test_a_round_stopped_after_a_run_goes_on_from_its_stored_record_and_measures_no_run_twice(tmp_path, capsys):
    """An interrupt (a notebook's stop button: KeyboardInterrupt) in the round's fifth run, its record so far stored
    on a real Optuna study after every run; the same call reads it back and goes on: the four runs kept are not
    measured again, the round begun ends, and every run of the finished round was measured exactly once."""
    import optuna

    chosen = [
        _finalist_record(0, "A", 0.20),
        _finalist_record(1, "X", 0.40, Role.BASELINE),
        _finalist_record(2, "B", 0.21),
    ]
    settings = confirm_settings(mode="always", max_rounds=5, share=0.9)
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(study_name="stopped", storage=storage)
    rng, measured = random.Random(3), []

    def run(record: TrialRecord, number: int, warmup: int, steps: int) -> tuple[float, float]:
        if len(measured) == 4 and stopping:
            raise KeyboardInterrupt
        measured.append((record.label, number))
        return {"A": 0.20, "X": 0.40, "B": 0.21}[record.label] * math.exp(rng.gauss(0.0, 0.02)), 10.0

    def save(record: confirmation.ConfirmationRecord) -> None:
        study.set_user_attr(confirmation.PARTIAL, record.to_attr())

    stopping = True
    with pytest.raises(KeyboardInterrupt):
        confirmation.run_round(chosen, "X", settings, 600.0, run, save)
    stored = confirmation.ConfirmationRecord.of(
        optuna.load_study(study_name="stopped", storage=storage).user_attrs[confirmation.PARTIAL]
    )
    assert (stored.runs, stored.rounds, stored.finished) == (4, 2, False)
    first, measured[:] = list(measured), []
    stopping = False
    record = confirmation.run_round(chosen, "X", settings, 600.0, run, save, stopped=stored)
    assert "the last one stopped after 4 run(s) in 2 round(s); it goes on from there" in capsys.readouterr().out
    assert not set(first) & set(measured), (first, measured)
    ran = sorted((name, number) for name, rounds in record.state.times.items() for number in rounds)
    assert sorted(first + measured) == ran and record.finished and record.rounds >= 3
    assert measured[0] in {(name, 1) for name in "AXB"}  # the round begun goes on first
    measured.clear()
    again = confirmation.run_round(chosen[:2], "X", settings, 600.0, run, save, stopped=stored)  # other finalists
    assert "it planned other finalists or another warm-up, so it runs again" in capsys.readouterr().out
    assert sorted(measured) == sorted((n, r) for n, rounds in again.state.times.items() for r in rounds)
    assert ("A", 0) in measured  # from its first round: the stored runs pair with nothing it plans


def test_a_round_stopped_in_its_first_run_says_it_had_begun_and_goes_on_with_its_plan(tmp_path, capsys):
    """Ctrl-C in the round's first job, its header printed: the study keeps the round as begun (no run yet), the
    answer says the round measured no run of them and that the same command goes on with it (not that the study
    stopped before its round, nor that its budget bought too few rounds), and the same command says where it stopped
    and measures the whole round."""
    import optuna

    chosen = [_finalist_record(0, "A", 0.20), _finalist_record(1, "X", 0.40, Role.BASELINE)]
    settings = confirm_settings(max_rounds=4, share=0.9)
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(study_name="stopped", storage=storage)
    stopping = True

    def run(record: TrialRecord, number: int, warmup: int, steps: int) -> tuple[float, float]:
        if stopping:
            raise KeyboardInterrupt
        return {"A": 0.20, "X": 0.40}[record.label], 10.0

    def save(record: confirmation.ConfirmationRecord) -> None:
        study.set_user_attr(confirmation.PARTIAL, record.to_attr())

    with pytest.raises(KeyboardInterrupt):
        confirmation.run_round(chosen, "X", settings, 600.0, run, save)
    stored = Decided.of(optuna.load_study(study_name="stopped", storage=storage), 1.0).confirmation
    assert stored is not None and (stored.runs, stored.finished) == (0, False)
    why = speedup.claim(chosen[0], chosen[1], [], stored, enabled=True, confirm_off=False).why
    assert why == (
        "the confirmation round measured no run of A and X (the study stopped during its round; the same command goes "
        "on with it)"
    )
    assert table.confirmation_lines(stored, "A", 100.0) == [
        "confirmation round (the study stopped during the round; the same command goes on with it): no run of A, "
        "X (baseline) finished"
    ]
    stopping = False
    capsys.readouterr()
    record = confirmation.run_round(chosen, "X", settings, 600.0, run, save, stopped=stored)
    assert "the last one stopped in its first run; it goes on from there" in capsys.readouterr().out
    assert record.finished and record.rounds >= MIN_ROUNDS


def test_a_runs_figure_is_not_moved_by_one_stalled_step():
    steps = [0.20, 0.21, 0.19, 0.20, 0.21]
    stalled = [0.20, 0.21, 0.19, 2.0, 0.21]
    assert trimmed_mean(stalled) == pytest.approx(trimmed_mean(steps), rel=0.03)
    assert statistics.fmean(stalled) > 1.5 * statistics.fmean(steps)  # where a plain mean would be
    assert trimmed_mean([1.0, 2.0, 3.0, 10.0]) == pytest.approx(4.0)  # fewer than five steps: nothing left out


def test_the_plan_buys_rounds_before_steps_and_leaves_out_the_lowest_priority():
    fast = Finalist("best", step_s=0.2, cv=0.15, fixed_s=2.0)
    base = Finalist("baseline", step_s=0.4, cv=0.15, fixed_s=2.0)
    near = Finalist("challenger", step_s=0.22, cv=0.15, fixed_s=2.0)
    rich = plan([fast, base], 1e6, 3, 30)
    assert rich.steps > 3  # with budget to spare, longer runs narrow the step noise
    poor = plan([fast, base], 20.0, 3, 30)  # 3 rounds of 3 steps fit, of 4 steps they would not
    assert poor.steps == 3 and poor.affordable_rounds >= MIN_ROUNDS
    kept, chosen = fit([fast, base, near], 20.0, 3, 30)
    assert [f.name for f in kept] == ["best", "baseline"] and chosen.affordable_rounds >= MIN_ROUNDS
    kept, _ = fit([fast, base, near], 200.0, 3, 30)
    assert [f.name for f in kept] == ["best", "baseline", "challenger"]


def test_the_finalists_are_the_best_the_baseline_and_the_close_challengers():
    def record(n, label, median):
        return TrialRecord(n, TrialState.COMPLETE, label=label, median=median, status=Status.OK, feasible=True)

    best, near, far, base = (
        record(1, "best", 1.0),
        record(2, "near", 1.2),
        record(3, "far", 1.5),
        record(0, "base", 2.0),
    )
    base = TrialRecord(0, TrialState.COMPLETE, label="base", median=2.0, status=Status.OK, role=Role.BASELINE)
    eligible = [near, far, best, base]
    labels = [r.label for r in confirmation.choose(eligible, base, confirm_settings())]
    assert labels == ["best", "base", "near"]
    assert [r.label for r in confirmation.choose(eligible, base, confirm_settings(mode="always"))] == [
        "best",
        "base",
        "near",
        "far",
    ]
    assert confirmation.choose(eligible, base, confirm_settings(mode="never")) == []
    assert confirmation.choose([base], base, confirm_settings()) == []  # the baseline is the best: nothing to confirm


def test_the_config_measured_fastest_is_the_first_challenger_where_the_estimates_rank_another_first():
    """Seed 3 on an H100 (BENCHMARKS.md): the knob model put the compiled loss with fused AdamW (0.0651 s measured)
    first and the same without it (0.0598 s, the fastest measured) last of three close challengers, which the round's
    budget then left out."""

    def record(n, label, median):
        return TrialRecord(n, TrialState.COMPLETE, label=label, median=median, status=Status.OK, feasible=True)

    fused, graph, plain = record(11, "fused", 0.0651), record(12, "graph", 0.0664), record(9, "plain", 0.0598)
    base = TrialRecord(0, TrialState.COMPLETE, label="base", median=0.4655, status=Status.OK, role=Role.BASELINE)
    estimates = {"fused": 0.058, "graph": 0.061, "plain": 0.062}
    chosen = confirmation.choose([plain, fused, graph, base], base, confirm_settings(), estimates)
    assert [r.label for r in chosen] == ["fused", "base", "plain", "graph"]
    agreed = {"fused": 0.066, "graph": 0.067, "plain": 0.059}  # the estimates put the fastest measured first
    assert [r.label for r in confirmation.choose([plain, fused, graph, base], base, confirm_settings(), agreed)] == [
        "plain",
        "base",
        "fused",
        "graph",
    ]


def test_the_warm_up_of_a_confirmation_run_is_the_transient_its_trial_showed():
    steady = (0.2, 0.21, 0.19, 0.2)
    assert (
        confirmation.transient(TrialRecord(0, TrialState.COMPLETE, step_times=steady, warmup_times=(2.0, 0.21, 0.2)))
        == 1
    )
    assert (
        confirmation.transient(TrialRecord(0, TrialState.COMPLETE, step_times=steady, warmup_times=(2.0, 0.5, 0.2)))
        == 2
    )
    # steps 1 and 2 compiled (left out of the warm-up's times); step 3 recorded CUDA graphs, step 4 ran steady
    compiled = TrialRecord(0, TrialState.COMPLETE, step_times=steady, warmup_times=(0.9, 0.2), warmup_left_out=(1, 2))
    assert confirmation.transient(compiled) == 3
    assert confirmation.transient(dataclasses.replace(compiled, warmup_times=(0.2, 0.2))) == 2


def test_the_round_survives_the_study_storage_as_it_was():
    state = ConfirmationRound(["A", "B"], 0.95, 0.05, {"A": {0: 1.0, 1: 1.1}, "B": {0: 2.0, 1: 2.3}}, 40.0, [])
    record = confirmation.ConfirmationRecord(state, 2, 7, 55.0, "B", ("C",))
    import json

    again = confirmation.ConfirmationRecord.of(json.loads(json.dumps(record.to_attr())))
    assert again == record and again.rounds == 2


# The tiny model's splits on a quiet 2-core CPU, one thread a job: 1.3x from the fastest to the baseline, jobs of two
# seconds' start-up and a tenth of a second a step, processes 10% apart, steps 10% noisy.
SMALL_STUDY = {"4x1": 0.10, "2x2": 0.12, "1x4": 0.13}


def _decided_share(floor_s: float, studies: int = 200) -> tuple[float, float]:
    """Of `studies` small studies (SMALL_STUDY, baseline 1x4), the share whose round ends decided (every comparison
    with the answer faster, slower, or equal within 10%), and the most device seconds a round spent."""
    rng = random.Random(20261204)
    decided, most = 0, 0.0
    for _ in range(studies):
        study, _, _ = simulated_study(
            rng,
            confirm_settings(floor_s=floor_s),
            space=SMALL_STUDY,
            trial_steps=8,
            warmup=2,
            baseline_label="1x4",
            offset=0.10,
            drift=0.05,
            step_cv=0.10,
        )
        record = study.confirmation
        comparisons = record.state.comparisons(study.best.label) if record else []
        decided += all(c.settled(0.05) or c.margin <= 0.10 for c in comparisons)
        most = max(most, record.state.seconds if record else 0.0)
    return decided / studies, most


def test_a_small_studys_round_buys_the_rounds_a_decision_needs_up_to_its_floor_in_seconds(capsys):
    """A study of a few seconds a trial: its share (25%) buys the claim's three short rounds, which leave a 1.3x gap
    undecided in about half of such studies; the floor in seconds (30 s, optimize.confirm_floor_s) buys the rounds
    that decide it in nearly all, and the round never spends much past the floor (a whole round at most)."""
    without, _ = _decided_share(0.0)
    with_floor, most = _decided_share(30.0)
    capsys.readouterr()
    print(f"decided: {without:.3f} without a floor, {with_floor:.3f} with 30 s (round at most {most:.1f} s)")
    assert without < 0.75
    assert with_floor >= 0.95
    assert most <= 30.0 * 1.3


def test_the_round_budget_is_the_share_or_the_floor_whichever_is_more_and_at_most_the_cap():
    settings = confirm_settings(share=0.25, floor_s=30.0)
    assert settings.budget(300.0) == pytest.approx(100.0)  # the share: a third of what the search spent
    assert settings.budget(30.0) == 30.0  # the share buys 10 s: the floor
    assert confirm_settings(share=0.25, floor_s=30.0, budget_s=20.0).budget(30.0) == 20.0
    assert settings.governs(30.0, 30.0).startswith("the floor, optimize.confirm_floor_s; the share, 25%, buys 10 s")
    assert settings.governs(300.0, 100.0) == "25% of the study's device time"
    assert settings.governs(30.0, 45.0) == "what the answer's claim needs"


# ---- a study on a drifting machine: the acceptance of the paired design ------------------------------------------------
STUDIES = 1000  # the coverage estimate is then within about 0.7% (one standard error) of the truth


def test_a_studys_paired_speedup_covers_the_truth_and_its_round_decides_within_its_budget(capsys):
    """Studies of the space above on machines whose processes each draw an offset of up to +-15% and whose speed
    drifts by up to +-15% over minutes: the answer's 95% speed-up interval over the baseline covers the true
    speed-up in at least 93% of them; the round stays within its share of the device time; and every comparison
    ends faster, slower, or equal within a stated margin (never undecided)."""
    rng = random.Random(20261201)
    covered = answered = stated = decided = 0
    shares, over = [], []
    for _ in range(STUDIES):
        decided_study, spent, truth = simulated_study(rng, confirm_settings())
        record = decided_study.confirmation
        shares.append(record.state.seconds / (spent + record.state.seconds))
        if record.state.seconds > confirm_settings().budget(spent):
            over.append(record.state.seconds / record.budget_s)  # the claim's rounds bought beyond the share
        comparisons = record.state.comparisons(decided_study.best.label)
        assert comparisons and all(c.judgement is not None for c in comparisons)
        decided += all(c.settled(0.05) or c.margin <= 0.10 for c in comparisons)
        if decided_study.best.label != BASELINE:
            answered += 1
            gain = speedup.claim(
                decided_study.best,
                decided_study.baseline,
                [],
                decided_study.confirmation,
                enabled=True,
                confirm_off=False,
            ).speedup
            stated += gain is not None
            covered += gain is not None and gain.comparison.low <= truth <= gain.comparison.high
    capsys.readouterr()
    print(
        f"coverage {covered / stated:.3f} of {stated / answered:.3f} stated, decided {decided / STUDIES:.3f}, "
        f"share mean {statistics.fmean(shares):.3f} max {max(shares):.3f}, {len(over)} beyond the share"
    )
    assert covered / stated >= 0.93 and stated / answered >= 0.85
    assert statistics.fmean(shares) <= 0.25
    # beyond the share only by what the answer's claim needs: its own budget, with the margin of a secured round
    assert all(ratio <= 1.5 for ratio in over)
    assert decided / STUDIES >= 0.90


def test_the_rounds_lines_give_each_finalists_speed_from_process_to_process():
    """One line a finalist: how many fresh processes ran it in the round, the range of their figures, and the
    farthest from their median; a finalist that ran once has no spread to give."""
    from pipeline.answer.table import confirmation_lines

    state = ConfirmationRound(["a", "b", "c"], 0.95, 0.05)
    state.times = {"a": {0: 1.0, 1: 1.1, 2: 0.95}, "b": {0: 2.0, 1: 2.04, 2: 2.02}, "c": {0: 3.0}}
    state.steps = {0: 5, 1: 5, 2: 5}
    state.seconds = 40.0
    record = confirmation.ConfirmationRecord(state, warmup=1, steps=5, budget_s=60.0, baseline="b")
    lines = confirmation_lines(record, "a", total_s=100.0, shown={"a": "tiny 4x1"})
    assert "  tiny 4x1: 3 fresh processes, 0.9500-1.1000 s/step, farthest 10.0% from their median" in lines
    assert "  b: 3 fresh processes, 2.0000-2.0400 s/step, farthest 1.0% from their median" in lines
    assert not [line for line in lines if line.startswith("  c: ")]


def test_the_baseline_stays_in_the_rounds_while_its_pairs_with_the_leader_are_unsettled():
    """The rounds put C ahead of the best (A) without telling them apart, so C is the answer's likeliest config; the
    baseline (B) is settled against A but not against C: it stays in the rounds, or the answer's claim over it would
    rest on the few pairs A needed (a small CPU study ended `no speed-up is claimed ... within ±92%` so)."""
    state = ConfirmationRound(["A", "B", "C"], 0.95, 0.05)
    state.times = {
        "A": {0: 1.00, 1: 1.02, 2: 0.98},
        "B": {0: 1.50, 1: 1.52, 2: 1.49},
        "C": {0: 0.80, 1: 1.30, 2: 0.85},
    }
    assert {c.config: c.settled() for c in state.comparisons()} == {"B": True, "C": False}
    assert state.leader(state.times) == "C"
    assert not next(c for c in state.comparisons("C") if c.config == "B").settled()
    assert state.open() == ["A", "B", "C"]
    state.times["C"] = {0: 0.70, 1: 0.71, 2: 0.69}  # C now settled faster than both: B has left
    assert state.open() == ["A", "C"]


def test_a_compiled_finalists_runs_are_planned_with_what_the_compile_cache_leaves_to_compile():
    """The best and its challenger compiled 22 s in their trials; a later process of either compiles 2.5 s (the
    study's compile cache holds the rest). Planned with the trials' start-ups (a cache that does not hold them), a
    budget of 100 s buys the answer's claim alone and leaves the challenger out; planned with what the cache leaves,
    the challenger is measured too."""

    def compiled(number: int, label: str, step_s: float) -> TrialRecord:  # 24.5 s of which 22 s compiling
        return dataclasses.replace(_finalist_record(number, label, step_s), gpu_seconds=24.5, compile_s=22.0)

    def round_of(warm: bool):
        best = compiled(0, "best", 0.050)
        near = compiled(2, "near", 0.052)
        base = _finalist_record(1, "base", 0.2, Role.BASELINE)
        base = dataclasses.replace(base, gpu_seconds=base.gpu_seconds - 3.0)  # a 2 s start-up, as its runs have
        rng = random.Random(3)

        def run(r, number, warm, steps):  # a warm cache: 2 s to start, 2.5 s to compile what the cache lacks
            start = 2.0 + (2.5 if r.label != "base" else 0.0)
            return r.median * rng.uniform(0.9, 1.1), start + (warm + steps) * r.median

        settings = confirm_settings(share=0.25, floor_s=0.0, max_rounds=20)
        return confirmation.run_round(
            [best, base, near], "base", settings, spent_s=300.0, run=run, warm=lambda record: warm
        )

    cold = round_of(warm=False)  # as a worker whose cache does not hold what the trials compiled
    warm = round_of(warm=True)
    assert cold.left_out == ("near",) and cold.state.seconds < 50.0  # most of the 100 s budget left unspent
    assert warm.left_out == () and len(warm.state.times["near"]) >= MIN_ROUNDS and warm.state.seconds <= 100.0


def test_a_finalists_compilation_counts_as_cached_only_where_its_trial_ran_here_and_the_cache_is_there(tmp_path):
    from pipeline.liveness import Owner
    from pipeline.search._confirmation.jobs import warm_cache

    here = TrialRecord(0, TrialState.COMPLETE, owner=str(Owner.current()))
    there = dataclasses.replace(here, owner=str(dataclasses.replace(Owner.current(), host="another-host")))
    assert not warm_cache(here, str(tmp_path))  # no cache yet: a study resumed after it went
    (tmp_path / "compile-cache").mkdir()
    assert warm_cache(here, str(tmp_path))
    assert not warm_cache(there, str(tmp_path))  # measured by a worker on another machine
    assert not warm_cache(dataclasses.replace(here, owner=None), str(tmp_path))


def test_the_round_holds_the_cap_for_the_finalists_that_fit_and_never_for_the_baseline():
    """The chats study on an H100: the baseline fit in its trial (uncapped, 19.02 of 20 GiB) and ran out of memory
    at step 9 of its round run under the cap (3.28 GiB reserved and unused), so the round had nothing to pair and the
    study claimed nothing. The baseline runs as in its trial, uncapped; a finalist that fit holds the cap."""
    from pipeline.search._confirmation.jobs import capped
    from pipeline.search._trials import Role

    finalist = TrialRecord(3, TrialState.COMPLETE, feasible=True)
    baseline = dataclasses.replace(finalist, role=Role.BASELINE)
    assert capped(finalist)
    assert not capped(baseline)  # it fit in its trial: still uncapped
    assert not capped(dataclasses.replace(baseline, feasible=False))  # over the cap: measured for its speed
