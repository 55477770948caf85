"""The answer as code: a config written as a plain TRL script (`python -m pipeline.export`, a study's answer, a
sweep's winner) trains what the job of the same config trains, in a fresh interpreter that cannot import the
package."""

from __future__ import annotations

import ast
import json

import pytest

from pipeline.answer.code import export, export_answer, export_winner
from pipeline.answer.script import script_text
from pipeline.compare.paired import Judgement
from pipeline.config.errors import ConfigError
from pipeline.config.validate import validate
from pipeline.jobs.child import Job
from pipeline.jobs.task import job_spec
from pipeline.records import RunKind, Status
from pipeline.render.rows import Criteria, comparison_rows
from pipeline.tracking.runs import OVERRIDES
from pipeline.tracking.store import Tracker
from tests.helpers.cli import run_cli, run_python
from tests.helpers.configs import composed
from tests.helpers.records import recorded

QUIET = ["train.progress_bar=false", "train.steps=6", "measure.warmup_steps=1"]
# without the package: a script that imported anything of it would fail here, not pass by being installed
NO_PACKAGE = "import runpy, sys; sys.modules['pipeline'] = None; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"


def job_losses(tmp_path, overrides: list[str]) -> list[float]:
    """The job of `overrides`, run by the job process's own code (in this process)."""
    workdir = tmp_path / "job"
    workdir.mkdir(parents=True, exist_ok=True)
    result = Job(job_spec(validate(composed(*overrides))), workdir).run()
    assert result.status is Status.OK, result.traceback
    return [s.loss for s in result.steps]


