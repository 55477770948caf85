"""The search space: every split of the effective batch, times the knobs named in `optimize.space`; each candidate
checked by the same validation as a command line, so a value no job could run is refused before any job starts.

With `world_size` in the space (`optimize.space={world_size:[1,2]}`), the splits are those of every world size
searched, and a candidate is a split and a world size whose product is the effective batch (4 = 4x1 x 1 = 2x1 x 2):
the other pairs are invalid combinations, like any knob that cannot run with another. Each world size is checked
against the devices present (`validate.check_world_size`). The values no candidate can use, and the check of a
study's space, are `search._left_out`'s."""

from __future__ import annotations

import dataclasses
import functools
import itertools
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from pipeline import knobs
from pipeline.config.choices import DataKind, Distribution
from pipeline.config.errors import ConfigError
from pipeline.config.identity import config_id, display_name
from pipeline.config.job import JobConfig, parse_split
from pipeline.config.knobs import check_knobs, on_cuda, same_job, setting_of
from pipeline.config.schema import Config
from pipeline.config.validate import check_world_size, layout_mismatch, validate

SPLIT_KEY = "batch.split"
WORLD_KEY = "world_size"


def splits(effective: int, world_size: int) -> list[str]:
    """Every 'MxA' with M x A x world_size = effective, smallest micro-batch first."""
    per_device = effective // world_size if effective % world_size == 0 else 0
    return [f"{m}x{per_device // m}" for m in range(1, per_device + 1) if per_device % m == 0]


def override_text(value: Any) -> str:
    """A value as a Hydra override writes it (`true`, `bf16`, `[q_proj,v_proj]`)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list | tuple):
        return "[" + ",".join(override_text(v) for v in value) + "]"
    return "null" if value is None else str(value)


def choice_of(value: Any) -> Any:
    """A value as an Optuna categorical choice: scalars as they are, a list (`lora.target_modules`) as its override
    text, since a study's storage holds only None, bools, numbers and strings."""
    return override_text(value) if isinstance(value, list | tuple) else value


@dataclass(frozen=True)
class Candidate:
    """One point of the space: (config key, value) pairs, batch.split first, with the config they make (`config`:
    the schema's dataclasses, every knob's alias resolved) and the job it runs (`job`: the config as its check parsed
    it, made when it is first asked for: a space may hold thousands of points and a study runs a few)."""

    values: tuple[tuple[str, Any], ...]
    config: Config
    config_id: str
    label: str  # display name: the model, the split and every other searched value
    base: DictConfig = field(repr=False, compare=False)

    @cached_property
    def job(self) -> JobConfig:
        return validate(apply(self.base, self.values))

    @property
    def params(self) -> dict[str, Any]:
        """The values as the trial's params (Optuna's categorical choices: a list value as its override text)."""
        return {k: choice_of(v) for k, v in self.values}

    @property
    def split(self) -> str:
        return self.params[SPLIT_KEY]

    @property
    def overrides(self) -> list[str]:
        return [f"{k}={override_text(v)}" for k, v in self.values]


def apply(cfg: DictConfig, values: tuple[tuple[str, Any], ...]) -> DictConfig:
    """The base config with `values` set (a copy)."""
    out = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    OmegaConf.set_struct(out, True)
    with open_dict(out):
        for key, value in values:
            OmegaConf.update(out, key, value, merge=False)
    return out


def make_candidate(cfg: DictConfig, values: tuple[tuple[str, Any], ...]) -> Candidate:
    """A candidate with its config, checked by the whole validation; raises ConfigError when the values make an
    invalid config."""
    job = validate(apply(cfg, values))
    made = Candidate(values, job.config, job.config_id, "", cfg)
    made = dataclasses.replace(made, label=_label(made))
    made.__dict__["job"] = job
    return made


