"""What a command line runs: its jobs (a multirun expanded as Hydra's basic sweeper runs it, repeats interleaved),
each config composed and checked once before Hydra runs anything. The plan keeps each config as its check parsed
it (`config.job`): what each job's task receives (`checked_job`). A world-size sweep leaves out the
combinations whose split times world size is not the effective batch."""

from __future__ import annotations

import dataclasses
import itertools
import math

from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import HydraException
from omegaconf import DictConfig
from omegaconf.errors import (
    InterpolationResolutionError,
    MissingMandatoryValue,
    OmegaConfBaseException,
    ValidationError,
)

from pipeline.config.compose import compose_job, translate
from pipeline.config.errors import ConfigError
from pipeline.config.identity import parse_override
from pipeline.config.job import JobConfig
from pipeline.config.validate import layout_mismatch, validate

MAX_SWEEP_JOBS = 1000  # configs x repeats: at a few seconds a job at the least, a sweep of hours
MAX_REPEATS = MAX_SWEEP_JOBS


def expand_jobs(overrides: list[str], multirun: bool) -> list[list[str]]:
    """The override list of every job Hydra's basic sweeper would run, in its order (at most MAX_SWEEP_JOBS: its
    count is checked first, without building the list)."""
    if not multirun:
        return [list(overrides)]
    parsed = OverridesParser.create().parse_overrides(overrides)
    _check_count(parsed)
    values = {o.get_key_element(): _values(o) for o in parsed}  # a key given twice: its last, in its first place
    return [list(job) for job in itertools.product(*values.values())]


def _values(override: Override) -> list[str]:
    """One override as Hydra's basic sweeper runs it: `key=value`, once per value it sweeps (a list or a range)."""
    key = override.get_key_element()
    if not override.is_sweep_override():
        return [f"{key}={override.get_value_element_as_str()}"]
    if not override.is_discrete_sweep():
        raise HydraException(f"BasicSweeper does not support sweep type : {override.value_type.name}")
    return [f"{key}={value}" for value in override.sweep_string_iterator()]


def _check_count(parsed: list) -> None:
    """Refuse a sweep of more than MAX_SWEEP_JOBS jobs, counted by its swept values (a count stops past the bound:
    `range(0,1000000000)` is never walked)."""
    counts = {
        "repeats" if o.get_key_element() == "repeat" else o.get_key_element(): sum(
            1 for _ in itertools.islice(o.sweep_string_iterator(), MAX_SWEEP_JOBS + 1)
        )
        for o in parsed
        if o.is_sweep_override() and o.is_discrete_sweep()
    }
    capped = any(n > MAX_SWEEP_JOBS for n in counts.values())  # counted up to one past the bound
    if capped or math.prod(counts.values()) > MAX_SWEEP_JOBS:
        shown = " x ".join(f"{_count(n)} {key}" for key, n in counts.items())
        total = _count(MAX_SWEEP_JOBS + 1) if capped else f"{math.prod(counts.values()):,}"
        raise ConfigError(
            "-m", f"the sweep has {total} jobs ({shown}); accepted: at most {MAX_SWEEP_JOBS:,} jobs in one sweep"
        )


def _count(n: int) -> str:
    return f"over {MAX_SWEEP_JOBS:,}" if n > MAX_SWEEP_JOBS else f"{n:,}"


def check_repeats(value: str) -> None:
    """`repeats=N` before it becomes N jobs per config: a whole number up to MAX_REPEATS."""
    if value.isdigit() and int(value) > MAX_REPEATS:
        raise ConfigError("repeats", f"got {value}; accepted: a whole number from 1 to {MAX_REPEATS:,}")


