"""What the pipeline's measurement costs, measured inside one process, where run-to-run noise cannot hide it.

Comparing separate processes (bench/compare_trl.py) cannot resolve 1%: the same config's median moves by +-15% from
one process to the next on the H200 machine. Here one job is built by the pipeline's own code (`Job`: model, data,
SFTConfig, SFTTrainer) and trained with its StepMeter switched on for one step and off the next, alternating, so
both halves share the process, the data order and any drift. Every step is timed by an outside clock the way
bench/plain_trl.py times plain TRL (the time between per-step loss logs, which synchronise); with the meter off the
trainer is plain TRL. Two figures come out:

- the A/B: each metered step against the mean of its two unmetered neighbours, as a log ratio, so slow drift of the
  machine cancels inside every pair; the mean of the pairs with its t-interval (95%) gives the cost, and its width
  says what the comparison resolves;
- the meter's own host time: its hooks and callbacks timed from inside (perf_counter around each call), per step,
  as a share of the step: what the meter adds to a launch-bound step, with no noise of the step itself.

    python bench/meter_overhead.py --steps 400 -- experiment=seed-t4 gpu=auto batch.split=4x1     # GPU
    python bench/meter_overhead.py --steps 300 -- model=tiny batch.split=1x4                      # CPU
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
    """Forwards the trainer's events to the meter on odd steps only, and takes its model hooks off on even ones."""

    def __init__(self, meter, model) -> None:
        self.meter, self.model, self.on = meter, model, True

    def __getattribute__(self, name):
        if name.startswith("on_") and name not in ("on_log", "on_train_begin"):
            meter, on = object.__getattribute__(self, "meter"), object.__getattribute__(self, "on")
            return getattr(meter, name) if on else (lambda *a, **k: None)
        return object.__getattribute__(self, name)

    def on_train_begin(self, args, state, control, **kwargs):
        return self.meter.on_train_begin(args, state, control, **kwargs)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.on:
            self.meter.on_log(args, state, control, logs=logs, **kwargs)
        self.on = state.global_step % 2 == 0  # the next step: metered when its number is odd
        if self.on:
            self.meter.attach(self.model)
        else:
            self.meter.detach()
        self.meter.restart()


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


def paired(times: list[tuple[int, float]], skip: int) -> list[float]:
    """log(metered step / mean of its two unmetered neighbours) for every odd step after `skip`."""
    by_step = dict(times)
    out = []
    for step, value in times:
        if step > skip and step % 2 == 1 and step - 1 in by_step and step + 1 in by_step:
            out.append(math.log(value / ((by_step[step - 1] + by_step[step + 1]) / 2)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--skip", type=int, default=10, help="first steps left out (warm-up)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    overrides = [o for o in args.overrides if o != "--"]
    cfg = compose_job("config", [*overrides, f"train.steps={args.steps}", "train.progress_bar=false"])
    with tempfile.TemporaryDirectory() as work:
        job = Job(job_spec(cfg), Path(work))
        job._setup_device()
        job._setup_model()
        job._setup_data()
        job._setup_trainer()
        trainer = job.trainer
        spent = time_meter(job.meter)
        handler = trainer.callback_handler
        handler.callbacks = [Switch(job.meter, trainer.model) if cb is job.meter else cb for cb in handler.callbacks]
        clock = LogClock()  # plain TRL's clock: the time of each step's loss log
        trainer.add_callback(clock)
        trainer.train()
    # step k (1-based) ends at times[k-1]; step k was metered when k is odd
    steps = [(k, b - a) for k, (a, b) in enumerate(zip(clock.times, clock.times[1:], strict=False), start=2)]
    logs = paired(steps, args.skip)
    mean, sd = statistics.fmean(logs), statistics.stdev(logs)
    half = student_t.ppf(0.975, len(logs) - 1) * sd / math.sqrt(len(logs))
    metered = [t for k, t in steps if k > args.skip and k % 2 == 1]
    plain = [t for k, t in steps if k > args.skip and k % 2 == 0]
    own_ms = 1000 * (spent["s"] - spent["sync"]) / max(1, len(job.meter.steps))
    result = {
        "overrides": overrides,
        "pairs": len(logs),
        "cost": math.exp(mean) - 1,
        "cost_low": math.exp(mean - half) - 1,
        "cost_high": math.exp(mean + half) - 1,
        "median_metered_s": statistics.median(metered),
        "median_plain_s": statistics.median(plain),
        "meter_host_ms_per_step": own_ms,
        "meter_host_share": own_ms / 1000 / statistics.median(metered),
    }
    print(
        f"{' '.join(overrides)}: {len(logs)} pairs; median step {result['median_metered_s']:.4f} s metered, "
        f"{result['median_plain_s']:.4f} s plain; cost {100 * result['cost']:+.2f}% "
        f"[95% {100 * result['cost_low']:+.2f}%, {100 * result['cost_high']:+.2f}%]; the meter's own host time "
        f"{own_ms:.2f} ms per metered step = {100 * result['meter_host_share']:.2f}% of the step"
    )
    if args.out:
        args.out.write_text(json.dumps({**result, "steps": steps}))


if __name__ == "__main__":
    main()
