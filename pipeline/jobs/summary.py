"""Turn a job's raw record (per-step series, memory, placement) into the figures people compare."""

from __future__ import annotations

from pipeline.measure import memory as mem
from pipeline.measure.flops import mfu
from pipeline.measure.stats import summarize

GIB = 2**30
PHASES = ("forward", "backward", "optimizer", "data", "other")


def summarize_job(record: dict, warmup_steps: int, confidence: float) -> dict:
    """Flat metrics with MLflow-friendly names (`step_time_median_s`, `peak_reserved_gib`, ...)."""
    steps = record.get("steps", [])
    steady = [s for s in steps if s["step"] > warmup_steps]
    out: dict[str, float | int | str | None] = {"steps_done": len(steps), "steady_steps": len(steady)}
    summary = summarize([s["step_time_s"] for s in steady], confidence)
    if summary is not None:
        out.update(summary.as_dict("step_time"))
        total_time = sum(s["step_time_s"] for s in steady)
        tokens = sum(s["tokens"] for s in steady)
        padded = sum(s["padded_tokens"] for s in steady)
        samples = sum(s["samples"] for s in steady)
        out["tokens_per_s"] = tokens / total_time
        out["padded_tokens_per_s"] = padded / total_time
        out["samples_per_s"] = samples / total_time
        for phase in PHASES:
            out[f"{phase}_median_s"] = summarize([s[f"{phase}_s"] for s in steady], confidence).median
        peak = (record.get("placement") or {}).get("peak_tflops")
        if record.get("model_flops_per_token"):
            value = mfu(out["tokens_per_s"], record["model_flops_per_token"], peak)
            out["mfu"] = value
    memory = record.get("memory") or {}
    for key in (
        "peak_reserved",
        "peak_allocated",
        "peak_rss",
        "model_load",
        "context",
        "nvml_process",
        "cap",
    ):
        value = memory.get(f"{key}_bytes")
        if value is not None:
            out[f"{key}_gib"] = value / GIB
    if memory.get("peak_bytes") is not None:
        out["peak_gib"] = memory["peak_bytes"] / GIB
    out["runtime_s"] = record.get("train_runtime_s")
    out["wall_s"] = record.get("wall_s")
    out["spawn_s"] = record.get("spawn_s")
    out["setup_s"] = record.get("setup_s")
    if steps:
        out["final_loss"] = steps[-1]["loss"]
    out["verdict"] = mem.verdict(record.get("status", "failed"), memory.get("peak_bytes"), memory.get("cap_bytes"))
    return out


def series(record: dict) -> dict[str, list[tuple[int, float]]]:
    """Per-step series for MLflow charts: loss, step time and its phases."""
    keys = ["loss", "step_time_s", "grad_norm", "learning_rate", *(f"{p}_s" for p in PHASES)]
    return {key: [(s["step"], s[key]) for s in record.get("steps", []) if key in s] for key in keys}