class Points:
    """Candidates of one base config that differ only in speed knobs, the split and the world size: the base is
    checked once, and each point by the rules its values meet (each knob's choices and rule, the split against the
    effective batch, the world size against the devices), on the schema's dataclasses: a space of every knob holds
    tens of thousands of combinations, which a whole validation each would take minutes to check."""

    def __init__(self, cfg: DictConfig) -> None:
        self.cfg = cfg
        self.job: JobConfig | None = None  # the first point the whole validation passed: the others differ from it
        self.knobs = knobs.by_key()

    def covers(self, keys: list[str]) -> bool:
        return all(k in self.knobs or k in (SPLIT_KEY, WORLD_KEY) for k in keys)

    def candidate(self, values: tuple[tuple[str, Any], ...]) -> Candidate:
        """The point `values` makes; raises ConfigError naming what cannot run, as the whole validation would. Until
        one point has passed the whole validation (the base's own split may not make its effective batch), each is
        checked by it."""
        if self.job is None:
            made = make_candidate(self.cfg, values)
            self.job = made.job
            return made
        base = self.job.config
        sections = {"train": base.train, "model": base.model, "batch": base.batch}
        changed: dict[str, dict[str, Any]] = {}
        top: dict[str, Any] = {}
        for key, value in values:
            if key == WORLD_KEY:
                top["world_size"] = int(value)
                continue
            if key in self.knobs:
                knob = self.knobs[key]
                try:
                    value = knob.canonical(value)
                except ValueError:
                    raise ConfigError(key, f"got '{value}'; accepted: {knob.accepted()}") from None
            section, _, name = key.partition(".")
            changed.setdefault(section, {})[name] = value
        made = {name: dataclasses.replace(sections[name], **fields) for name, fields in changed.items()}
        config = dataclasses.replace(base, **made, **top)
        split = parse_split(config.batch.split)
        mismatch = layout_mismatch(config)
        if mismatch:
            raise ConfigError(SPLIT_KEY, mismatch)
        check_knobs(config.train, config.model, config.gpu, split.accumulation)
        if WORLD_KEY in top:
            check_world_size(config)
        made = Candidate(values, config, config_id(dataclasses.asdict(config)), "", self.cfg)
        return dataclasses.replace(made, label=_label(made))


def world_sizes(cfg: DictConfig) -> list[int]:
    """The world sizes a study searches: those of `optimize.space.world_size`, else the config's own."""
    searched = cfg.optimize.space.get(WORLD_KEY) if "optimize" in cfg else None
    return [int(w) for w in searched] if searched else [cfg.world_size]


def all_splits(effective: int, sizes: list[int]) -> list[str]:
    """The splits of every world size in `sizes`, each once, by micro-batch then accumulation."""
    found = {s for w in sizes if w >= 1 for s in splits(effective, w)}
    return sorted(found, key=lambda s: (parse_split(s).micro, parse_split(s).accumulation))


def _lengths_vary(cfg: DictConfig) -> bool:
    return not (cfg.data.kind == DataKind.SYNTHETIC and cfg.data.distribution == Distribution.FIXED)


def knob_space(cfg: DictConfig) -> dict[str, list[Any]]:
    """The splits, then every knob's values where `optimize.every_knob` asks for them, then `optimize.space` (whose
    values for a knob replace the knob's own)."""
    space = {SPLIT_KEY: all_splits(cfg.batch.effective, world_sizes(cfg))}
    if cfg.optimize.every_knob:
        space.update(knobs.searched(lengths_vary=_lengths_vary(cfg), cuda=on_cuda(cfg.gpu)))
    for key, values in cfg.optimize.space.items():
        if len(values):
            space[key] = [OmegaConf.to_container(v) if OmegaConf.is_config(v) else v for v in values]
    return space


@dataclass(frozen=True)
class LeftOut:
    """A value of the space that no valid config uses on this setting, and why (the real blocker)."""

    key: str
    value: Any
    reason: str

    def text(self) -> str:
        return f"{self.key}={override_text(self.value)}: {self.reason.removeprefix(f'{self.key}: ')}"


