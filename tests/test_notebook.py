"""docs/quickstart.ipynb runs end to end in a real kernel, on the CPU with the tiny model, from a folder without the
repository (as on a fresh Colab runtime: its first cell clones it, here from this checkout): the sweep's table, its
two plots, the study under a cap and the card, and no output names the folder it ran in. Inside a copy of the
repository (its root or docs/) its first cell works there; with no repository to clone it stops in one line. `make
notebook` writes the executed copy back to docs/ (the repository keeps its outputs)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

NOTEBOOK = Path(__file__).resolve().parents[1] / "docs" / "quickstart.ipynb"
WRITE_BACK_ENV = "BATCH_SPLIT_NOTEBOOK"  # a folder: where the executed notebook is written (docs: the committed copy)


def outputs(cell, kind: str) -> list:
    return [o for o in cell.get("outputs", []) if kind in o.get("data", {}) or o.get("output_type") == kind]


def text_of(cell) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")


REPO = NOTEBOOK.parents[1]


def test_the_first_cell_does_nothing_inside_a_copy_of_the_repository(tmp_path):
    """Run where the repository is (a clone): no clone, no change of folder, nothing installed."""
    first = next(c for c in nbformat.read(NOTEBOOK, as_version=4).cells if c.cell_type == "code")
    probe = f"{first.source}\nimport os; print(os.getcwd())"
    env = {**os.environ, "BATCH_SPLIT_REPOSITORY": f"file://{tmp_path / 'nothing-here'}"}
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == str(REPO), done.stderr[-2000:]
    assert not (REPO / "batch-split").exists()


def test_the_first_cell_works_in_the_copy_above_the_folder_it_runs_in():
    """Jupyter opened on docs/quickstart.ipynb starts in docs/: the cell finds the copy above (its pyproject.toml),
    works in its root and clones nothing, whatever BATCH_SPLIT_REPOSITORY says or whether it is set."""
    first = next(c for c in nbformat.read(NOTEBOOK, as_version=4).cells if c.cell_type == "code")
    probe = f"{first.source}\nimport os; print(os.getcwd())"
    env = {k: v for k, v in os.environ.items() if k != "BATCH_SPLIT_REPOSITORY"} | {"GIT_TERMINAL_PROMPT": "0"}
    docs = REPO / "docs"
    done = subprocess.run([sys.executable, "-c", probe], cwd=docs, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == str(REPO), done.stderr[-2000:]
    assert not (docs / "batch-split").exists()


def test_the_first_cell_clones_the_repository_set_and_works_in_the_clone(tmp_path):
    """A fresh runtime with BATCH_SPLIT_REPOSITORY set (this checkout, committed): cloned into batch-split/, worked in;
    run again, the cell finds that clone instead of cloning twice."""
    first = next(c for c in nbformat.read(NOTEBOOK, as_version=4).cells if c.cell_type == "code")
    probe = f"{first.source}\nimport os; print(os.getcwd())"
    env = {**os.environ, "BATCH_SPLIT_REPOSITORY": f"file://{REPO}", "GIT_TERMINAL_PROMPT": "0"}
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert done.returncode == 0 and done.stdout.strip() == str(tmp_path / "batch-split"), done.stderr[-2000:]
    assert (tmp_path / "batch-split" / "pipeline").is_dir() and [p.name for p in tmp_path.iterdir()] == ["batch-split"]


@pytest.mark.parametrize("repository", [None, "file:///nothing/here/batch-split"])
def test_the_first_cell_without_a_copy_stops_with_one_line(tmp_path, monkeypatch, repository):
    """A fresh runtime with no repository to clone (none set, or one that git cannot clone): the first cell stops
    Run all in a real kernel with one line that says what to set, no traceback, and nothing cloned."""
    nb = nbformat.v4.new_notebook()
    first = next(c for c in nbformat.read(NOTEBOOK, as_version=4).cells if c.cell_type == "code")
    nb.cells = [nbformat.v4.new_code_cell(first.source), nbformat.v4.new_code_cell("print('ran on')")]
    monkeypatch.delenv("BATCH_SPLIT_REPOSITORY", raising=False)
    monkeypatch.setenv("GIT_TERMINAL_PROMPT", "0")
    if repository:
        monkeypatch.setenv("BATCH_SPLIT_REPOSITORY", repository)
    client = NotebookClient(nb, timeout=60, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    with pytest.raises(CellExecutionError):
        client.execute()
    [error] = nb.cells[0].outputs
    assert error.output_type == "error" and len(error.traceback) == 1, error
    line = error.traceback[0]
    assert "\n" not in line and "REPOSITORY" in line and "git URL" in line, line
    if repository:
        assert f"git clone {repository} failed" in line, line
    assert nb.cells[1].outputs == [] and not (tmp_path / "batch-split").exists()


@pytest.mark.slow
def test_the_quickstart_notebook_runs_on_the_cpu(tmp_path, monkeypatch):
    """No GPU here: the notebook's own parameters cell picks the tiny model and short jobs. It starts in an empty
    folder: its first cell clones the repository (this checkout, committed) and works in the clone."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    monkeypatch.setenv("BATCH_SPLIT_REPOSITORY", f"file://{REPO}")
    NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    clone = tmp_path / "batch-split"
    assert (clone / "pipeline").is_dir() and (clone / "mlruns" / "mlflow.db").is_file()

    code = [c for c in nb.cells if c.cell_type == "code"]
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]
    assert "train.steps=6" in outputs(code[1], "text/plain")[0]["data"]["text/plain"]
    sweep_table = next(c for c in code if "pipeline.sweep(" in c.source)
    html = outputs(sweep_table, "text/html")[0]["data"]["text/html"]
    for split in ("1x4", "2x2", "4x1"):
        assert f"tiny {split}" in html
    assert "[job] tiny 2x2 #2: ok" in text_of(sweep_table)  # three paired rounds ran
    answer = next(c for c in code if "result.answer.text" in c.source)
    assert "python -m pipeline.train batch.split=" in text_of(answer) and "MLflow parent run:" in text_of(answer)
    plots = next(c for c in code if "plt.show()" in c.source)
    assert len(outputs(plots, "image/png")) == 1
    claim = text_of(answer).splitlines()[1]
    assert claim.startswith("tiny ") or claim.startswith("no speed-up is claimed: "), claim
    study_answer = next(c for c in code if "found.answer.text" in c.source)
    assert text_of(study_answer).startswith("best feasible: tiny ")
    assert "python -m pipeline.train mem_cap=4GiB" in text_of(study_answer)
    card = next(c for c in code if "pipeline.card(" in c.source)
    assert "Setting: model tiny" in outputs(card, "text/markdown")[0]["data"]["text/markdown"]
    assert "Recorded: MLflow run " in outputs(card, "text/markdown")[0]["data"]["text/markdown"]
    assert len(list((clone / "cards").glob("*.json"))) == 1
    kept = nbformat.writes(nb)
    assert str(tmp_path) not in kept and "/tmp/" not in kept  # no output names the folder it ran in

    folder = os.environ.get(WRITE_BACK_ENV)
    if folder:
        target = NOTEBOOK.parents[1] / folder / NOTEBOOK.name  # relative to the repository, as make runs it
        nbformat.write(nb, tmp_path / NOTEBOOK.name)
        shutil.copyfile(tmp_path / NOTEBOOK.name, target)
