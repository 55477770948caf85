"""The Hydra task: one job, run in its own process and recorded as one MLflow run.

The parent never imports torch: it opens the run, starts the child, waits, and logs what the child returned (or,
for a child that died, what it had written so far). Inside a multirun the run is nested under the sweep's parent
run, whose id the sweep callback puts in the environment.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from pipeline.config.compose import CONF_DIR
from pipeline.config.validate import parse_size, validate
from pipeline.jobs import runner
from pipeline.jobs.summary import series, summarize_job
from pipeline.tracking.store import PARENT_ENV, STATUS_TAG, SWEEP_ENV, SWEEP_TAG, Tracker, flatten


def job_name(cfg: DictConfig) -> str:
    name = f"{cfg.model.name} {cfg.batch.split}"
    return f"{name} #{cfg.repeat}" if cfg.repeats > 1 else name


@functools.cache
def gpu_profiles() -> dict[str, dict]:
    """Every card profile in conf/gpu (read once), so a job can find the peak of the device it really runs on."""
    profiles = {}
    for path in sorted((CONF_DIR / "gpu").glob("*.yaml")):
        node = OmegaConf.load(path)
        if node.get("memory_gib"):
            profiles[path.stem] = {"memory_gib": node.memory_gib, "peak_tflops": node.peak_tflops}
    return profiles


def job_spec(cfg: DictConfig) -> dict:
    """What the child needs: the resolved config, the parsed split, the cap in bytes and the card profiles."""
    split = validate(cfg)
    return {
        "gpu_profiles": gpu_profiles(),
        "config": OmegaConf.to_container(cfg, resolve=True),
        "split": {"micro": split.micro, "accumulation": split.accumulation},
        "cap_bytes": parse_size(cfg.mem_cap) if cfg.mem_cap else None,
    }


def derived_params(spec: dict, record: dict) -> dict[str, object]:
    cfg = spec["config"]
    placement = record.get("placement") or {}
    params = {
        "micro_batch": spec["split"]["micro"],
        "accumulation": spec["split"]["accumulation"],
        "effective_batch": cfg["batch"]["effective"],
        "world_size": cfg["world_size"],
        "device": placement.get("device"),
        "device_name": placement.get("device_name"),
        "dtype_resolved": placement.get("dtype"),
        "emulated_gpu": placement.get("emulated"),
        "lora_params": record.get("lora_params"),
        "base_matmul_params": record.get("base_matmul_params"),
    }
    params.update({f"version.{k}": v for k, v in (record.get("versions") or {}).items()})
    return {k: v for k, v in params.items() if v is not None}


def run(
    cfg: DictConfig,
    *,
    stop: dict | None = None,
    parent_id: str | None = None,
    tags: dict | None = None,
    name: str | None = None,
    uncapped: bool = False,
) -> dict:
    """Run one job and return its summary (the sweep callback and the study rank these). `stop` lets the study end
    it early (over the cap, or slow); `parent_id` nests its run elsewhere than the sweep's; `uncapped` lifts every
    cap (the predictor's probes measure what a config needs, not whether it fits)."""
    spec = job_spec(cfg)
    if uncapped:
        spec["cap_bytes"] = None
        spec["uncapped"] = True
    if stop:
        spec["stop"] = stop
    tracker = Tracker(cfg.tracking.uri, cfg.tracking.experiment, cfg.tracking.artifact_root)
    sweep_id = os.environ.get(SWEEP_ENV) or cfg.sweep_id
    run_tags = {STATUS_TAG: "running", "split": cfg.batch.split, "model": cfg.model.name, "repeat": cfg.repeat}
    run_tags.update(tags or {})
    if sweep_id:
        run_tags[SWEEP_TAG] = sweep_id
    name = name or job_name(cfg)
    run_id = tracker.start(name, tags=run_tags, parent_id=parent_id or os.environ.get(PARENT_ENV))
    tracker.params(run_id, flatten(spec["config"]))
    tracker.artifact_text(run_id, "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
    workdir = Path(tempfile.mkdtemp(prefix="batch-split-job-"))
    status = "FAILED"
    try:
        print(f"[job] {name}: starting ({cfg.launcher.kind}), MLflow run {run_id}", flush=True)
        record = runner.run_job(
            cfg.launcher.kind,
            spec,
            workdir,
            cfg.launcher.timeout_s,
            on_start=lambda pid: (
                print(f"[job] {name}: pid {pid}", flush=True),
                tracker.tags(run_id, {"pid": pid}),
            ),
        )
        summary = summarize_job(record, cfg.measure.warmup_steps, cfg.measure.confidence)
        numbers = {k: v for k, v in summary.items() if isinstance(v, int | float) and not isinstance(v, bool)}
        tracker.params(run_id, derived_params(spec, record))
        tracker.metrics(run_id, numbers, series(record))
        end_tags = {STATUS_TAG: record["status"], "verdict": summary["verdict"]}
        if record.get("error"):
            end_tags["error"] = record["error"][:5000]
        if record.get("stopped"):
            end_tags["stopped"] = record["stopped"]
        if record.get("oom_step") is not None:
            end_tags["oom_step"] = record["oom_step"]
        emulated = (record.get("placement") or {}).get("emulated")
        if emulated:
            device = record["placement"]["device_name"]
            end_tags["memory_note"] = f"memory emulated as {emulated}, speed measured on {device}"
        tracker.tags(run_id, end_tags)
        tracker.artifact_json(run_id, "result.json", record)
        status = "FINISHED" if record["status"] in ("ok", "oom", "over-cap", "pruned") else "FAILED"
        line = f"step {summary.get('step_time_median_s', float('nan')):.4f} s" if record["status"] == "ok" else ""
        print(f"[job] {name}: {record['status']} {line} {record.get('error', '')}".rstrip(), flush=True)
        return {
            "run_id": run_id,
            "name": name,
            "status": record["status"],
            "summary": summary,
            "stopped": record.get("stopped"),
            "error": record.get("error"),
            "placement": record.get("placement"),
        }
    except KeyboardInterrupt:
        status = "KILLED"
        tracker.tags(run_id, {STATUS_TAG: "killed"})
        raise
    finally:
        tracker.end(run_id, status)
        shutil.rmtree(workdir, ignore_errors=True)