def left_out_lines(left_out: list[LeftOut]) -> list[str]:
    """The values left out as the study says them: a line above, then one value a line, with why."""
    return ["left out of the space, each with why:", *(f"  {x.text()}" for x in left_out)] if left_out else []


def combinations(cfg: DictConfig) -> tuple[list[Candidate], dict[str, str]]:
    """Every valid candidate, and every invalid combination of the space (`key=value key=value`) with the reason
    (bf16 on a card without it, CUDA graphs with accumulation)."""
    space = knob_space(cfg)
    keys = list(space)
    points = Points(cfg)
    make = points.candidate if points.covers(keys) else functools.partial(make_candidate, cfg)
    valid, invalid = [], {}
    for combo in itertools.product(*(space[k] for k in keys)):
        values = tuple(zip(keys, combo, strict=True))
        try:
            valid.append(make(values))
        except ConfigError as err:
            invalid[_combination(values)] = str(err)
    valid = _one_per_job(valid, invalid)
    return _named_by_what_varies(valid, set(cfg.optimize.space)), invalid


def _combination(values: tuple[tuple[str, Any], ...]) -> str:
    return " ".join(f"{k}={override_text(v)}" for k, v in values)


def _one_per_job(valid: list[Candidate], invalid: dict[str, str]) -> list[Candidate]:
    """The candidates less those that run another's job (adapters in the compute dtype when it is fp32): each such
    one goes to `invalid`, with the value it stands for and why, where its twin is in the space."""
    present = {_combination(c.values) for c in valid}  # as text: a value may be a list (lora.target_modules)
    kept = []
    for c in valid:
        setting = setting_of(
            c.config.train, c.config.model, c.config.gpu, parse_split(c.config.batch.split).accumulation
        )
        moved = same_job(setting)
        twin = tuple((k, moved[k][0] if k in moved else v) for k, v in c.values)
        if twin == c.values or _combination(twin) not in present:
            kept.append(c)
            continue
        key = next(k for k, v in c.values if k in moved and v != moved[k][0])
        invalid[_combination(c.values)] = f"{key}: the same job as {override_text(moved[key][0])} here: {moved[key][1]}"
    return kept


def _named_by_what_varies(valid: list[Candidate], named: set[str]) -> list[Candidate]:
    """The candidates with a display name of the keys that vary among them or that `optimize.space` names: a knob
    `optimize.every_knob` added that every valid config holds at one value (the only compile mode the CPU runs)
    says nothing of a config."""
    seen: dict[str, set[str]] = {}
    for c in valid:
        for key, value in c.values:
            seen.setdefault(key, set()).add(override_text(value))
    constant = {key for key, values in seen.items() if len(values) == 1 and key not in named}
    if not constant:
        return valid
    return [dataclasses.replace(c, label=_label(c, constant)) for c in valid]


def _label(c: Candidate, leave_out: set[str] = frozenset()) -> str:
    shown = [(k, v) for k, v in c.values if k != SPLIT_KEY and k not in leave_out]
    return display_name(c.config.model.name, c.config.batch.split, shown)


def not_searched(cfg: DictConfig) -> list[LeftOut]:
    """The knobs' searched values `optimize.every_knob` leaves out on this setting, where `optimize.space` does not
    name the knob's values itself."""
    if not cfg.optimize.every_knob:
        return []
    dropped = knobs.dropped(lengths_vary=_lengths_vary(cfg), cuda=on_cuda(cfg.gpu))
    named = set(cfg.optimize.space)
    return [
        LeftOut(key, value, why) for key, values in dropped.items() if key not in named for value, why in values.items()
    ]


def suggest(trial, space: dict[str, list[Any]]) -> tuple[tuple[str, Any], ...]:
    """The sampler's proposal: a value of every key of the space."""
    found = []
    for key, values in space.items():
        chosen = trial.suggest_categorical(key, [choice_of(v) for v in values])
        found.append((key, next(v for v in values if choice_of(v) == chosen)))
    return tuple(found)
