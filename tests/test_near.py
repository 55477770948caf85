"""bench/near.py: a study's answer beside the fastest fitting configs of a grid recorded on its setting, its
overrides read from the study's console log, and the verdict paired over the rounds."""

from __future__ import annotations

import json

import pytest

from bench import near, side_by_side

LOG = """| 0 | ... |
best feasible: the baseline with loss=liger  (0.1211 s/step in the search, peak 12.19 GiB of 20.00 GiB)
  fits: peak 12.19 GiB of 20.00 GiB
  python -m pipeline.train model=qwen3-0.6b mem_cap=20GiB train.steps=12 paths.root=/r train.loss=liger
  script: /r/scripts/train_x.py
"""
GRID = {
    "setting": "model=qwen3-0.6b train.max_length=1024 optimize.space={train.loss:[trl,compiled]} (recorded uncapped)",
    "cap_gib": 20.0,
    "configs": [
        {"params": {"train.loss": "model", "train.liger_kernel": False}, "step_s": 0.09, "peak_gib": 28.3},
        {"params": {"train.loss": "trl", "train.liger_kernel": False}, "step_s": 0.12, "peak_gib": 12.5},
        {"params": {"train.loss": "compiled", "train.liger_kernel": True}, "step_s": 0.10, "peak_gib": 19.0},
        {"params": {"train.loss": "trl", "train.liger_kernel": True}, "status": "oom", "step_s": None},
    ],
}


def test_the_answer_is_the_train_command_under_best_feasible():
    assert near.answer_overrides(LOG) == [
        "model=qwen3-0.6b",
        "mem_cap=20GiB",
        "train.steps=12",
        "paths.root=/r",
        "train.loss=liger",
    ]
    with pytest.raises(SystemExit, match="no `best feasible` line"):
        near.answer_overrides("| 0 | ... |\n")


def test_the_neighbours_are_the_fastest_that_fit_the_cap_each_on_the_grids_setting():
    found = near.grid_overrides(GRID, 2)  # the model's loss is faster but over the cap; the oom one has no time
    assert [c["step_s"] for c, _ in found] == [0.10, 0.12]
    assert found[0][1] == [
        "model=qwen3-0.6b",
        "train.max_length=1024",
        "train.loss=compiled",
        "train.liger_kernel=true",
    ]
    with pytest.raises(SystemExit, match="no config of the grid fits its cap of 20.0 GiB"):
        near.grid_overrides({**GRID, "configs": GRID["configs"][:1]}, 2)
    with pytest.raises(SystemExit, match="not bench.grid_export's JSON"):
        near.grid_overrides({"cap_gib": 20.0}, 2)


def test_the_common_overrides_replace_the_same_keys_and_the_studys_own_are_left_out():
    merged = near.merged(["mem_cap=1GiB", "train.steps=12", "++optimize.space={a:[b]}"], ["train.steps=16", "x=1"])
    assert merged == ["mem_cap=1GiB", "train.steps=16", "x=1"]


def _write(folder, name: str, number: int, step_s: float) -> None:
    record = {"step_times_s": [9.0, *[step_s] * 6], "losses": [2.0], "peak_reserved_bytes": None}
    (folder / f"{name}-{number}.json").write_text(json.dumps(record), encoding="utf-8")


@pytest.mark.parametrize(
    ("answer", "said"),
    [(0.102, "1.020x [1.020, 1.020]: within 5%"), (0.13, "1.300x [1.300, 1.300]: not within 5%")],
)
def test_the_verdict_pairs_the_answer_with_the_fastest_neighbour(tmp_path, answer, said):
    for number, drift in enumerate([1.0, 3.0, 0.5]):  # the machine's speed moves; within a round it cancels
        _write(tmp_path, "answer", number, answer * drift)
        _write(tmp_path, "grid1", number, 0.1 * drift)
        _write(tmp_path, "grid2", number, 0.2 * drift)
    verdict = near.verdict(side_by_side.recorded(tmp_path, warmup=1))
    assert verdict == f"the answer over the fastest neighbour (grid1): time {said}"
    table = side_by_side.summary(side_by_side.recorded(tmp_path, 1), ["answer", "grid1"]).splitlines()
    assert table[3].startswith("| grid1 | 0.1000 |") and table[3].endswith("| - | 0.0e+00 |")  # no peak: '-'


def test_an_answer_that_ran_out_of_memory_in_every_round_is_paired_with_nothing(tmp_path):
    """The chats' answer on an H100 ran out of memory at step 10 of 16 in each of 3 rounds; its 9 steps are not its
    speed (the verdict read them as 1.99x the fastest neighbour)."""
    for number in range(3):
        _write(tmp_path, "grid1", number, 0.1)
        record = {"status": "oom", "step_times_s": [9.0, *[0.2] * 8], "losses": [2.0], "peak_reserved_bytes": None}
        (tmp_path / f"answer-{number}.json").write_text(json.dumps(record), encoding="utf-8")
    runs = side_by_side.recorded(tmp_path, warmup=1)
    assert near.verdict(runs) == "the answer finished in no round (oom, oom, oom): nothing to pair"
    assert "| answer | failed |" in side_by_side.summary(runs, ["answer", "grid1"])
