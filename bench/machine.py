"""A simulated machine for the comparison engine: its speed drifts over minutes, every process it starts has an
offset of its own, and every step has noise. A job costs device time (a fixed start-up plus its steps), and the
machine's clock runs on with it, so neighbouring jobs see nearly the same drift and distant ones do not."""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass

# How far a config's fresh processes run from one another, by the setting a grid was recorded on: each process's own
# speed is drawn uniform within +-this. The figure is the farthest from their median that the setting's processes
# were measured, rounded up (BENCHMARKS.md, "The in-job pin against free processes, paired" and the spread sections
# before it). A setting measured nowhere gets the seed's.
PROCESS_SPREADS = (
    # Qwen3-0.6B at 1,024 tokens, effective batch 8, compiled answer (device-bound, GPU busy 0.64-0.84): 8.7% (H200,
    # 5 processes), 4.0%, 2.2% free and 1.0% pinned (H100, 5 each); the chats study's answer 6.9% (H100, 4)
    (("model=qwen3-0.6b", "train.max_length=1024"), 0.09),
)
# The seed's setting, as the replay has drawn it from the start: its compiled answer (host-bound) was measured 18-40%
# from the median of 5 processes, more than this draws; its grid's replays are kept comparable with earlier ones.
SEED_SPREAD = 0.15


def process_spread(setting: str) -> float:
    """Each process's offset (uniform within +-this) on the setting a grid names (its overrides, whole words)."""
    words = set(setting.split())
    return next((spread for keys, spread in PROCESS_SPREADS if words.issuperset(keys)), SEED_SPREAD)


@dataclass
class Machine:
    rng: random.Random
    offset: float = SEED_SPREAD  # each process: uniform in [-offset, +offset] of its config's true speed
    drift: float = 0.15  # the whole machine: up to +-drift (30% from trough to crest) over 5-15 minutes
    step_cv: float = 0.15  # step-to-step noise (lognormal) inside one process
    fixed_s: float = 2.0  # a job's start-up: spawn, build, data
    clock_s: float = 0.0

    def __post_init__(self) -> None:
        self.phase = self.rng.uniform(0, 2 * math.pi)
        self.period_s = self.rng.uniform(300, 900)

    def speed(self) -> float:
        return 1 + self.drift * math.sin(2 * math.pi * self.clock_s / self.period_s + self.phase)

    def job(
        self,
        true_step_s: float,
        steps: int,
        warmup: int,
        stop=None,
        fixed_s: float | None = None,
        step_cv: float | None = None,
    ) -> Run:
        """One process of `steps` steps: its steady steps (after `warmup`) and its device time. `stop(step, times)`
        may end it early, as the study's pruning does. `fixed_s`: this job's start-up, where it is not the
        machine's (a compiling config's); `step_cv`: its step-to-step noise, where it is not the machine's (as a
        recorded grid measured it for the config)."""
        cv = self.step_cv if step_cv is None else step_cv
        offset = 1 + self.rng.uniform(-self.offset, self.offset)
        start = self.clock_s
        self.clock_s += self.fixed_s if fixed_s is None else fixed_s
        times: list[float] = []
        for number in range(1, steps + 1):
            step = true_step_s * offset * self.speed() * math.exp(self.rng.gauss(0.0, cv))
            self.clock_s += step
            times.append(step)
            if stop is not None and stop(number, times):
                break
        return Run(times[:warmup], times[warmup:], self.clock_s - start)


@dataclass(frozen=True)
class Run:
    warmup: list[float]
    steady: list[float]
    seconds: float

    @property
    def median(self) -> float | None:
        return statistics.median(self.steady) if self.steady else None
