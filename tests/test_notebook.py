"""docs/quickstart.ipynb runs end to end in a real kernel, on the CPU with the tiny model: the sweep's table, its two
plots, the study under a cap and the card. `make notebook` writes the executed copy back to docs/ (the repository
keeps its outputs)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[1] / "docs" / "quickstart.ipynb"
WRITE_BACK_ENV = "BATCH_SPLIT_NOTEBOOK"  # a folder: where the executed notebook is written (docs: the committed copy)


def outputs(cell, kind: str) -> list:
    return [o for o in cell.get("outputs", []) if kind in o.get("data", {}) or o.get("output_type") == kind]


def text_of(cell) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")


@pytest.mark.slow
def test_the_quickstart_notebook_runs_on_the_cpu(tmp_path):
    """No GPU here: the notebook's own parameters cell picks the tiny model and short jobs."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()

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
    study_answer = next(c for c in code if "found.answer.text" in c.source)
    assert text_of(study_answer).startswith("best feasible: tiny ")
    assert "python -m pipeline.train mem_cap=4GiB" in text_of(study_answer)
    card = next(c for c in code if "pipeline.card(" in c.source)
    assert "Setting: model tiny" in outputs(card, "text/markdown")[0]["data"]["text/markdown"]
    assert len(list((tmp_path / "cards").glob("*.json"))) == 1

    folder = os.environ.get(WRITE_BACK_ENV)
    if folder:
        target = NOTEBOOK.parents[1] / folder / NOTEBOOK.name  # relative to the repository, as make runs it
        nbformat.write(nb, tmp_path / NOTEBOOK.name)
        shutil.copyfile(tmp_path / NOTEBOOK.name, target)
