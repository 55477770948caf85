"""The training callback that measures every optimizer step.

Per step it records wall time (synchronised once, at the step's end), and its phases: forward, backward (recompute
included under gradient checkpointing), optimizer, data (fetching and collating the step's micro-batches, plus the
previous step's logging) and other (the rest: input copies, hooks, Python overhead). On CUDA the phases come from
CUDA events read after that one synchronisation, never a synchronisation per micro-batch; on CPU from perf_counter.

Trainer order per optimizer step (transformers 5): fetch all micro-batches -> step_begin -> [forward, backward,
substep_end] per micro-batch (the last one ends with clipping and on_pre_optimizer_step) -> on_optimizer_step ->
scheduler, zero_grad -> step_end -> log. The forward marks come from hooks on the top-level model, which runs once
per micro-batch even when layers recompute under checkpointing.

Under torch.compile (the Trainer wraps the model in an OptimizedModule), hooks on the model would be caught by
Dynamo and compiled as frames of their own: their CUDA events then become graph objects, which torch before 2.13
hands back unrecorded ("Both events must be recorded ..."), and the meter's own state makes them recompile step
after step. So the hooks are kept out of Dynamo (`torch.compiler.disable`): they run eagerly, once per micro-batch.
Compilation time is read from Dynamo's cumulative timer at each step's end (`compile_s`, recording CUDA graphs
included): a step that compiled is no steady step, and the pruning clocks leave compilation out, so a compiling step
is never taken for a slow config.

Each step is appended to a JSON-lines file as soon as its loss is logged, so a killed job keeps what it measured.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import statistics
import time
from typing import Any

import torch
from transformers import TrainerCallback

from pipeline.measure import collective, memory
from pipeline.measure.clock import Clock, compile_seconds, real_tokens, samples_from_positions
from pipeline.measure.collective import AllReduceClock
from pipeline.records import Status, Step, StopRule

IN_STEP_FACTOR = 2.0  # a second step of the pruning window longer than this x the threshold ends the job at once


class StopTraining(Exception):
    """Raised at a micro-batch's start when the step can no longer end under the pruning threshold."""


