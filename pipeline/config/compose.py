"""Compose one job's config with Hydra's compose API, as `hydra.main` would, and turn any failure of Hydra's or
OmegaConf's into one `ConfigError` naming the field and the accepted form.

Hydra reports a bad override with several lines and exit code 1, after it has created its output folders: the entry
points compose and check every job of the command line first (`config.plan`).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException, MissingConfigException, OverrideParseException
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import (
    ConfigAttributeError,
    ConfigKeyError,
    MissingMandatoryValue,
    OmegaConfBaseException,
    ValidationError,
)

from pipeline import knobs
from pipeline.config.accepted import choices_of
from pipeline.config.errors import ConfigError
from pipeline.config.schema import GROUPS, INTERNAL_KEYS, SECTIONS, Config, register_configs
from pipeline.config.store_checks import check_writable_dir

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


OUTPUT_DIRS = ("hydra.run.dir", "hydra.sweep.dir")  # where Hydra writes a run's or a sweep's own files


def compose_job(config_name: str, overrides: list[str]) -> DictConfig:
    """Compose one job's config (without the hydra node), translating every failure into a ConfigError."""
    register_configs()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3", job_name=config_name):
            cfg = compose(config_name=config_name, overrides=overrides, return_hydra_config=True)
        # Hydra's output folders where the command line moves them (by default they lie under paths.root, which is
        # checked with the stores): Hydra would fail to make one with a traceback, after the checks
        moved = {o.partition("=")[0].lstrip("+~") for o in overrides} & set(OUTPUT_DIRS)
        output_dirs = {key: str(OmegaConf.select(cfg, key)) for key in OUTPUT_DIRS if key in moved}
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
    for key, folder in output_dirs.items():
        check_writable_dir(key, folder)
    return cfg


def _check_known_keys(cfg: DictConfig) -> None:
    """`+key=value` and `++key=value` can add keys the schema lacks, to any section; refuse them like any unknown
    key, with the section's keys."""
    known = {f.name for f in dataclasses.fields(Config)}
    accepted = ", ".join(sorted(known - set(INTERNAL_KEYS)))
    for key in cfg:
        if key not in known:
            raise ConfigError(str(key), f"unknown key; accepted keys here: {accepted}")
    for group, schema in SECTIONS.items():
        fields = {f.name for f in dataclasses.fields(schema)}
        for key in cfg[group]:
            if key not in fields:
                raise ConfigError(f"{group}.{key}", f"unknown key; accepted keys here: {', '.join(sorted(fields))}")


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
                return ConfigError("optimize.space", f"Hydra adds no key to it with '='; accepted: {space_form()}")
            return ConfigError(key, f"unknown key; accepted keys here: {', '.join(_keys_near(key))}")
        if isinstance(cause, ValidationError) and key == "optimize.space":
            given = re.search(r"Cannot assign (\w+)", str(cause))
            return ConfigError(key, f"got {f'a {given.group(1)}' if given else 'no mapping'}; accepted: {space_form()}")
        if isinstance(cause, ValidationError) and "is not Optional" in str(cause):
            choices = choices_of(key)
            return ConfigError(key, f"got null; accepted: {', '.join(choices) if choices else 'a value, not null'}")
        if isinstance(cause, ValidationError):
            return ConfigError(key, _type_message(str(cause), choices_of(key)))
        if "does not support deletion" in str(cause):  # `~key`: the schema has every key, each with a default
            return ConfigError(key, f"'~{key}' deletes a key the config always has; accepted: {key}=<value>")
        return ConfigError(key, _first_line(cause))
    key = _key_from_message(str(err))
    return ConfigError(key or "override", _first_line(err))


def space_form() -> str:
    """The accepted form of `optimize.space`, its example the dtype knob's key and the values a study tries of it."""
    precision = knobs.role(knobs.KnobRole.DTYPE)
    example = f"{precision.key}:[{','.join(str(v) for v in precision.searched)}]"
    return f"'++optimize.space={{{example},...}}' (the whole space, config keys with their candidate values)"


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
    schema = SECTIONS.get(parent.split(".")[0]) if parent else Config
    if schema is None:
        return sorted(SECTIONS)
    return sorted(f.name for f in dataclasses.fields(schema) if schema is not Config or f.name not in INTERNAL_KEYS)


def _type_message(message: str, choices: tuple[str, ...] | None) -> str:
    """A value of the wrong type, and the accepted form (a list or mapping where one value goes: its choices)."""
    several = re.search(r"Cannot convert '(\w+)' to string: '(.*)'", message)
    if several:
        one = ", ".join(choices) if choices else "one value"
        return f"got a {several.group(1)} {several.group(2)}; accepted: {one} (to sweep several: a,b with -m)"
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


@functools.cache
def gpu_profiles() -> dict[str, dict]:
    """Every card profile in conf/gpu (read once), so a job can find the peak of the device it really runs on."""
    profiles = {}
    for path in sorted((CONF_DIR / "gpu").glob("*.yaml")):
        node = OmegaConf.load(path)
        if node.get("memory_gib"):
            profiles[path.stem] = {"memory_gib": node.memory_gib, "peak_tflops": node.peak_tflops}
    return profiles
