"""Replay a study's search against a recorded grid: the study's sampler, its pruning, its skip by prediction and its
confirmation round, each job's figures drawn from the grid on a simulated machine (every process an offset of up to
the spread measured on the grid's setting, +-15% where none was; the machine drifting +-15% over minutes; each step's
noise as the grid measured it for the config, else 15%), so that samplers can be compared over a thousand studies at
no device time.

    python -m bench.replay bench/results/grid-h200-seed.json --samplers model tpe random --replays 1000

prints, per sampler: how often the answer is within 5% of the grid's fastest config that fits, the device time the
study spent against the grid's (every config measured once), and how many configs it decided.

The grid (`bench.grid`) says what each config's jobs cost: a config's later processes (the confirmation round's) find
its compilation in the study's cache and compile CACHED_COMPILE_S of it at most; a trial whose layers an earlier trial
compiled (it changes only the loss or the optimizer) compiles SHARED_COMPILE_S of its recorded compilation at most,
and the first of such a group at least what the grid's first of it compiled.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import random
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from bench.grid import SHARED_COMPILE_S, Grid, GridConfig
from bench.grid import layers as compiled_layers
from bench.machine import Machine, process_spread
from pipeline import knobs as speed_knobs
from pipeline.knobs.base import KnobRole
from pipeline.records import Status
from pipeline.search import _confirmation as confirmation
from pipeline.search import _knob_estimates as knob_estimates
from pipeline.search import _sampler as sampler
from pipeline.search import _trials as trials
from pipeline.search._decided import Decided
from pipeline.search._trials import Role

WITHIN = 0.05  # an answer this close to the grid's best counts as finding it
PROBE_STEPS = 4


@dataclass
class ReplayView:
    """The model sampler's view of a replayed study (`search._sampler.SearchView`)."""

    grid: Grid
    predicted_error: float
    rng: random.Random
    centre_params: dict[str, Any] | None = None
    space: dict[str, list[Any]] = field(init=False)

    def __post_init__(self) -> None:
        self.space = {k: list(v) for k, v in self.grid.space.items()}
        self._error = {sampler.key(c.params): self.rng.gauss(0.0, self.predicted_error) for c in self.grid.configs}

    def points(self) -> list[dict[str, Any]]:
        return [c.params for c in self.grid.configs]

    def predicted_gib(self, params: dict[str, Any]) -> float:
        found = self.grid.find(params)
        peak = found.peak_gib if found and found.peak_gib else 2 * self.grid.cap_gib
        return peak * (1 + self._error[sampler.key(params)])

    def fits(self, params: dict[str, Any]) -> bool:
        return self.predicted_gib(params) <= self.grid.cap_gib * (1 + SKIP_MARGIN)

    def centre(self) -> dict[str, Any] | None:
        return self.centre_params

    def seconds(self, trial) -> float | None:
        return trials.measured_seconds(trials.TrialRecord.of(trial))

    def spread(self, trial):
        return trials.measured_spread(trials.TrialRecord.of(trial))


SKIP_MARGIN = 0.1
PRUNE_STEPS, PRUNE_FACTOR = 3, 1.3


@dataclass(frozen=True)
class Outcome:
    answer: GridConfig | None
    ratio: float  # the answer's true step time over the grid's best (inf: no answer)
    seconds: float  # device seconds the study spent, its round's included
    decided: int

    def found(self, within: float = WITHIN) -> bool:
        return self.ratio <= 1 + within


def _prior_order(grid: Grid, view: ReplayView, box: Machine, base: dict[str, Any]) -> list[GridConfig]:
    """The probes' view of the space (`search._prior`): a config's step estimated from the probed step time of its
    split and checkpointing with the baseline's other knobs (each probe a process of its own), fitting first."""
    estimates: dict[tuple, float] = {}

    def estimate(config: GridConfig) -> float:
        probed_keys = ("batch.split", speed_knobs.role(KnobRole.CHECKPOINTING).key)  # what the probes vary
        like = {**base, **{k: config.params[k] for k in probed_keys if k in base}}
        probed = grid.find(like)
        if probed is None or probed.step_s is None:
            return math.inf
        k = sampler.key(like)
        if k not in estimates:
            estimates[k] = probed.step_s * (1 + box.rng.uniform(-box.offset, box.offset))
        return estimates[k]

    index = grid.space_order()
    return sorted(grid.configs, key=lambda c: (not view.fits(c.params), estimate(c), index[sampler.key(c.params)]))