class StepMeter(TrainerCallback):
    def __init__(
        self,
        cuda: bool,
        steps_path: str | None = None,
        stop: StopRule | None = None,
        context_bytes: int = 0,
        allreduce: AllReduceClock | None = None,
    ) -> None:
        """`stop` ends training early: `cap_bytes` once a step's peak (+ `context_bytes` on CUDA) is over the cap,
        or when the median of the `prune_after` steps after step `prune_from` (the first, which carries one-off
        costs; a compiling job's warm-up) exceeds `prune_threshold_s`: a slow config is known after a few steps, long before the warm-up ends. No single
        step decides: one stall (a page fault storm, another process's burst) moves no median of three. Within
        those steps a job is stopped mid-step (StopTraining) once an earlier step of the window already ran over
        IN_STEP_FACTOR x the threshold and this one has run as long: the host clock starts at the previous step's
        synchronisation and the device can only be later, so two such steps are that slow for sure; it spares
        waiting out the long steps of a large accumulation. One process only: in a torchrun job the ranks decide at
        each step's end, together (`collective.exchange`), and a step's peak, tokens and samples are the job's
        (`allreduce`: the clock of DDP's gradient all-reduce, read once per step)."""
        self.cuda = cuda
        self.stop = stop or StopRule()
        self.context_bytes = context_bytes
        self.stop_reason: Status | None = None
        self._ppid = os.getppid()
        self.clock = Clock(cuda)
        self.steps_path = steps_path
        self.steps: list[Step] = []
        self.current_step = 0
        self._hooks: list[Any] = []
        self._reset_step()
        self._last_end_host: float | None = None
        self._distributed = False
        self.allreduce = allreduce
        self.rank_peaks: tuple[int, ...] = ()  # each rank's peak at the last step's end (a torchrun job)
        self._pending: dict | None = None
        self._compiled_until = 0.0  # compile_seconds() at the end of the previous step
        self.compile_s = 0.0
        self.first_step_at: float | None = None  # wall time (time.time) the first optimizer step began
        self._steps_file = None
        self._aside = False  # a forward that is not the step's work (`aside`)
        self.first_batch_tokens = 0  # the run's longest micro-batch, trained in this step beside its own
        self.released_bytes = 0  # the allocator's cached segments returned before it

    # ---- hooks on the model -------------------------------------------------------------------------------------
    def _reset_step(self) -> None:
        self._begin_host = None
        self._micro: list[list[Any]] = []  # [forward start, forward end, micro end]
        self._tokens: list[torch.Tensor | int] = []
        self._padded = 0
        self._samples: list[torch.Tensor | int] = []

    @contextlib.contextmanager
    def aside(self):
        """Forwards inside are not the step's work: no micro-batch, no tokens (`measure.first_batch`)."""
        self._aside = True
        try:
            yield
        finally:
            self._aside = False

    def _forward_start(self, module, args, kwargs) -> None:
        if not module.training or self._aside:
            return
        self._stop_within_step()
        self._micro.append([self.clock.mark(), None, None])
        ids = kwargs.get("input_ids", args[0] if args else None)
        mask = kwargs.get("attention_mask")
        if ids is not None:
            self._padded += ids.numel()
            self._samples.append(ids.shape[0] if mask is not None else samples_from_positions(kwargs, ids))
            self._tokens.append(real_tokens(kwargs, ids))

    def _stop_within_step(self) -> None:
        after, threshold, start = self.stop.prune_after, self.stop.prune_threshold_s, self.stop.prune_from
        if not (after and threshold and start < self.current_step <= start + after) or self._distributed:
            return
        limit = IN_STEP_FACTOR * threshold
        if not any(s.step > start and s.step_time_s - s.compile_s > limit for s in self.steps):
            return  # this would be the window's first step that slow: one stall decides nothing
        elapsed = time.perf_counter() - self._last_end_host - (compile_seconds() - self._compiled_until)
        if elapsed > limit:
            self.stop_reason = Status.PRUNED
            raise StopTraining(f"step {self.current_step} ran {elapsed:.3f} s > {IN_STEP_FACTOR:g} x {threshold:.3f} s")

    def _forward_end(self, module, args, kwargs, output) -> None:
        if module.training and not self._aside and self._micro and self._micro[-1][1] is None:
            self._micro[-1][1] = self.clock.mark()

    def _micro_end(self) -> None:
        if self._micro and self._micro[-1][2] is None:
            self._micro[-1][2] = self.clock.mark()

    # ---- trainer events -----------------------------------------------------------------------------------------
    def attach(self, model) -> None:
        """Time the model's micro-batches (hooks on its forward); `detach` takes them off."""
        if not self._hooks:
            self._hooks = [
                model.register_forward_pre_hook(torch.compiler.disable(self._forward_start), with_kwargs=True),
                model.register_forward_hook(torch.compiler.disable(self._forward_end), with_kwargs=True),
            ]

    def detach(self) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks = []

    def restart(self) -> None:
        """Start the next step's clock now (after steps that were not metered)."""
        self._last_end_host = time.perf_counter()
        self._reset_step()

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if model is not None:
            self.attach(model)
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        else:
            memory.reset_peak_rss()
        self._last_end_host = time.perf_counter()
        self._compiled_until = compile_seconds()
        self._distributed = collective.distributed()

    def on_step_begin(self, args, state, control, **kwargs):
        self.current_step = state.global_step + 1
        self._begin_host = time.perf_counter()
        if self.first_step_at is None:
            self.first_step_at = time.time()

    def on_substep_end(self, args, state, control, **kwargs):
        self._micro_end()

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self._micro_end()

    def on_step_end(self, args, state, control, **kwargs):
        end = self.clock.mark()
        if self.cuda:
            torch.cuda.synchronize()
        now = time.perf_counter()
        compiled = compile_seconds()
        compile_s, self._compiled_until = compiled - self._compiled_until, compiled
        self.compile_s += compile_s
        step_time = now - self._last_end_host
        data = self._begin_host - self._last_end_host
        self._last_end_host = now
        micro = [m for m in self._micro if None not in m]
        forward = sum(self.clock.seconds(m[0], m[1]) for m in micro)
        backward = sum(self.clock.seconds(m[1], m[2]) for m in micro)
        optimizer = self.clock.seconds(micro[-1][2], end) if micro else 0.0
        if self.cuda:
            peak = torch.cuda.max_memory_reserved() + self.context_bytes
            peak_allocated = torch.cuda.max_memory_allocated()
        else:
            peak, peak_allocated = memory.peak_rss_bytes(), None
        record = {
            "step": state.global_step,
            "step_time_s": step_time,
            "forward_s": forward,
            "backward_s": backward,
            "optimizer_s": optimizer,
            "data_s": data,
            "other_s": step_time - forward - backward - optimizer - data,
            "micro_batches": len(micro),
            "tokens": sum(int(t) for t in self._tokens),
            "padded_tokens": self._padded,
            "samples": sum(int(n) for n in self._samples),
            "peak_bytes": peak,
            "peak_allocated_bytes": peak_allocated,
            "compile_s": compile_s,
            "allreduce_s": self.allreduce.take() if self.allreduce else 0.0,
            "first_batch_tokens": self.first_batch_tokens,
            "released_bytes": self.released_bytes,
        }
        self.first_batch_tokens = self.released_bytes = 0
        self._reset_step()
        self.clock.reuse()
        self.stop_reason = self._should_stop(step_time - compile_s, peak, state.global_step)
        if self._distributed:
            self._agree(record)
        self._pending = record
        if self.stop_reason:
            control.should_training_stop = True
        return control

    def _agree(self, record: dict) -> None:
        """The ranks' one exchange per step: the step's peak is the largest rank's, its work the sum of theirs, and
        every rank stops when any asks to (else one would wait for the others in its next all-reduce)."""
        seen = collective.exchange(
            record["peak_bytes"], record["tokens"], record["padded_tokens"], record["samples"], self.stop_reason
        )
        self.rank_peaks = seen.peaks
        record.update(
            peak_bytes=max(seen.peaks),
            tokens=seen.tokens,
            padded_tokens=seen.padded_tokens,
            samples=seen.samples,
            rank_peak_bytes=seen.peaks,
        )
        self.stop_reason = seen.stop

    def _should_stop(self, step_time: float, peak: int, step: int) -> Status | None:
        """`step_time` without the step's compilation."""
        if os.getppid() != self._ppid:
            return Status.KILLED  # the sweep or study that started this job has died: do not train for nobody
        if self.stop.cap_bytes and peak > self.stop.cap_bytes:
            return Status.OVER_CAP
        after, threshold, start = self.stop.prune_after, self.stop.prune_threshold_s, self.stop.prune_from
        if after and threshold and step == start + after:
            early = [s.step_time_s - s.compile_s for s in self.steps if s.step > start] + [step_time]
            if statistics.median(early) > threshold:
                return Status.PRUNED
        return None

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self._pending is None or not logs or "loss" not in logs:
            return
        record = self._pending
        self._pending = None
        step = Step(
            **record,
            loss=float(logs["loss"]),
            grad_norm=float(logs["grad_norm"]) if logs.get("grad_norm") is not None else None,
            learning_rate=float(logs["learning_rate"]) if logs.get("learning_rate") is not None else None,
        )
        self.steps.append(step)
        if self.steps_path:
            if self._steps_file is None:  # kept open: a line a step, flushed, so a killed job keeps what it wrote
                self._steps_file = open(self.steps_path, "a", encoding="utf-8")  # noqa: SIM115 - closed at the end
            self._steps_file.write(json.dumps(dataclasses.asdict(step)) + "\n")
            self._steps_file.flush()

    def on_train_end(self, args, state, control, **kwargs):
        self.detach()
        if self._steps_file is not None:
            self._steps_file.close()
            self._steps_file = None
