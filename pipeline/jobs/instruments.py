"""What measures a job's training, as the Trainer's callbacks: the step meter (its steps, its stop rule), the
all-reduce clock of a torchrun job's ranks, the longest micro-batch put first (`FirstBatch`), the GPU busy share
(NVML), the host's threads and CPUs, and the profiler's window; and the steps they measured, those the profiler
recorded marked so. Built in the job process (`jobs.child`) once the device, model and data are set up."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.jobs.files import PROFILE_DIR, STEPS_FILE
from pipeline.measure.busy import BusyWindow
from pipeline.measure.callback import StepMeter
from pipeline.measure.collective import AllReduceClock
from pipeline.measure.first_batch import FirstBatch
from pipeline.measure.host import HostWatch
from pipeline.measure.profile import ProfileWindow
from pipeline.records import JobSpec, Step


@dataclass
class Instruments:
    """A job's measuring callbacks; `clock`, `first`, `busy` and `profiler` only where the job has them."""

    meter: StepMeter
    host: HostWatch
    clock: AllReduceClock | None = None
    first: FirstBatch | None = None
    busy: BusyWindow | None = None
    profiler: ProfileWindow | None = None

    @property
    def callbacks(self) -> list[Any]:
        """In the Trainer's order: the first batch before the meter (the step's peak holds it), the host's pin (its
        probe) before the GPU busy window opens, the profiler last."""
        found = [self.first, self.meter, self.clock, self.host, self.busy, self.profiler]
        return [c for c in found if c is not None]

    def bind(self, trainer: Any) -> None:
        """Those that hook the built trainer: the clock the model DDP wraps once training begins, the first batch
        the trainer's data."""
        for instrument in (self.clock, self.first):
            if instrument is not None:
                instrument.bind(trainer)

    def steps(self) -> tuple[Step, ...]:
        """The meter's steps, those the profiler recorded marked so."""
        steps = tuple(self.meter.steps)
        if self.profiler is None or self.profiler.first_step is None:
            return steps
        profiled = range(self.profiler.first_step - 1, self.profiler.first_step + self.profiler.active)
        return tuple(dataclasses.replace(s, profiled=True) if s.step in profiled else s for s in steps)


def instruments(
    spec: JobSpec, workdir: Path, writer: bool, cuda: bool, context_bytes: int, nvml: Any, ranks: bool, records: Any
) -> Instruments:
    """The instruments of the job `spec` (its files in `workdir` where it is the `writer`, rank 0): `nvml` the
    device's handle (None without one), `ranks` whether ranks share the job (a process group), `records` the first
    batch's records where the spec has one."""
    cfg, measure = spec.config, spec.config.measure
    clock = AllReduceClock(cuda) if ranks else None
    meter = StepMeter(cuda, str(workdir / STEPS_FILE) if writer else None, spec.stop, context_bytes, clock)
    pin = meter if measure.pin_cpu else None
    found = Instruments(meter, HostWatch(measure.warmup_steps, pin, int(os.environ.get("LOCAL_WORLD_SIZE", 1))), clock)
    if spec.first_batch is not None:
        found.first = FirstBatch(spec.first_batch, records, meter, cfg.train.max_length)
    if cuda and nvml is not None:
        found.busy = BusyWindow(nvml, after=measure.warmup_steps)
    if measure.profile and writer:
        # the steps right after the warm-up; they are then no steady steps (the profiler costs host time)
        found.profiler = ProfileWindow(
            workdir / PROFILE_DIR,
            skip_first=measure.warmup_steps,
            wait=0,
            warmup=1,
            active=measure.profile_steps,
            cuda=cuda,
            written=meter.restart,
        )
    return found
