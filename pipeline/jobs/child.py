"""The job process: build tokenizer, model, LoRA and data, apply the memory cap, train with TRL, write one record.

It runs in a fresh process (forked from a server that imported this module, or started with
`python -m pipeline.jobs.child SPEC.json WORKDIR`), so CUDA state, allocator caches and peak counters never carry
over between jobs and an OOM or crash ends only this job. Its output goes straight to the terminal. It writes
`steps.jsonl` (one line per optimizer step, as it goes) and `result.json` (at the end) into its work directory.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

import datasets
import peft
import torch
import transformers
import trl

from pipeline.build.dataset import build_dataset
from pipeline.build.device import GIB, resolve_placement, torch_dtype
from pipeline.build.lora import build_lora_config
from pipeline.build.model import build_model
from pipeline.build.tokenizer import build_tokenizer
from pipeline.build.trainer import build_sft_config, build_trainer
from pipeline.config.validate import ARCH_FIELDS
from pipeline.jobs import watchdog
from pipeline.jobs.files import RESULT_FILE, STEPS_FILE
from pipeline.measure import memory
from pipeline.measure.callback import StepMeter, StopTraining
from pipeline.measure.flops import count_params, flops_per_token

ARCH_KEYS = ("model_type", *ARCH_FIELDS, "max_position_embeddings", "rope_theta", "rms_norm_eps", "tie_word_embeddings")


def versions() -> dict[str, str]:
    return {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "trl": trl.__version__,
        "peft": peft.__version__,
        "datasets": datasets.__version__,
        "cuda": str(torch.version.cuda),
    }


class Job:
    """One training job, set up in small named steps."""

    def __init__(self, spec: dict, workdir: Path, writer: bool = True) -> None:
        self.writer = writer
        self.spec = spec
        self.cfg = spec["config"]
        self.workdir = workdir
        self.timings: dict[str, float] = {}
        self.result: dict = {"status": "failed", "pid": os.getpid(), "versions": versions()}

    def _timed(self, name: str, fn, *args, **kwargs):
        start = time.perf_counter()
        value = fn(*args, **kwargs)
        self.timings[f"{name}_s"] = time.perf_counter() - start
        return value

    def _setup_device(self) -> None:
        gpu, train = self.cfg["gpu"], self.cfg["train"]
        self.device_memory = memory.DeviceMemory()
        self.placement = resolve_placement(
            gpu["name"], gpu["memory_gib"], gpu["bf16"], gpu["peak_tflops"], train["dtype"], self.spec["gpu_profiles"]
        )
        cap = self.spec["cap_bytes"]
        if cap is None and self.placement.emulated and gpu["memory_gib"] and not self.spec.get("uncapped"):
            cap = int(gpu["memory_gib"] * GIB)
        self.cap_bytes = cap
        self.context_bytes = 0
        if self.placement.device == "cuda":
            plan = memory.apply_cuda_cap(cap, self.device_memory)
            self.context_bytes = plan.context_bytes
            self.result["cap_fraction"] = plan.fraction
        self.result["placement"] = self.placement.as_dict()

    def _setup_model(self) -> None:
        m = self.cfg["model"]
        self.tokenizer = self._timed("tokenizer", build_tokenizer, m["source"], m["name_or_path"])
        arch = {k: m[k] for k in ARCH_KEYS}
        if m["source"] == "config":
            arch["pad_token_id"] = self.tokenizer.pad_token_id
            arch["eos_token_id"] = self.tokenizer.eos_token_id
            arch["bos_token_id"] = None
        self.model = self._timed(
            "model_build",
            build_model,
            m["source"],
            m["name_or_path"],
            arch,
            torch_dtype(self.placement.dtype),
            self.placement.device,
            m["attn_implementation"],
            self.cfg["train"]["seed"],
        )
        if self.placement.device == "cuda":
            torch.cuda.synchronize()
            self.result["model_load_bytes"] = torch.cuda.memory_allocated()
        else:
            self.result["model_load_bytes"] = memory.rss_bytes()

    def _setup_data(self) -> None:
        b = self.cfg["batch"]
        needed = self.cfg["train"]["steps"] * b["effective"]
        self.dataset = self._timed(
            "data",
            build_dataset,
            self.cfg["data"],
            self.model.config.vocab_size,
            self.cfg["train"]["seed"],
            needed,
        )

    def _setup_trainer(self) -> None:
        split = self.spec["split"]
        lora = self.cfg["lora"]
        sft = build_sft_config(
            str(self.workdir / "trainer"),
            split["micro"],
            split["accumulation"],
            self.cfg["train"],
            self.placement.dtype,
            self.placement.device,
        )
        stop = {**(self.spec.get("stop") or {}), "context_bytes": self.context_bytes}
        steps_path = str(self.workdir / STEPS_FILE) if self.writer else None
        self.meter = StepMeter(self.placement.device == "cuda", steps_path, stop)
        peft_config = build_lora_config(lora["r"], lora["alpha"], lora["dropout"], lora["target_modules"], lora["bias"])
        self.trainer = self._timed(
            "trainer_build",
            build_trainer,
            self.model,
            self.tokenizer,
            self.dataset,
            sft,
            peft_config,
            [self.meter],
        )

    def _train(self) -> None:
        start = time.perf_counter()
        try:
            self.trainer.train()
        except StopTraining as stopped:
            self.result["stopped_within_step"] = str(stopped)  # the meter holds the reason; the step is not kept
        self.result["train_runtime_s"] = time.perf_counter() - start

    def _collect(self) -> None:
        model = self.trainer.model
        base, lora = count_params(model)
        steps = self.meter.steps
        seq_len = (sum(s["padded_tokens"] for s in steps) / max(1, sum(s["samples"] for s in steps))) if steps else 0
        m = model.base_model.model.config
        fpt = flops_per_token(
            base,
            lora,
            m.num_hidden_layers,
            seq_len,
            m.num_attention_heads,
            getattr(m, "head_dim", m.hidden_size // m.num_attention_heads),
            self.cfg["train"]["gradient_checkpointing"],
        )
        self.result.update(
            base_matmul_params=base,
            lora_params=lora,
            mean_padded_length=seq_len,
            model_flops_per_token=fpt.model,
            hardware_flops_per_token=fpt.hardware,
        )
        self._collect_memory()

    def _collect_memory(self) -> None:
        mem = {"model_load_bytes": self.result.get("model_load_bytes"), "context_bytes": self.context_bytes}
        if self.placement.device == "cuda":
            mem["peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
            mem["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
            mem["nvml_process_bytes"] = self.device_memory.process_bytes()
            mem["peak_bytes"] = mem["peak_reserved_bytes"] + self.context_bytes
        else:
            mem["peak_rss_bytes"] = memory.peak_rss_bytes()
            mem["peak_bytes"] = mem["peak_rss_bytes"]
        mem["cap_bytes"] = self.cap_bytes
        self.result["memory"] = mem

    def run(self) -> dict:
        self.result["child_start_time"] = time.time()
        try:
            self._setup_device()
            self._setup_model()
            self._setup_data()
            self._setup_trainer()
            self.result["setup_s"] = time.time() - self.result["child_start_time"]
            self._train()
            self._collect()
            reason = self.meter.stop_reason
            self.result["status"] = {"over-cap": "over-cap", "pruned": "pruned"}.get(reason, "ok")
            if reason:
                self.result["stopped"] = f"{reason} at step {self.meter.current_step}"
        except torch.OutOfMemoryError as err:
            self.result.update(status="oom", error=str(err).splitlines()[0])
            self.result["oom_step"] = getattr(getattr(self, "meter", None), "current_step", 0)
            self._free_after_oom()
        except Exception as err:  # noqa: BLE001 - any failure of the job is its result, recorded by the parent
            self.result.update(
                status="failed", error=f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
            )
            self.result["traceback"] = traceback.format_exc()
            print(self.result["traceback"], file=sys.stderr)
        self.result["timings"] = self.timings
        self.result["steps"] = getattr(getattr(self, "meter", None), "steps", [])
        return self.result

    def _free_after_oom(self) -> None:
        for name in ("trainer", "model"):
            if hasattr(self, name):
                delattr(self, name)
        if hasattr(self, "placement"):
            self._collect_memory()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def write_json(path: Path, record: dict) -> None:
    """Write atomically, so a reader never sees half a record."""
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp", encoding="utf-8") as tmp:
        json.dump(record, tmp, default=str)
    os.replace(tmp.name, path)


def main(spec: dict, workdir: str) -> None:
    """Entry of the job process (forkserver target, or each rank under torchrun: only rank 0 writes files)."""
    watchdog.follow(spec.get("owner_pid"))
    for key, value in spec.get("env", {}).items():
        os.environ[key] = value
    rank = int(os.environ.get("RANK", "0"))
    if "LOCAL_RANK" in os.environ and torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    path = Path(workdir)
    record = Job(spec, path, writer=rank == 0).run()
    record["world_size"] = int(os.environ.get("WORLD_SIZE", "1"))
    if rank == 0:
        write_json(path / RESULT_FILE, record)


if __name__ == "__main__":
    main(json.loads(Path(sys.argv[1]).read_text(encoding="utf-8")), sys.argv[2])
