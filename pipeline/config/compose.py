"""Compose and validate every job of a command line before Hydra runs anything.

Hydra reports a bad override with several lines and exit code 1, after it has created its output folders. The entry
points call `plan_sweep` first: it expands a multirun into its jobs, composes each with Hydra's compose API, applies
`validate`, and turns any failure into one `ConfigError` naming the field and the accepted form. The plan keeps each
config as its check parsed it (`config.job`): what each job's task receives (`jobs.context.checked_job`).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, MissingConfigException, OverrideParseException
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import (
    ConfigAttributeError,
    ConfigKeyError,
    InterpolationResolutionError,
    MissingMandatoryValue,
    OmegaConfBaseException,
    ValidationError,
)

from pipeline.config.errors import ConfigError
from pipeline.config.job import JobConfig
from pipeline.config.schema import GROUPS, INTERNAL_KEYS, Config, register_configs
from pipeline.config.validate import layout_mismatch, validate

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
_TYPE_WORDS = {
    "bool": "true or false",
    "Integer": "an integer",
    "Float": "a number",
    "Boolean": "true or false",
    "String": "a string",
}


def group_options(group: str) -> list[str]:
    """The options of a config group: its files in conf/."""
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


MAX_SWEEP_JOBS = 1000  # configs x repeats: at a few seconds a job at the least, a sweep of hours
MAX_REPEATS = MAX_SWEEP_JOBS


def expand_jobs(overrides: list[str], multirun: bool) -> list[list[str]]:
    """The override list of every job Hydra's basic sweeper would run, in its order (at most MAX_SWEEP_JOBS: its
    count is checked first, without building the list)."""
    if not multirun:
        return [list(overrides)]
    parsed = OverridesParser.create().parse_overrides(overrides)
    _check_count(parsed)
    return BasicSweeper.split_arguments(parsed, max_batch_size=None)[0]


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


def compose_job(config_name: str, overrides: list[str]) -> DictConfig:
    """Compose one job's config (without the hydra node), translating every failure into a ConfigError."""
    register_configs()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3", job_name=config_name):
            cfg = compose(config_name=config_name, overrides=overrides, return_hydra_config=True)
        with open_dict(cfg):
            del cfg["hydra"]
    except (HydraException, OmegaConfBaseException) as err:
        raise translate(err) from None
    finally:
        GlobalHydra.instance().clear()
    try:
        _check_known_keys(cfg)
    except OmegaConfBaseException as err:  # a group deleted with ~group
        raise translate(err) from None
    return cfg


def _check_known_keys(cfg: DictConfig) -> None:
    """`+key=value` can add keys the schema lacks; refuse them like any unknown key."""
    known = {f.name for f in dataclasses.fields(Config)}
    accepted = ", ".join(sorted(known - set(INTERNAL_KEYS)))
    for key in cfg:
        if key not in known:
            raise ConfigError(str(key), f"unknown key; accepted keys here: {accepted}")
    for group, schema in GROUPS.items():
        fields = {f.name for f in dataclasses.fields(schema)}
        for key in cfg[group]:
            if key not in fields:
                raise ConfigError(f"{group}.{key}", f"unknown key; accepted keys here: {', '.join(sorted(fields))}")


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
    sweeps_world = len({dict(map(_key_value, job)).get("world_size") for job in job_overrides}) > 1
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
    return tuple(o for o in job if (key := _key_value(o)[0]) != "repeat" and not key.startswith("hydra"))


def _repeat(job: list[str], cfg: DictConfig) -> int:
    value = dict(map(_key_value, job)).get("repeat")
    return int(value) if value is not None else cfg.repeat


def _key_value(override: str) -> tuple[str, str]:
    key, _, value = override.partition("=")
    return key.lstrip("+~"), value


