"""torch.compile under the meter, on the CPU (Inductor with the system's C++ compiler): every micro-batch is timed,
the compilation is recorded apart, and no compiling step enters the statistics. Slow: a cold compilation of the tiny
model takes one to three minutes on two cores."""

from __future__ import annotations

import pytest

from pipeline.config.validate import validate
from pipeline.jobs import runner
from pipeline.jobs.task import job_spec
from pipeline.measure.summary import steady_steps, summarize_job
from pipeline.records import JobResult, Status
from tests.helpers.configs import composed

pytestmark = pytest.mark.slow


def _run(tmp_path, name: str, *overrides: str) -> JobResult:
    cfg = composed(*overrides, f"paths.root={tmp_path / 'mlruns'}")
    result = runner.run_job("forkserver", job_spec(validate(cfg)), tmp_path / name)
    assert result.status is Status.OK, result.error
    return result


def test_a_compiled_job_is_measured_like_any_other(tmp_path, compose):
    cfg = compose(
        "batch.split=2x2",
        "train.torch_compile=whole",
        "train.steps=8",
        "measure.warmup_steps=2",
        f"paths.root={tmp_path / 'mlruns'}",
    )
    spec = job_spec(validate(cfg))
    assert spec.env["TORCHINDUCTOR_CACHE_DIR"] == str((tmp_path / "mlruns" / "compile-cache").resolve())
    result = runner.run_job("forkserver", spec, tmp_path / "job")
    assert result.status is Status.OK, result.error
    compiling = [s.step for s in result.steps if s.compile_s > 0]
    assert compiling and compiling[0] == 1  # the first forward and backward compile
    assert result.timings["compile_s"] == pytest.approx(sum(s.compile_s for s in result.steps))
    steady = steady_steps(result, 2)
    assert steady and all(s.compile_s == 0 for s in steady)
    # the meter's hooks ran eagerly on every micro-batch: two per step, each with its forward and backward timed
    assert all(s.micro_batches == 2 and s.forward_s > 0 and s.backward_s > 0 for s in result.steps)
    summary = summarize_job(result, 2, 0.95)
    assert summary.seconds["compile"] > 10 * summary.median  # compilation is a fixed cost apart, not a step
    assert any((tmp_path / "mlruns" / "compile-cache").iterdir())  # the shared cache was written
    assert result.compile_note.startswith("whole: ")


def test_regional_compilation_trains_what_eager_trains(tmp_path):
    """Each decoder layer compiled on its own (`train.torch_compile=true` is regional): the per-step losses are the
    eager job's within 1e-4, the compilation is the first step's and recorded apart, and the layers share graphs
    (four layers compile two graphs: the first layer's input needs no gradient, the others' do)."""
    common = ["batch.split=2x2", "model.num_hidden_layers=4", "train.steps=6", "measure.warmup_steps=2"]
    eager = _run(tmp_path, "eager", *common)
    regional = _run(tmp_path, "regional", *common, "train.torch_compile=true")
    assert eager.compile_note is None and eager.timings["compile_s"] == 0
    assert regional.compile_note == "regional (4 layers): 2 graphs compiled"
    assert [s.step for s in regional.steps if s.compile_s > 0] == [1]
    assert regional.compile_s == pytest.approx(regional.steps[0].compile_s) and regional.steps[0].compile_s > 1
    assert regional.sft_kwargs["torch_compile"] is False  # the Trainer compiles nothing itself
    pairs = list(zip((s.loss for s in regional.steps), (s.loss for s in eager.steps), strict=True))
    assert len(pairs) == 6
    worst = max(abs(a - b) / abs(b) for a, b in pairs)
    assert worst <= 1e-4, f"regional deviates from eager by {worst:.2e}"
