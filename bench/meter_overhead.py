"""What the pipeline's measurement costs, measured inside one process, where run-to-run noise cannot hide it.

Comparing separate processes (bench/compare_trl.py) cannot resolve 1%: the same config's median moves by +-15% from
one process to the next on the H200 machine. Here one job is built by the pipeline's own code (`Job`: model, data,
SFTConfig, SFTTrainer) and trained with its StepMeter switched on for one step and off the next, alternating, so
both halves share the process, the data order and any drift. Every step is timed by an outside clock the way
bench/plain_trl.py times plain TRL (the time between per-step loss logs, which synchronise); with the meter off
the trainer is plain TRL. Prints the median step time with the meter on and off, their ratio, and a 95% interval
of the ratio (bootstrap over steps).

    python bench/meter_overhead.py --steps 200 -- experiment=seed-t4 batch.split=4x1           # GPU
    python bench/meter_overhead.py --steps 200 -- model=tiny batch.split=1x4                   # CPU
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from transformers import TrainerCallback

from bench.plain_trl import LogClock
from pipeline.config.compose import compose_job
from pipeline.jobs.child import Job
from pipeline.jobs.task import job_spec


class Switch(TrainerCallback):
    """Forwards the trainer's events to the meter on even steps only, and takes its model hooks off on odd ones."""

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--skip", type=int, default=10, help="first steps left out (warm-up)")
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--inject-s",
        type=float,
        default=0.0,
        help="busy-wait this long per metered micro-batch (a known cost, to show what the comparison can resolve)",
    )
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
        if args.inject_s:
            start_hook = job.meter._forward_start

            def slow_start(*a, **k):
                until = time.perf_counter() + args.inject_s
                while time.perf_counter() < until:
                    pass
                return start_hook(*a, **k)

            job.meter._forward_start = slow_start
        handler = trainer.callback_handler
        handler.callbacks = [Switch(job.meter, trainer.model) if cb is job.meter else cb for cb in handler.callbacks]
        clock = LogClock()  # plain TRL's clock: the time of each step's loss log
        trainer.add_callback(clock)
        trainer.train()
    # step k (1-based) ends at times[k-1]; step k was metered when k is odd
    steps = [(k, b - a) for k, (a, b) in enumerate(zip(clock.times, clock.times[1:], strict=False), start=2)]
    on = [t for k, t in steps if k > args.skip and k % 2 == 1]
    off = [t for k, t in steps if k > args.skip and k % 2 == 0]
    ratio = statistics.median(on) / statistics.median(off)
    rng = random.Random(0)
    boot = sorted(
        statistics.median(rng.choices(on, k=len(on))) / statistics.median(rng.choices(off, k=len(off)))
        for _ in range(2000)
    )
    low, high = boot[50], boot[1949]
    print(
        f"{' '.join(overrides)}{f' (+{args.inject_s:g} s per metered micro-batch)' if args.inject_s else ''}: {len(on)} metered / {len(off)} plain steps; median step {statistics.median(on):.4f} s"
        f" metered, {statistics.median(off):.4f} s plain; ratio {ratio:.4f} [95% {low:.4f}, {high:.4f}]"
    )
    if args.out:
        args.out.write_text(
            json.dumps({"overrides": overrides, "on": on, "off": off, "ratio": ratio, "ci": [low, high]})
        )


if __name__ == "__main__":
    main()