def script_losses(tmp_path, path) -> list[float]:
    """The script run as a user runs it, in a fresh interpreter (the package made unimportable)."""
    log = tmp_path / "steps.jsonl"
    proc = run_python(
        "-c", NO_PACKAGE, str(path), f"--log={log}", f"--output-dir={tmp_path / 'out'}", cwd=tmp_path, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "steps, last loss" in proc.stdout, proc.stdout
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert records[-1] == {"peak_reserved_bytes": None}  # the last line: the peak (none on the CPU)
    return [r["loss"] for r in records[:-1]]


@pytest.mark.parametrize(
    "knobs",
    [
        # accumulation with checkpointing and the model's own loss; and adapters in bf16 on padded lengths
        ["batch.split=2x2", "train.gradient_checkpointing=true", "train.loss=model"],
        pytest.param(
            [
                "batch.split=4x1",
                "train.dtype=bf16",
                "train.adapter_dtype=compute",
                "data.distribution=uniform",
                "data.min_length=16",
            ],
            marks=pytest.mark.slow,
        ),
    ],
)
def test_the_exported_script_trains_the_jobs_losses(tmp_path, knobs):
    overrides = [*QUIET, *knobs]
    exported = export(overrides)
    assert exported.path.parent.resolve() == tmp_path / "mlruns" / "scripts" and exported.path.is_file()
    assert exported.command == "python -m pipeline.train " + " ".join(overrides)
    theirs = script_losses(tmp_path, exported.path)
    ours = job_losses(tmp_path, overrides)
    assert len(theirs) == len(ours) == 6
    worst = max(abs(a - b) / abs(b) for a, b in zip(theirs, ours, strict=True))
    assert worst <= 1e-4, (worst, theirs, ours)
    # 1e-4 tells configs apart: another seed trains other losses by more
    other = job_losses(tmp_path / "seed", [*overrides, "train.seed=7"])
    assert max(abs(a - b) / abs(b) for a, b in zip(other, ours, strict=True)) > 1e-4


@pytest.mark.slow
def test_a_packed_script_whose_data_runs_out_trains_the_jobs_whole_batches(tmp_path):
    """10 records packed into 10 sequences for 6 steps of 4: the job keeps 8 (`whole_sequences`), and so does the
    script, step for step."""
    path = tmp_path / "ten.jsonl"
    path.write_text("".join(json.dumps({"text": chr(97 + i) * 59}) + "\n" for i in range(10)), encoding="utf-8")
    overrides = [*QUIET, "data=jsonl", f"data.path={path}", "train.padding=packing", "train.max_length=64"]
    exported = export(overrides)
    assert "    whole_sequences(trainer)" in exported.text
    theirs = script_losses(tmp_path, exported.path)
    ours = job_losses(tmp_path, overrides)
    assert len(theirs) == len(ours) == 6
    assert max(abs(a - b) / abs(b) for a, b in zip(theirs, ours, strict=True)) <= 1e-4, (theirs, ours)


@pytest.mark.slow
def test_a_script_on_tool_calling_chats_trains_the_jobs_losses(tmp_path):
    """Arguments as an object in one record and as text in the next: the script reads them as the job does
    (`calls_as_text`), step for step."""
    path = tmp_path / "calls.jsonl"
    rows = []
    for i in range(8):
        arguments = {"n": i} if i % 2 else json.dumps({"n": i})
        call = {"type": "function", "function": {"name": "count", "arguments": arguments}}
        turns = [
            {"role": "user", "content": f"count {i}"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
        ]
        rows.append(json.dumps({"messages": [*turns, {"role": "tool", "content": str(i)}]}) + "\n")
    path.write_text("".join(rows), encoding="utf-8")
    overrides = [*QUIET, "data=jsonl", f"data.path={path}"]
    exported = export(overrides)
    assert "def calls_as_text(" in exported.text
    theirs = script_losses(tmp_path, exported.path)
    ours = job_losses(tmp_path, overrides)
    assert len(theirs) == len(ours) > 0
    assert max(abs(a - b) / abs(b) for a, b in zip(theirs, ours, strict=True)) <= 1e-4, (theirs, ours)


def test_a_script_holds_the_knobs_of_its_config_and_nothing_of_the_package(tmp_path, compose):
    overrides = ["train.torch_compile=regional", "train.loss=compiled", "train.optimizer_step=compiled"]
    text = export(overrides).text
    tree = ast.parse(text)  # it is valid Python
    imported = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not any(name.split(".")[0] == "pipeline" for name in imported), imported
    for line in (
        "capture_loss(trainer, 'compiled')",
        "compile_optimizer_step(trainer, 'compiled')",
        "compile_layers(trainer.model, 'default')",
        "logging_nan_inf_filter=False,",
    ):
        assert line in text, line
    # the plain setting has none of them, and keeps TRL's own NaN filter
    plain = export([]).text
    assert "capture_loss" not in plain and "compile_layers" not in plain and "compile_optimizer_step" not in plain
    assert "logging_nan_inf_filter=True," in plain
    # regional CUDA graphs name their mode; the architecture is the job's (jobs.child passes the same fields)
    graphs = compose("train.torch_compile=regional", "train.compile_mode=max-autotune-no-cudagraphs")
    spec = job_spec(validate(graphs))
    sft = {"use_cpu": True, "max_steps": 3}
    assert "compile_layers(trainer.model, 'max-autotune-no-cudagraphs')" in script_text(
        spec.config, sft, spec.name, spec.config_id, "python -m pipeline.train ..."
    )


def test_the_export_command_refuses_bad_input_in_one_line_and_writes_nothing(tmp_path):
    proc = run_cli("train.loss=fused", cwd=tmp_path, module="pipeline.export")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == "error: train.loss: got 'fused'; accepted: trl, model, compiled, liger"
    assert not (tmp_path / "mlruns").exists()
    proc = run_cli("batch.split=2x2", "--stdout", cwd=tmp_path, module="pipeline.export")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith('"""Plain TRL: tiny 2x2') and "per_device_train_batch_size=2," in proc.stdout
    # an answer whose script cannot be written still stands, and says why
    (tmp_path / "blocked").write_text("")
    exported, shown = export_answer(["paths.root=blocked"], None)
    assert exported is None and shown.startswith("not written ("), shown
    with pytest.raises(ConfigError):
        export(["train.optimizer_step=graph"])  # a CUDA graph on the CPU


def test_a_sweep_names_its_winner_with_the_reproduce_line_and_script(tmp_path):
    """The winner's line comes from its own run: its overrides (recorded by the job) and the device it ran on."""
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "batch-split", str(tmp_path / "artifacts"))
    overrides = "batch.effective=8 batch.split=8x1 train.steps=6"
    ids = {}
    for name in ("tiny 8x1", "tiny 1x8"):
        ids[name] = tracker.start(name, tags={OVERRIDES: overrides} if name == "tiny 8x1" else {})
        tracker.params(ids[name], {"device": "cpu", "dtype_resolved": "fp32"})
    jobs = [
        recorded(name, name, [base * (1 + 0.01 * r)] * 8, repeat=r, kind=RunKind.JOB)
        for r in range(4)
        for name, base in (("tiny 8x1", 0.10), ("tiny 1x8", 0.15))
    ]
    jobs = [j.__class__(**{**j.__dict__, "run_id": ids[j.name]}) for j in jobs]
    rows = comparison_rows(jobs, Criteria())
    assert {r.name: r.judgement for r in rows} == {"tiny 8x1": Judgement.WINNER, "tiny 1x8": Judgement.SLOWER}
    lines, exported = export_winner(tracker, rows)
    assert lines == [
        "winner: tiny 8x1",
        f"  python -m pipeline.train {overrides}",
        f"  script: {exported.path}  (the same in plain TRL: python {exported.path})",
    ]
    assert "per_device_train_batch_size=8," in exported.text and "use_cpu=True," in exported.text
    # no winner (a tie, or one run each): no line
    tie = [j.__class__(**{**j.__dict__, "summary": jobs[0].summary}) for j in jobs]
    assert export_winner(tracker, comparison_rows(tie, Criteria())) == ([], None)
