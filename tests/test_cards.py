"""Result cards from real sweeps: `pipeline.card(result)` and `python -m pipeline.card` write the same card, and
`python -m pipeline.report --cards` merges cards of different settings into one table, naming what differs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import pipeline
from pipeline.answer.card import Card, load
from pipeline.answer.card_merge import merge
from tests.helpers.cli import run_cli, run_python

FAST = ["train.steps=6", "measure.warmup_steps=1", "train.progress_bar=false"]
COMMITTED = Path(__file__).resolve().parents[1] / "bench" / "results" / "cards"
H200_CARDS = sorted(COMMITTED.glob("h200*.json"))


def a_sweep_card(folder: Path, *extra: str) -> tuple[Card, Path]:
    result = pipeline.sweep(["batch.split=1x4,4x1", "repeats=2", *FAST, *extra])
    card = pipeline.card(result, folder)
    return card, folder / f"{result.name}.json"


def test_the_card_entry_point_imported_leaves_pipeline_card_the_function(tmp_path):
    """`import pipeline.card` (what `python -m pipeline.card` runs) does not turn the API's `pipeline.card` into a
    module: a notebook that imported the one still calls the other."""
    code = (
        "import pipeline, pipeline.card, sys; from pipeline import card; "
        "print(pipeline.card.__qualname__, card.__qualname__, sys.modules['pipeline.card'].main.__module__)"
    )
    proc = run_python("-c", code, cwd=tmp_path)
    assert proc.stdout.split() == ["write_card", "write_card", "pipeline.commands.card"], proc.stderr


@pytest.mark.slow
def test_cards_of_two_sweeps_merge_into_one_table_by_gpu(tmp_path):
    short, short_path = a_sweep_card(tmp_path / "a")
    long, long_path = a_sweep_card(tmp_path / "b", "train.max_length=64", "data.length=64")

    # the command line writes the card the function wrote
    proc = run_cli("--sweep", short.name, "--out", str(tmp_path / "cli"), cwd=tmp_path, module="pipeline.card")
    assert proc.returncode == 0, proc.stderr
    assert load(tmp_path / "cli" / short_path.name) == load(short_path)
    assert proc.stdout.startswith(f"# Sweep {short.name} on {short.device.name}")

    assert short.varying == ["batch.split"] and short.setting["train.max_length"] == 128
    assert short.device.type == "cpu" and short.versions["torch"].startswith("2.")
    assert short.rows[0]["config"] == short.answer.config and len(short.rows) == 2
    assert short.answer.reproduce.startswith(f"python -m pipeline.train batch.split={short.answer.config.split()[1]}")

    proc = run_cli(
        "--cards", str(short_path), str(long_path), "--out", str(tmp_path), cwd=tmp_path, module="pipeline.report"
    )
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "cards.md").read_text()
    assert text in proc.stdout
    assert "- train.max_length: 128 (A), 64 (B)" in text and "- data.length: 128 (A), 64 (B)" in text
    assert "cannot be compared" in text
    table = [line for line in text.splitlines() if line.startswith("| 1x4 ") or line.startswith("| 4x1 ")]
    assert len(table) == 2  # one row per split, a column per card
    for line in table:
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        split = cells[0]
        for cell, card in zip(cells[1:], (short, long), strict=True):
            record = next(r for r in card.rows if r["config"] == f"tiny {split}")
            assert cell.startswith(f"{record['step_s']:.4f} s (2 runs)")


def test_a_file_that_is_no_card_is_refused_in_one_line(tmp_path):
    (tmp_path / "x.json").write_text(json.dumps({"format": "something else"}))
    proc = run_cli("--cards", str(tmp_path / "x.json"), cwd=tmp_path, module="pipeline.report")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        f"error: --cards: {tmp_path / 'x.json'}: not a 'batch-split result card 1'; accepted: JSON files written by "
        "python -m pipeline.card"
    ]


@pytest.mark.slow  # a CPU sweep to card: 8 s
@pytest.mark.skipif(not H200_CARDS, reason="no H200 card committed yet: bench/card_h200.sh makes it on the GPU")
def test_a_cpu_card_and_the_h200_card_merge(tmp_path):
    cpu, _ = a_sweep_card(tmp_path)
    h200 = load(H200_CARDS[0])
    text = merge([("cpu.json", cpu), (H200_CARDS[0].name, h200)])
    assert "NVIDIA H200" in text and "- model.name: tiny (A), qwen3-1.7b (B)" in text
    for split in ("1x4", "4x1"):
        assert any(line.startswith(f"| {split} ") for line in text.splitlines())


def test_the_committed_cpu_and_h200_cards_of_one_setting_compare_in_one_table():
    """The README's merge: the quickstart's sweep on the CPU and on an H200, one setting, so the columns compare."""
    names = ["cpu-tiny.json", "h200-tiny.json"]
    text = merge([(name, load(COMMITTED / name)) for name in names])
    assert "Every card has the same setting: the columns compare." in text and "The settings differ" not in text
    rows = {
        line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:4]]
        for line in text.splitlines()
        if line.startswith("| 4x1 ") or line.startswith("| 1x4 ")
    }
    assert rows["4x1"] == [
        "0.2818 s (3 runs), fastest; not told apart from tiny 2x2, 0.44 GiB",
        "0.0298 s (3 runs), fastest, winner, 0.70 GiB",
    ]
    assert rows["1x4"][1] == "0.0995 s (3 runs), 3.34x [2.53, 4.40], slower, 0.68 GiB"


def test_cards_of_one_gpu_and_setting_share_a_column_the_newest_shown_and_the_others_named():
    """Two H200 cards of the tiny sweep, a day apart, and a CPU card of it: two columns (one per GPU), the H200's the
    newer card's, the older named under the table with its answer."""
    import dataclasses

    h200, cpu = load(COMMITTED / "h200-tiny.json"), load(COMMITTED / "cpu-tiny.json")
    older = dataclasses.replace(h200, date="2026-11-01 10:00", name="older-sweep")
    text = merge([("h200-old.json", older), ("cpu-tiny.json", cpu), ("h200-tiny.json", h200)])
    header = next(line for line in text.splitlines() if line.startswith("| config "))
    columns = [c.strip() for c in header.strip("|").split(" | ")][1:]
    assert columns == ["NVIDIA H200 (h200-tiny.json, A)", "AMD EPYC (cpu-tiny.json, A)"]  # in the order given
    (named,) = [line for line in text.splitlines() if line.startswith("- h200-old.json")]
    assert "2026-11-01 10:00" in named and "the same GPU and setting as h200-tiny.json" in named
    assert sum(line.startswith("- ") and ".json (" in line for line in text.splitlines()) == 3  # every answer said