def replay(
    grid: Grid, name: str, seed: int, trials_budget: int, predicted_error: float = 0.03, offset: float | None = None
) -> Outcome:
    """One study of `grid` with sampler `name` on a fresh simulated machine (`offset`: each process's own speed,
    uniform within +-offset; None: as measured on the grid's setting, `machine.process_spread`)."""
    rng = random.Random(seed)
    box = Machine(rng, offset=process_spread(grid.setting) if offset is None else offset)
    view = ReplayView(grid, predicted_error, random.Random(seed + 1))
    study = optuna.create_study(direction="minimize", sampler=sampler.make_sampler(name, seed))
    if isinstance(study.sampler, sampler.ViewSampler):
        study.sampler.bind(view)
    base = grid.find(grid.baseline)
    # the probes: the smallest and largest micro-batch of the baseline's knobs, short and uncapped
    spent = sum(
        box.job(base.step_s, PROBE_STEPS, 1, fixed_s=base.fixed_s, step_cv=base.step_sd).seconds for _ in range(2)
    )
    order = _prior_order(grid, view, box, grid.baseline)
    view.centre_params = order[0].params
    study.enqueue_trial(grid.baseline, user_attrs={trials.ROLE: Role.BASELINE})
    if not isinstance(study.sampler, sampler.KnobModelSampler):  # the prior's first half of the budget
        for config in [c for c in order if c is not base][: math.ceil(trials_budget / 2)]:
            study.enqueue_trial(config.params, skip_if_exists=True)
    decided: set[tuple] = set()
    compiled_so_far: set[tuple] = set()  # the compiled layers of the configs measured so far (`grid.layers`)
    best: float | None = None
    asked = 0
    while len(decided) < min(trials_budget, len(grid.configs)) and asked < 20 * trials_budget:
        asked += 1
        trial = study.ask()
        params = {k: trial.suggest_categorical(k, v) for k, v in grid.space.items()}
        config = grid.find(params)
        if config is None or sampler.key(params) in decided:
            trial.set_user_attr(trials.REPEAT_OF, "decided")
            study.tell(trial, state=TrialState.FAIL)
            undecided = [c for c in grid.configs if sampler.key(c.params) not in decided]
            if undecided:
                study.enqueue_trial(rng.choice(undecided).params)
            continue
        decided.add(sampler.key(params))
        baseline = trial.user_attrs.get(trials.ROLE) == Role.BASELINE
        trial.set_user_attr(trials.LABEL, config.label)
        trial.set_user_attr(trials.OVERRIDES, [f"{k}={v}" for k, v in config.params.items()])
        trial.set_user_attr(trials.CONFIG_ID, config.label)
        if not baseline and not view.fits(params):
            trial.set_user_attr(trials.STATUS, Status.SKIPPED)
            study.tell(trial, state=TrialState.PRUNED)
            continue
        compiled = compiled_layers(config)
        fixed_s = (
            grid.rerun_fixed_s(config, SHARED_COMPILE_S)
            if compiled is not None and compiled in compiled_so_far
            else grid.first_fixed_s(config)
        )
        compiled_so_far.add(compiled)
        spent += _measure(study, trial, config, grid, box, None if baseline else best, fixed_s)
        record = trials.TrialRecord.of(study.get_trials(deepcopy=False)[trial.number])
        if record.status is Status.OK and record.feasible:
            best = record.median if best is None else min(best, record.median)
    return _confirm(study, grid, box, spent, len(decided))