def translate(err: BaseException) -> ConfigError:
    """Map a Hydra or OmegaConf exception to a one-line ConfigError."""
    if isinstance(err, MissingConfigException):
        return _missing_option(err)
    if isinstance(err, OverrideParseException):
        return _unparsable(err)
    cause = err
    while cause.__cause__ is not None and not isinstance(cause, OmegaConfBaseException):
        cause = cause.__cause__
    if isinstance(cause, OmegaConfBaseException):
        key = getattr(cause, "full_key", None) or _key_from_message(str(err)) or "config"
        if isinstance(cause, MissingMandatoryValue):
            options = group_options(key) if key in GROUPS else []
            accepted = " or ".join(f"{key}={o}" for o in options) if options else f"{key}=..."
            return ConfigError(key, f"required but not set; accepted: {accepted}")
        if isinstance(cause, (ConfigKeyError, ConfigAttributeError)) and re.search(r"not in (struct|')", str(cause)):
            if key.startswith("optimize.space."):
                return ConfigError("optimize.space", f"Hydra adds no key to it with '='; accepted: {SPACE_FORM}")
            return ConfigError(key, f"unknown key; accepted keys here: {', '.join(_keys_near(key))}")
        if isinstance(cause, ValidationError) and key == "optimize.space":
            given = re.search(r"Cannot assign (\w+)", str(cause))
            return ConfigError(key, f"got {f'a {given.group(1)}' if given else 'no mapping'}; accepted: {SPACE_FORM}")
        if isinstance(cause, ValidationError):
            return ConfigError(key, _type_message(str(cause)))
        return ConfigError(key, _first_line(cause))
    key = _key_from_message(str(err))
    return ConfigError(key or "override", _first_line(err))


SPACE_FORM = (
    "'++optimize.space={train.dtype:[fp16,bf16],...}' (the whole space, config keys with their candidate values)"
)


def _unparsable(err: OverrideParseException) -> ConfigError:
    """An override Hydra's grammar cannot read: named by its key where one can be made out, with how to quote."""
    override = getattr(err, "override", "") or ""
    key, sep, value = override.partition("=")
    key = key.lstrip("+~")
    if sep and re.fullmatch(r"[\w.\-/@]+", key):
        return ConfigError(
            key,
            f"{value!r} cannot be read by Hydra's override grammar; accepted: a plain value, or one in quotes "
            f"(key='a value' or key=\"a value\"), a,b,c to sweep with -m",
        )
    return ConfigError("override", f"{_first_line(err)}; accepted: key=value, group=option, a,b,c to sweep with -m")


def _missing_option(err: MissingConfigException) -> ConfigError:
    missing = err.missing_cfg_file or ""
    group, _, option = missing.rpartition("/")
    if not group:
        return ConfigError("config", _first_line(err))
    options = sorted(o for o in (err.options or []) if not o.endswith("_schema"))
    if not options:
        options = sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))
    return ConfigError(group, f"unknown option '{option}'; accepted: {', '.join(options)}")


def _keys_near(full_key: str) -> list[str]:
    parent = full_key.rpartition(".")[0]
    schema = GROUPS.get(parent.split(".")[0]) if parent else Config
    if schema is None:
        return ["see conf/"]
    return [f.name for f in dataclasses.fields(schema) if schema is not Config or f.name not in INTERNAL_KEYS]


def _type_message(message: str) -> str:
    value = re.search(r"Value '([^']*)'", message)
    kind = re.search(r"converted to (\w+)", message) or re.search(r"is not a valid (bool)", message)
    if kind:
        expected = _TYPE_WORDS.get(kind.group(1), kind.group(1))
        return f"got '{value.group(1) if value else '?'}'; accepted: {expected}"
    return _first_line(message)


def _key_from_message(message: str) -> str | None:
    match = re.search(r"full_key: ([\w.\-]+)", message) or re.search(r"override '?([\w.\-]+)=", message)
    return match.group(1) if match else None


def _first_line(err: BaseException | str) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def resolved_container(cfg: DictConfig) -> dict:
    """The config as plain data with every interpolation resolved."""
    return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)
