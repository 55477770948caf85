"""What the pipeline's measurement costs, measured inside one process, where run-to-run noise cannot hide it.

Comparing separate processes (bench/compare_trl.py) cannot resolve 1%: the same config's median moves by +-15% from
one process to the next on the H200 machine. Here one job is built by the pipeline's own code (`Job`: model, data,
SFTConfig, SFTTrainer, compilation) and trained with what the job adds to a step switched on for a block of
`--block` steps and off for the next, alternating: the step meter (its hooks and callbacks) and the busy-share
sampler (its NVML thread), so both halves share the process, the data order and any drift. Every step is timed by
an outside clock the way bench/plain_trl.py times plain TRL (the time between per-step loss logs, which
synchronise); with the meter off the trainer is plain TRL. Two figures come out:

- the A/B: each metered block's median step against the mean of its two unmetered neighbours', as a log ratio, so
  slow drift of the machine cancels inside every pair; the mean of the pairs with its t-interval (95%) gives the
  cost, and its width says what the comparison resolves;
- the meter's own host time: its hooks and callbacks timed from inside (perf_counter around each call), per step,
  as a share of the step: what the meter adds to a launch-bound step, with no noise of the step itself.

    python -m bench.meter_overhead --steps 400 -- experiment=seed-t4 gpu=auto batch.split=4x1     # GPU
    python -m bench.meter_overhead --steps 400 --block 10 -- experiment=seed-t4-graphs gpu=auto batch.split=4x1
    python -m bench.meter_overhead --steps 300 -- model=tiny batch.split=1x4                      # CPU
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
import time
from pathlib import Path

import torch
from scipy.stats import t as student_t
from transformers import TrainerCallback

from bench.plain_trl import LogClock
from pipeline.config.compose import compose_job
from pipeline.config.validate import validate
from pipeline.jobs.child import Job
from pipeline.jobs.task import job_spec

TIMED = (
    "_forward_start",
    "_forward_end",
    "on_step_begin",
    "on_substep_end",
    "on_pre_optimizer_step",
    "on_step_end",
    "on_log",
)


class Switch(TrainerCallback):
    """Forwards the trainer's events to the meter in metered blocks of `block` steps only (the odd blocks), takes
    its model hooks off in the others, and runs the job's busy-share sampler (the job's own BusyWindow, if it has
    one) during metered blocks only: everything the job adds to a step, switched together."""

    def __init__(self, meter, model, block: int = 1, busy=None) -> None:
        self.meter, self.model, self.block, self.busy, self.on = meter, model, block, busy, True

    def __getattribute__(self, name):
        if name.startswith("on_") and name not in ("on_log", "on_train_begin", "on_train_end"):
            meter, on = object.__getattribute__(self, "meter"), object.__getattribute__(self, "on")
            return getattr(meter, name) if on else (lambda *a, **k: None)
        return object.__getattribute__(self, name)

    def on_train_begin(self, args, state, control, **kwargs):
        if self.busy is not None:
            self.busy.sampler.start()
        return self.meter.on_train_begin(args, state, control, **kwargs)

    def on_train_end(self, args, state, control, **kwargs):
        if self.busy is not None and self.busy.sampler.running:
            self.busy.sampler.stop()
        return self.meter.on_train_end(args, state, control, **kwargs)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.on:
            self.meter.on_log(args, state, control, logs=logs, **kwargs)
        was, self.on = self.on, metered(state.global_step + 1, self.block)  # the next step's
        if was == self.on:
            return
        if self.on:
            self.meter.attach(self.model)
        else:
            self.meter.detach()
        if self.busy is not None:
            self.busy.sampler.start() if self.on else self.busy.sampler.stop()
        self.meter.restart()


def metered(step: int, block: int) -> bool:
    """Step `step` (1-based) is metered when it lies in an odd block of `block` steps."""
    return ((step - 1) // block) % 2 == 0


def time_meter(meter) -> dict[str, float]:
    """Wrap the meter's hooks and callbacks so the host time spent in them is summed (returned dict, seconds: `s`
    in all, `sync` of it waiting in the step's one CUDA synchronisation, which plain TRL's per-step loss log waits
    for anyway, so it is no cost of the meter)."""
    spent = {"s": 0.0, "sync": 0.0}
    synchronize = torch.cuda.synchronize

    def timed_sync(*args, **kwargs):
        start = time.perf_counter()
        try:
            return synchronize(*args, **kwargs)
        finally:
            spent["sync"] += time.perf_counter() - start

    torch.cuda.synchronize = timed_sync
    for name in TIMED:
        inner = getattr(meter, name)

        def timed(*args, _inner=inner, **kwargs):
            start = time.perf_counter()
            try:
                return _inner(*args, **kwargs)
            finally:
                spent["s"] += time.perf_counter() - start

        setattr(meter, name, timed)
    return spent


def paired(times: list[tuple[int, float]], skip: int, block: int = 1) -> list[float]:
    """log(metered block's median / mean of its two unmetered neighbours' medians) for every metered block that
    starts after `skip` and has both neighbours."""
    blocks: dict[int, list[float]] = {}
    for step, value in times:
        if step > skip:
            blocks.setdefault((step - 1) // block, []).append(value)
    median = {b: statistics.median(v) for b, v in blocks.items() if len(v) == block}
    return [
        math.log(value / ((median[b - 1] + median[b + 1]) / 2))
        for b, value in median.items()
        if b % 2 == 0 and b - 1 in median and b + 1 in median
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--skip", type=int, default=10, help="first steps left out (warm-up)")
    parser.add_argument("--block", type=int, default=1, help="steps per block switched on or off together")
    parser.add_argument("--out", type=Path)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    overrides = [o for o in args.overrides if o != "--"]
    cfg = compose_job("config", [*overrides, f"train.steps={args.steps}", "train.progress_bar=false"])
    with tempfile.TemporaryDirectory() as work:
        job = Job(job_spec(validate(cfg)), Path(work))
        job._setup_device()
        job._setup_model()
        job._setup_data()
        job._setup_trainer()
        job._setup_compile()  # the config's compilation and captured step, as the job sets them
        trainer = job.trainer
        spent = time_meter(job.meter)
        handler = trainer.callback_handler
        switch = Switch(job.meter, trainer.model, args.block, job.busy)
        handler.callbacks = [switch if cb is job.meter else cb for cb in handler.callbacks if cb is not job.busy]
        clock = LogClock()  # plain TRL's clock: the time of each step's loss log
        trainer.add_callback(clock)
        trainer.train()
    # step k (1-based) ends at times[k-1]
    steps = [(k, b - a) for k, (a, b) in enumerate(zip(clock.times, clock.times[1:], strict=False), start=2)]
    logs = paired(steps, args.skip, args.block)
    mean, sd = statistics.fmean(logs), statistics.stdev(logs)
    half = student_t.ppf(0.975, len(logs) - 1) * sd / math.sqrt(len(logs))
    metered_steps = [t for k, t in steps if k > args.skip and metered(k, args.block)]
    plain = [t for k, t in steps if k > args.skip and not metered(k, args.block)]
    own_ms = 1000 * (spent["s"] - spent["sync"]) / max(1, len(job.meter.steps))
    result = {
        "overrides": overrides,
        "pairs": len(logs),
        "cost": math.exp(mean) - 1,
        "cost_low": math.exp(mean - half) - 1,
        "cost_high": math.exp(mean + half) - 1,
        "block": args.block,
        "median_metered_s": statistics.median(metered_steps),
        "median_plain_s": statistics.median(plain),
        "meter_host_ms_per_step": own_ms,
        "meter_host_share": own_ms / 1000 / statistics.median(metered_steps),
    }
    print(
        f"{' '.join(overrides)}: {len(logs)} pairs of {args.block}-step blocks; median step {result['median_metered_s']:.4f} s metered, "
        f"{result['median_plain_s']:.4f} s plain; cost {100 * result['cost']:+.2f}% "
        f"[95% {100 * result['cost_low']:+.2f}%, {100 * result['cost_high']:+.2f}%]; the meter's own host time "
        f"{own_ms:.2f} ms per metered step = {100 * result['meter_host_share']:.2f}% of the step"
    )
    if args.out:
        args.out.write_text(json.dumps({**result, "steps": steps}))


if __name__ == "__main__":
    main()