def _measure(study, trial, config: GridConfig, grid: Grid, box: Machine, best: float | None, fixed_s: float) -> float:
    """One trial's job (`fixed_s` its start-up): over the cap (or out of memory) at its first step, pruned when slow,
    else in full."""
    warmup = grid.warmup
    if config.status != "ok" or config.peak_gib > grid.cap_gib:
        run = box.job(config.step_s or 1.0, 1, 1, fixed_s=fixed_s, step_cv=config.step_sd)
        status = Status.FAILED if config.status == "failed" else Status.OVER_CAP
        trials.write(trial, {trials.STATUS: status, trials.PEAK: config.peak_gib, trials.FEASIBLE: False})
        trials.write(trial, {trials.GPU_SECONDS: run.seconds})
        study.tell(trial, state=TrialState.FAIL if status is Status.FAILED else TrialState.PRUNED)
        return run.seconds
    threshold = None if best is None else best * PRUNE_FACTOR

    def stop(step, times):
        return threshold is not None and step == PRUNE_STEPS + 1 and statistics.median(times[1:]) > threshold

    run = box.job(config.step_s, grid.steps, warmup, stop, fixed_s=fixed_s, step_cv=config.step_sd)
    full = len(run.steady) == grid.steps - warmup
    trials.write(
        trial,
        {
            trials.STATUS: Status.OK if full else Status.PRUNED,
            trials.MEDIAN: run.median,
            trials.STEP_TIMES: run.steady,
            trials.WARMUP_TIMES: run.warmup,
            trials.GPU_SECONDS: run.seconds,
            trials.COMPILE_S: grid.compile_s(config),
            trials.PEAK: config.peak_gib,
            trials.FEASIBLE: True,
        },
    )
    if full:
        study.tell(trial, run.median)
    else:
        study.tell(trial, state=TrialState.PRUNED)
    return run.seconds


def _confirm(study, grid: Grid, box: Machine, spent: float, decided: int) -> Outcome:
    """The confirmation round as the study runs it (`search._confirmation`), then the answer."""
    records = [r for r in trials.records(study) if r.label is not None and r.state != TrialState.RUNNING]
    eligible = [r for r in records if r.status is Status.OK and r.feasible]
    base = next((r for r in records if r.role is Role.BASELINE and r.status is Status.OK), None)
    by_label = {c.label: c for c in grid.configs}
    settings = confirmation.RoundSettings("auto", 3, 0.3, 0.25, None, 30, 20, 0.05, 0.95)

    def run(record, number, warm, steps):
        config = by_label[record.label]
        job = box.job(config.step_s, warm + steps, warm, fixed_s=grid.rerun_fixed_s(config), step_cv=config.step_sd)
        return (statistics.fmean(job.steady) if job.steady else None), job.seconds

    chosen = confirmation.choose(eligible, base, settings, knob_estimates.estimates(records, base))
    round_ = (
        confirmation.run_round(chosen, base.label if base else None, settings, spent, run, warm=lambda record: True)
        if chosen
        else None
    )
    answer_record = Decided(records, base, eligible, None, round_).best
    seconds = spent + (round_.state.seconds if round_ else 0.0)
    if answer_record is None:
        return Outcome(None, math.inf, seconds, decided)
    answer = by_label[answer_record.label]
    return Outcome(answer, answer.step_s / grid.best.step_s, seconds, decided)


def summary(
    grid: Grid, name: str, replays: int, trials_budget: int, seed: int = 0, offset: float | None = None
) -> dict[str, float]:
    """How `replays` studies with sampler `name` fare on `grid` (the round's own lines left out)."""
    with contextlib.redirect_stdout(io.StringIO()):
        outcomes = [replay(grid, name, seed + i, trials_budget, offset=offset) for i in range(replays)]
    shares = sorted(o.seconds / grid.seconds for o in outcomes)
    return {
        "found": sum(o.found() for o in outcomes) / replays,
        "share_mean": statistics.fmean(shares),
        "share_p90": shares[int(0.9 * (replays - 1))],
        "ratio_mean": statistics.fmean(min(o.ratio, 10.0) for o in outcomes),
        "decided_mean": statistics.fmean(o.decided for o in outcomes),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("grid", type=Path)
    parser.add_argument("--samplers", nargs="+", default=["model", "tpe", "random"])
    parser.add_argument("--replays", type=int, default=1000)
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument(
        "--offset", type=float, default=None, help="each process's speed within +-this (default: as measured there)"
    )
    args = parser.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    grid = Grid.load(args.grid)
    print(f"grid: {len(grid.configs)} configs, best {grid.best.label} {grid.best.step_s:.4f} s, {grid.seconds:.0f} s")
    offset = process_spread(grid.setting) if args.offset is None else args.offset
    print(
        f"each process within +-{offset:.0%} of its config's speed"
        + (" (as measured there)" if args.offset is None else "")
    )
    print("| sampler | answer within 5% of the grid's best | device time / grid's (mean, p90) | decided |")
    print("|---|---|---|---|")
    for name in args.samplers:
        s = summary(grid, name, args.replays, args.trials, offset=offset)
        print(
            f"| {name} | {s['found']:.1%} | {s['share_mean']:.1%}, {s['share_p90']:.1%} | {s['decided_mean']:.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
