"""One job on several processes: torchrun with the gloo backend on CPU, against one process at the same effective batch."""

from __future__ import annotations

from pipeline.config.compose import compose_job
from pipeline.jobs import runner
from pipeline.jobs.child import Job
from pipeline.jobs.task import job_spec

COMMON = ["train.steps=6", "measure.warmup_steps=1", "train.progress_bar=false", "gpu=cpu"]


def test_two_process_ddp_matches_one_process(tmp_path):
    spec = job_spec(compose_job("config", [*COMMON, "world_size=2", "launcher.kind=torchrun", "batch.split=2x1"]))
    record = runner.run_job("torchrun", spec, tmp_path / "ddp")
    assert record["status"] == "ok", record.get("error") or record.get("traceback")
    assert record["world_size"] == 2 and record["exitcode"] == 0

    single = Job(job_spec(compose_job("config", [*COMMON, "batch.split=2x2"])), tmp_path).run()
    assert single["status"] == "ok"
    ddp_losses = [s["loss"] for s in record["steps"]]
    one_losses = [s["loss"] for s in single["steps"]]
    assert len(ddp_losses) == len(one_losses) == 6
    worst = max(abs(a - b) / abs(b) for a, b in zip(ddp_losses, one_losses, strict=True))
    assert worst <= 1e-5, (ddp_losses, one_losses)
