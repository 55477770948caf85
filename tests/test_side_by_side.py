"""bench/side_by_side.py: scripts in rotated rounds of fresh processes, each pair's ratio paired within a round."""

from __future__ import annotations

import json

import pytest

from bench import side_by_side

DRIFT = [1.0, 3.0, 0.5]  # the machine's speed from round to round: a pair shares it, so it cancels


def _write(folder, name: str, number: int, step_s: float) -> None:
    record = {"step_times_s": [9.0, *[step_s] * 6], "losses": [2.0, 1.5], "peak_reserved_bytes": 2**30}
    (folder / f"{name}-{number}.json").write_text(json.dumps(record), encoding="utf-8")


def test_each_pair_is_paired_within_the_rounds_both_ran_and_the_drift_cancels(tmp_path):
    """B takes twice A's time in every round it ran, while the machine's speed moves threefold: the pair is exactly
    2x with no width. Unpaired (the ratio of the medians, over B's missing round) it would read 1.5x."""
    for number, drift in enumerate(DRIFT):
        _write(tmp_path, "a", number, 0.1 * drift)
        if number != 1:  # B's run of round 1 failed: it pairs with nothing
            _write(tmp_path, "b", number, 0.2 * drift)
        _write(tmp_path, "seed", number, 0.4 * drift)
    runs = side_by_side.recorded(tmp_path, warmup=1)
    assert [r is None for r in runs["b"]] == [False, True, False]
    text = side_by_side.summary(runs, ["seed", "a", "b"])
    assert "| a | 0.1000 | 0.250x [0.250, 0.250]: 4.00x faster | 1.00 | 0.0e+00 |" in text, text
    assert "| b | 0.1500 | 0.500x [0.500, 0.500]: 2.00x faster |" in text, text  # its median: 0.2 and 0.1
    assert text.splitlines()[-1] == "a over b: time 0.500x [0.500, 0.500]: 2.00x faster, paired over 2 round(s)"


def test_a_pair_whose_interval_holds_one_is_not_told_apart_and_one_round_has_no_interval(tmp_path):
    for number, (a, b) in enumerate([(0.1, 0.2), (0.2, 0.1)]):
        _write(tmp_path, "a", number, a)
        _write(tmp_path, "b", number, b)
    _write(tmp_path, "c", 0, 0.05)
    runs = side_by_side.recorded(tmp_path, warmup=1)
    text = side_by_side.summary(runs, ["a", "b", "c"])
    assert "| c | 0.0500 | 0.500x (one round: no interval) |" in text, text
    assert "b over c" not in text.split("\n| c |")[0]
    assert "not told apart" in text.splitlines()[3], text  # b against a: 2x one round, 0.5x the other


def test_rounds_are_rotated_so_each_script_runs_first_in_turn():
    orders = [side_by_side.rounds_order(["seed", "answer", "unsloth"], n) for n in range(3)]
    assert [o[0] for o in orders] == ["seed", "answer", "unsloth"]
    assert all(sorted(o) == ["answer", "seed", "unsloth"] for o in orders)


def test_a_jobs_steps_that_compiled_after_the_warm_up_are_no_part_of_its_figure():
    """A CUDA-graph config on varying lengths compiles at each new shape, after any warm-up (3-5 s steps among 0.1 s
    ones on the chats, BENCHMARKS.md): a study leaves such steps out of its figure, and so does the side by side
    where the job flagged them. A plain script's record has no flags: all its steps count."""
    times = [9.0, 0.1, 0.1, 4.0, 0.1, 0.1, 0.1, 3.0, 0.1, 0.1, 0.1]
    flags = [False, True, True, False, True, True, True, False, True, True, True]
    job = side_by_side.figured({"step_times_s": times, "steady": flags}, warmup=1)
    assert job["figure"] == pytest.approx(0.1)
    plain = side_by_side.figured({"step_times_s": times}, warmup=1)
    assert plain["figure"] == pytest.approx(sum(sorted(times[1:])[2:-2]) / 6)  # the spikes in, trimmed 2 a side
