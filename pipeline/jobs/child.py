"""The job process: build tokenizer, model, LoRA and data, apply the memory cap, train with TRL, write one record.

It runs in a fresh process (forked from a server that imported this module, or started with
`python -m pipeline.jobs.child SPEC.json WORKDIR`), so CUDA state, allocator caches and peak counters never carry
over between jobs and an OOM or crash ends only this job. Its output goes to its log, `job.log` (`jobs.joblog`),
its libraries' warnings counted (`jobs.library_warnings`). It writes `steps.jsonl` (one line per optimizer step, as
it goes) and `result.json` (at the end) into its work directory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import sys
import time
import traceback
from pathlib import Path

import torch

from pipeline import knobs
from pipeline.builders.batches import whole_sequences
from pipeline.builders.dataset import build_dataset, records_at, token_count, truncated
from pipeline.builders.device import resolve_placement, torch_dtype
from pipeline.builders.distributed import init_process_group, leave_process_group, local_rank, world_size
from pipeline.builders.lora import build_lora_config
from pipeline.builders.model import build_model
from pipeline.builders.sft_args import sft_kwargs
from pipeline.builders.tokenizer import build_tokenizer
from pipeline.builders.trainer import build_trainer
from pipeline.config.choices import CPU
from pipeline.config.schema import typed
from pipeline.jobs import joblog, library_warnings, ranks, watchdog
from pipeline.jobs.child_setup import ignore_ctrl_c, no_process_locks, quiet, versions, write_json
from pipeline.jobs.files import RESULT_FILE
from pipeline.jobs.instruments import Instruments, instruments
from pipeline.measure import memory
from pipeline.measure.busy import BusyWindow
from pipeline.measure.callback import StepMeter, StopTraining
from pipeline.measure.compiled import CompileWatch
from pipeline.measure.flops import flops_fields
from pipeline.measure.host import HostWatch
from pipeline.measure.profile import ProfileWindow
from pipeline.records import JobResult, JobSpec, Status, Step

watchdog.quiet_orphans()  # the fork server imports this module: a job whose command is gone before it began
ignore_ctrl_c()


class Job:
    """One training job, set up in small named steps; `run` returns its JobResult whatever happens."""

    def __init__(self, spec: JobSpec, workdir: Path, writer: bool = True) -> None:
        self.writer = writer
        self.spec = spec
        self.cfg = spec.config
        self.workdir = workdir
        self.timings: dict[str, float] = {}
        self.meter: StepMeter | None = None
        self.context_bytes = 0
        self.model_load_bytes: int | None = None
        self.device_memory: memory.DeviceMemory | None = None
        self.placement = None
        self.sft_kwargs: dict | None = None
        self.busy: BusyWindow | None = None
        self.profiler: ProfileWindow | None = None
        self.host: HostWatch | None = None
        self.compiled: str | None = None  # what is compiled, for the compile note
        self.compile_watch: CompileWatch | None = None
        self.backend: str | None = None  # the ranks' process group (a torchrun job): nccl or gloo
        self.first_records = None  # the records of the run's longest micro-batch, where its spec names one
        self.instruments: Instruments | None = None

    def _timed(self, name: str, fn, *args, **kwargs):
        start = time.perf_counter()
        value = fn(*args, **kwargs)
        self.timings[f"{name}_s"] = time.perf_counter() - start
        return value

    def _setup_device(self) -> None:
        self.device_memory = memory.DeviceMemory()
        precision = knobs.role(knobs.KnobRole.DTYPE).of(self.cfg)
        self.placement = resolve_placement(self.cfg.gpu, precision, self.spec.gpu_profiles)
        cuda = self.placement.device == "cuda"
        # the ranks' process group before the cap: NCCL's communicator memory is then part of the measured context
        self.backend = init_process_group(cuda, self.cfg.launcher.timeout_s)
        if cuda:
            cap = self.spec.cap_bytes if self.spec.enforce_cap else None
            self.context_bytes = memory.apply_cuda_cap(cap, self.device_memory).context_bytes
        elif self.cfg.measure.cpu_threads:  # a second thread waits on whatever else the cores run: steps then vary
            torch.set_num_threads(self.cfg.measure.cpu_threads)

    def _setup_model(self) -> None:
        self.tokenizer = self._timed("tokenizer", build_tokenizer, self.cfg.model)
        dtype = torch_dtype(self.placement.dtype)
        self.model = self._timed(
            "model_build",
            build_model,
            self.cfg.model,
            self.tokenizer,
            dtype,
            self.placement.device,
            self.cfg.train.seed,
        )
        if self.placement.device == "cuda":
            torch.cuda.synchronize()
            self.model_load_bytes = torch.cuda.memory_allocated()
        else:
            self.model_load_bytes = memory.rss_bytes()

    def _setup_data(self) -> None:
        """The samples the steps consume (effective batch = micro x accumulation x world size), and with packing
        the records that fill as many sequences of max_length tokens: no more is read."""
        train = self.cfg.train
        needed = train.steps * self.cfg.batch.effective
        packing = knobs.packs(train)
        self.dataset = self._timed(
            "data",
            build_dataset,
            self.cfg.data,
            self.model.config.vocab_size,
            train.seed,
            needed,
            functools.partial(token_count, self.tokenizer, train.max_length) if packing else None,
            needed * train.max_length if packing else 0,
            self.cfg.batch.effective,
        )
        if knobs.truncates(train):
            self.dataset = truncated(self.dataset, self.tokenizer, train.max_length)
        batch = self.spec.first_batch
        if batch is not None:  # the run's longest micro-batch: its records, in the order of its rows
            indices = [i for row in batch.rows for i in row]
            vocab = self.model.config.vocab_size
            self.first_records = records_at(self.cfg.data, vocab, train.seed, batch.of_records, indices)

    def _setup_trainer(self) -> None:
        self.sft_kwargs = sft_kwargs(
            self.spec.micro,
            self.spec.accumulation,
            self.cfg.train,
            self.placement.dtype,
            self.placement.device,
            world_size(),
            self.cfg.launcher.timeout_s,
        )
        cuda, nvml, ranks = self.placement.device == "cuda", self.device_memory.handle, bool(self.backend)
        tools = instruments(
            self.spec, self.workdir, self.writer, cuda, self.context_bytes, nvml, ranks, self.first_records
        )
        self.instruments = tools
        self.meter, self.busy, self.host, self.profiler = tools.meter, tools.busy, tools.host, tools.profiler
        model, peft_config = self._timed("adapters", self._adapters)
        self.trainer = self._timed(
            "trainer_build",
            build_trainer,
            model,
            self.tokenizer,
            self.dataset,
            str(self.workdir / "trainer"),
            self.sft_kwargs,
            peft_config,
            tools.callbacks,
        )
        if knobs.packs(self.cfg.train):  # the packed sequences: whole batches of them, as records are
            whole_sequences(self.trainer)
        tools.bind(self.trainer)

    def _adapters(self) -> tuple:
        """The model and LoRA config the trainer gets, as the speed knobs leave them (adapters in the compute dtype:
        a PeftModel built here, then no config)."""
        model, lora = self.model, build_lora_config(self.cfg.lora)
        for knob in knobs.registry():
            model, lora = knob.adapters(model, lora, self.cfg.train, self.placement.dtype)
        return model, lora

    def _setup_compile(self) -> None:
        """Each speed knob's change to the built trainer (regional compilation: the Trainer itself compiles only the
        whole model; the LM head and loss; the optimizer step), watched for compilation where one compiles."""
        what = [note for knob in knobs.registry() if (note := knob.trainer(self.trainer, self.cfg.train))]
        if what:
            self.compiled, self.compile_watch = ", ".join(what), CompileWatch()

    def _train(self) -> str | None:
        """Train; the reason the meter stopped it within a step, if it did."""
        start = time.perf_counter()
        try:
            with self.compile_watch or contextlib.nullcontext():
                self.trainer.train()
            return None
        except StopTraining as stopped:
            return str(stopped)  # the meter holds the reason; the step is not kept
        finally:
            self.timings["runtime_s"] = time.perf_counter() - start
            self.timings["compile_s"] = self.meter.compile_s
            started = self.timings.get("child_start")
            if self.meter.first_step_at is not None and started is not None:  # what setup costs before training
                self.timings["first_step_s"] = self.meter.first_step_at - started

    def run(self) -> JobResult:
        started = time.time()
        self.timings["child_start"] = started
        fields: dict = {}
        try:
            self._setup_device()
            self._setup_model()
            self._setup_data()
            self._setup_trainer()
            self._setup_compile()
            self.timings["setup_s"] = time.time() - started
            within = self._train()
            fields.update(flops_fields(self.trainer.model, self.meter.steps, knobs.recomputes(self.cfg)))
            reason = self.meter.stop_reason
            status = reason or Status.OK
            if reason:
                fields["stopped"] = f"{reason.value} at step {self.meter.current_step}"
                if within:
                    fields["stopped"] += f" ({within})"
            if reason is Status.KILLED:
                fields["error"] = "the process that started this job is gone"
        except torch.OutOfMemoryError as err:
            status = Status.OOM
            fields["error"] = (
                f"out of memory at step {self.meter.current_step if self.meter else 0}: " + (str(err).splitlines()[0])
            )
            self._free_after_oom()
        except Exception as err:  # noqa: BLE001 - any failure of the job is its result, recorded by the parent
            status = Status.FAILED
            fields["error"] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
            fields["traceback"] = traceback.format_exc()
            print(fields["traceback"], file=sys.stderr)
        return JobResult(
            status=status,
            steps=self._steps(),
            gpu_busy=self.busy.busy if self.busy else None,
            profile=self.profiler.summary if self.profiler else None,
            compile_note=self.compile_watch.note(self.compiled) if self.compile_watch else None,
            host=self.host.summary() if self.host else None,
            placement=self.placement,
            memory=memory.job_memory(
                self.placement,
                self.spec.cap_bytes,
                self.meter,
                self.context_bytes,
                self.model_load_bytes,
                self.device_memory,
            ),
            sft_kwargs=self.sft_kwargs,
            versions=versions(),
            timings=self.timings,
            pid=os.getpid(),
            **fields,
        )

    def _steps(self) -> tuple[Step, ...]:
        """The steps measured, none where the job failed before its instruments were built."""
        return self.instruments.steps() if self.instruments else ()

    def _free_after_oom(self) -> None:
        for name in ("trainer", "model"):
            if hasattr(self, name):
                delattr(self, name)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def main(spec: JobSpec, workdir: str) -> None:
    """Entry of the job process (forkserver target, or each rank under torchrun: only rank 0 writes files)."""
    watchdog.follow(spec.owner_pid)
    joblog.steady_streams()
    no_process_locks()
    os.environ.update(spec.env)
    knobs.prepare_process(spec.config.train, os.environ)  # the allocator's settings, read at its first allocation
    quiet(spec.config.train.progress_bar)
    rank = int(os.environ.get("RANK", "0"))
    if "LOCAL_RANK" in os.environ and torch.cuda.is_available() and spec.config.gpu.name != CPU:
        torch.cuda.set_device(local_rank())
    path = Path(workdir)
    ranks_n = world_size()
    with library_warnings.counted() as fired:
        result = Job(spec, path, writer=rank == 0).run()
    print(fired.summary(), end="", file=sys.stderr, flush=True)
    result = dataclasses.replace(result, world_size=ranks_n, library_warnings=fired.count)
    if rank == 0:
        write_json(path / RESULT_FILE, result.to_json())
    if ranks_n > 1 and result.status in (Status.FAILED, Status.OOM):
        # a failure of this rank alone (the ranks stop together only where they agreed to, at a step's end): the
        # launcher learns it from the exit code and stops the others; jobs.ranks tells which rank failed first
        ranks.report_error(path, rank, result.error or "failed", result.status)
        sys.exit(1)
    leave_process_group()


if __name__ == "__main__":
    main(JobSpec.from_json(json.loads(Path(sys.argv[1]).read_text(encoding="utf-8")), typed), sys.argv[2])