@dataclasses.dataclass(frozen=True)
class SweepPlan:
    """The configs a command line runs (each once, whatever its repeats), composed and validated, and the jobs a
    world-size sweep leaves out (`2x2 x world_size 2`: micro x accumulation x world_size is not the effective
    batch)."""

    configs: list[DictConfig]
    left_out: list[str]
    jobs: list[tuple[int, int]]  # every job that runs, in the sweep's order: (its config in `configs`, its repeat)
    checked: list[JobConfig] = dataclasses.field(default_factory=list)  # each config as its check parsed it
    keys: dict[tuple[str, ...], int | None] = dataclasses.field(default_factory=dict)  # overrides -> its config

    def job(self, overrides: list[str]) -> JobConfig | None:
        """The checked config of the job of these overrides (a Hydra job's own), its repeat set; None for a
        combination the plan left out. KeyError for overrides of no job of the plan."""
        index = self.keys[_job_key(overrides)]
        if index is None:
            return None
        job = self.checked[index]
        repeat = _repeat(overrides, self.configs[index])
        return dataclasses.replace(job, config=dataclasses.replace(job.config, repeat=repeat))


def plan_sweep(config_name: str, overrides: list[str], multirun: bool) -> SweepPlan:
    """Compose and validate all jobs: each config once, however many repeats it runs (a job's `repeat` changes no
    check). A multirun that sweeps world_size keeps only the combinations whose split times world size is the
    effective batch (`world_size=1,2 batch.split=1x4,2x2,4x1,1x2,2x1` runs five); every world size must keep one.
    `configs`: one per config, in the sweep's order. Raises ConfigError on the first bad input."""
    try:
        job_overrides = expand_jobs(overrides, multirun)
    except (HydraException, OmegaConfBaseException) as err:
        raise translate(err) from None
    sweeps_world = len({dict(map(parse_override, job)).get("world_size") for job in job_overrides}) > 1
    repeats: dict[tuple[str, ...], list[list[str]]] = {}  # a config's overrides without `repeat` -> its jobs
    for job in job_overrides:
        repeats.setdefault(_job_key(job), []).append(job)
    configs, checked, left_out, kept_sizes, first_mismatch, index = [], [], [], set(), {}, {}
    for key, jobs in repeats.items():
        cfg = compose_job(config_name, jobs[0])
        try:
            job = validate(cfg)
        except (MissingMandatoryValue, InterpolationResolutionError, ValidationError) as err:
            raise translate(err) from None
        except ConfigError as err:
            mismatch = layout_mismatch(cfg) if sweeps_world and err.field == "batch.split" else None
            if mismatch is None:
                raise
            left_out += [f"{cfg.batch.split} x world_size {cfg.world_size}"] * len(jobs)
            first_mismatch.setdefault(cfg.world_size, mismatch)
            index[key] = None
            continue
        index[key] = len(configs)
        configs.append(cfg)
        checked.append(job)
        kept_sizes.add(cfg.world_size)
    for size, mismatch in first_mismatch.items():
        if size not in kept_sizes:
            raise ConfigError("world_size", f"{size} has no split in this sweep: {mismatch}")
    order = [
        (index[key], _repeat(job, configs[index[key]]))
        for job in job_overrides
        if (key := _job_key(job)) in index and index[key] is not None
    ]
    return SweepPlan(configs, left_out, order, checked, index)


def _job_key(job: list[str]) -> tuple[str, ...]:
    """A job's config overrides: without its repeat index, and without Hydra's own (which Hydra keeps apart)."""
    return tuple(o for o in job if (key := parse_override(o)[0]) != "repeat" and not key.startswith("hydra"))


def _repeat(job: list[str], cfg: DictConfig) -> int:
    value = dict(map(parse_override, job)).get("repeat")
    return int(value) if value is not None else cfg.repeat


@dataclasses.dataclass
class _Prechecked:
    """This process's command line as its precheck checked it: set by the command, read by each job's task."""

    plan: SweepPlan | None = None


PRECHECKED = _Prechecked()


def checked_job(cfg: DictConfig) -> JobConfig | None:
    """This Hydra job's config (`cfg`, as Hydra composed it) as the command line's precheck checked and parsed it;
    None for a combination of a world-size sweep that the precheck left out. A job that a launcher runs in another
    process (submitit) was checked where the command ran: it is checked again where it runs."""
    if PRECHECKED.plan is not None:
        try:
            return PRECHECKED.plan.job(list(HydraConfig.get().overrides.task))
        except KeyError:
            pass
    try:
        return validate(cfg)
    except ConfigError as err:
        if err.field == "batch.split" and layout_mismatch(cfg):
            return None
        raise
