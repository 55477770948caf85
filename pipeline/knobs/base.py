"""What a speed knob is: one setting that changes how a job trains fast (or how much memory it takes), not what it
learns, held in one module of `pipeline.knobs` with everything that reads it.

A knob module defines `KNOB`, an instance of a `Knob` subclass: its config key, default, help and choices (an enum,
or a bool), its rule against the stack, the device and the other knobs, its short name in a config's display name,
the values a study over everything tries, its term in the memory prediction (and its words in the docs), its
SFTConfig and model keywords, what it does to the job's data, adapters and built trainer, its words on a result
card, and the lines and helpers it adds to the exported script. Every method does nothing by default, so a knob says
only what it changes. No module outside the folder spells a knob's key: it asks the knobs, or the knob of a `KnobRole`.

No module of the folder imports torch at its top: the parent process reads them. The job-side functions import what
they use inside, and an exported script copies them as they are (`source`).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pipeline.knobs._memory import Memory, Slack  # noqa: F401 (re-exported: every knob reads them here)

CPU = "cpu"  # the gpu profile (and device) of a job measured on the CPU


def chosen(default: StrEnum, help: str, aliases: tuple[str, ...] = ()) -> Any:
    """A schema field whose value is one of `type(default)`'s members (or one of `aliases`, which its reader
    resolves)."""
    return field(default=default.value, metadata={"choices": type(default), "help": help, "aliases": aliases})


def installed(package: str) -> bool:
    """Whether the Python package `package` can be imported here (found without importing it)."""
    return importlib.util.find_spec(package) is not None


def source(path: Path, *names: str) -> str:
    """The source of top-level functions, classes and constants of the module at `path`, in the order named: what an
    exported script copies, so that it runs what the job runs."""
    text = path.read_text(encoding="utf-8")
    found: dict[str, str] = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            found[node.name] = ast.get_source_segment(text, node)
        elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            found[node.targets[0].id] = ast.get_source_segment(text, node)
    missing = [n for n in names if n not in found]
    if missing:
        raise KeyError(f"{path} has no {', '.join(missing)}")
    return "\n\n\n".join(found[n] for n in names)


# A fact of the run a study passes beside a config's knob values (`knobs.slack`): its micro-batches differ in shape.
VARYING = "micro_batches_vary"


class Compile(StrEnum):
    """What `train.torch_compile` compiles (its knob's choices, here because the other compile knobs and the loss
    read them too): nothing, each decoder layer on its own (regional), or the whole model."""

    OFF = "off"
    REGIONAL = "regional"  # `layer.compile()` on every decoder layer after the trainer is built; one graph for all
    WHOLE = "whole"  # the whole model, by the Trainer (SFTConfig torch_compile)

    @classmethod
    def of(cls, value: object) -> Compile:
        """The choice a config value names; `true` and `false` (old commands, YAML booleans) are aliases of
        regional and off. Raises ValueError on anything else."""
        text = str(value).lower()
        return cls(COMPILE_ALIASES.get(text, text))


class KnobRole(StrEnum):
    """What a module outside this folder finds a knob by where it must find one (`pipeline.knobs.role`), never its
    key: the settings the memory formula and the probes hold as their own."""

    DTYPE = "dtype"  # the precision the model computes in: the formula's bytes per element
    CHECKPOINTING = "checkpointing"  # whether the layers recompute: the formula's and the step estimate's
    COMPILE = "compile"  # what is compiled (a `Compile` value): the formula's
    ATTENTION = "attention"  # the attention kernels: the formula's
    LAYOUT = "layout"  # how a micro-batch's rows are laid out: the probes measure each searched one


COMPILE_ALIASES = {"true": Compile.REGIONAL.value, "false": Compile.OFF.value}
# the train.compile_mode values that record CUDA graphs (`compile_mode.CUDA_GRAPH_MODES`), here because the padding
# reads them too: under them a micro-batch padded to its longest is padded to a length bucket
CUDA_GRAPH_MODE_VALUES = ("reduce-overhead", "max-autotune")


@dataclass(frozen=True)
class Setting:
    """What a knob's rule is checked against: the config's train and model sections, its gpu profile, whether the
    job is meant for a CUDA device (a named card always is: the gpu check refuses one where there is none), and its
    gradient accumulation."""

    train: Any
    model: Any
    gpu: Any
    cuda: bool
    accumulation: int = 1


class Knob:
    """One speed knob. A subclass sets the class attributes and overrides the methods of what it changes."""

    key: str  # its config key, `section.name`
    default: StrEnum | bool  # an enum member (its enum is the choices) or a bool
    help: str
    aliases: Mapping[str, str] = MappingProxyType({})  # other spellings of a choice, e.g. `true` for `regional`
    short: str | None = None  # its name in a config's display name; None: its name
    searched: tuple[Any, ...] = ()  # the values a study over everything this setting can run tries
    role: KnobRole | None = None  # what another module finds it by, where one must (`KnobRole`)
    card: tuple[int, str] | None = None  # its place and words on a result card's setting line; None: not there
    term_text: tuple[str, str] | None = None  # its memory term in words, and beside what (the docs' table of terms)
    screen: int = 50  # its place in the model sampler's screening, lower first (`search._screening.screen_order`)

    @property
    def section(self) -> str:
        return self.key.partition(".")[0]

    @property
    def name(self) -> str:
        return self.key.partition(".")[2]

    @property
    def choices(self) -> type[StrEnum] | None:
        """Its enum; None for a bool."""
        return None if isinstance(self.default, bool) else type(self.default)

    @property
    def path(self) -> Path:
        """Its module's file (what an exported script copies helpers from)."""
        return Path(sys.modules[type(self).__module__].__file__)

    def field(self) -> dataclasses.Field:
        """Its field in the schema's dataclass of its section, with the choices and help on it."""
        if self.choices is None:
            return field(default=self.default, metadata={"help": self.help})
        return chosen(self.default, self.help, tuple(self.aliases))

    def value(self, section: Any) -> Any:
        """Its value in a config section (the schema's dataclass or a DictConfig)."""
        return getattr(section, self.name)

    def of(self, config: Any) -> Any:
        """Its value in a whole config (the schema's dataclasses or a DictConfig)."""
        return self.value(getattr(config, self.section))

    def set_in(self, config: Any, value: Any) -> None:
        """Set its value in a whole config (a DictConfig, or the schema's dataclasses)."""
        setattr(getattr(config, self.section), self.name, value)

    def same_job_as(self, value: Any, s: Setting) -> tuple[Any, str] | None:
        """None where `value` makes a job of its own in setting `s`; else the value whose job it runs there and why
        (a study tries one config of each job)."""
        return None

    def canonical(self, value: Any) -> Any:
        """The choice `value` names (an alias resolved); ValueError when it names none."""
        text = str(value)
        if self.choices is None:
            if text.lower() not in ("true", "false"):
                raise ValueError(text)
            return text.lower() == "true"
        if text in {m.value for m in self.choices}:
            return text
        if text.lower() in self.aliases:
            return self.aliases[text.lower()]
        raise ValueError(text)

    def accepted(self) -> str:
        """Its accepted values as a refusal names them, aliases in brackets."""
        if self.choices is None:
            return "true or false"
        names = ", ".join(m.value for m in self.choices)
        said = ", ".join(f"{alias} is {choice}" for alias, choice in self.aliases.items())
        return f"{names} ({said})" if said else names

    def source(self, *names: str) -> str:
        """Functions, classes and constants of its module, as an exported script copies them."""
        return source(self.path, *names)

    def searched_in(self, lengths_vary: bool, cuda: bool) -> tuple[Any, ...]:
        """The values a study over everything tries where the records' lengths vary or not, on a CUDA device or not:
        its `searched` values but those `dropped_in` leaves out there."""
        dropped = self.dropped_in(lengths_vary, cuda)
        return tuple(v for v in self.searched if v not in dropped)

    def dropped_in(self, lengths_vary: bool, cuda: bool) -> dict[Any, str]:
        """The `searched` values a study over everything leaves out there, each with why (the study names them):
        those that cannot run or cannot matter (padding, where every record has one length). None by default."""
        return {}

    # ---- the check, before anything runs --------------------------------------------------------------------------
    def refuses(self, s: Setting) -> str | None:
        """Why its value cannot run in `s`, then what is accepted (the text after `key: `); None when it can."""
        return None

    # ---- the parent's view of a job ----------------------------------------------------------------------------------
    def memory(self, value: Any) -> Memory:
        """Its term in the memory prediction at `value` (a choice, canonical)."""
        return Memory()

    def memory_in(self, value: Any, setting: Mapping[str, Any]) -> Memory:
        """Its term beside the job's setting (`train.dtype`, resolved, and the other knobs' values, as far as known)."""
        return self.memory(value)

    def slack_in(self, value: Any, setting: Mapping[str, Any]) -> Slack | None:
        """What the job's process may keep reserved and unused over the peak another process of it measured, by the
        order of its blocks (None: nothing): a fit that one run does not settle. `setting` may hold `VARYING`, true
        where the run's micro-batches differ in shape (a study passes it)."""
        return None

    def unmodelled(self, value: Any, setting: Mapping[str, Any]) -> str | None:
        """What of its value beside the job's other knobs moves the peak beyond its memory term (None: nothing): the
        predictor carries a line across it last (padding, the allocator: what is kept of earlier micro-batches)."""
        return None

    def sft_kwargs(self, train: Any, dtype: str, device: str) -> dict[str, Any]:
        """The SFTConfig arguments it sets; `dtype` and `device` are the job's, resolved."""
        return {}

    def recomputes(self, train: Any) -> bool:
        """Whether its value has the layers recompute their forward in the backward (the job's FLOPs count it)."""
        return False

    def packs(self, train: Any) -> bool:
        """Whether its value packs records into rows of max_length (the job reads the records that fill them)."""
        return False

    def truncates(self, train: Any) -> bool:
        """Whether the job's records come truncated to max_length before the collator (which enforces none)."""
        return False

    def one_shape(self, train: Any) -> bool:
        """Whether its value gives every micro-batch one shape, whatever the records' lengths."""
        return False

    def model_kwargs(self, model: Any) -> dict[str, Any]:
        """The model's `from_pretrained` (and `from_config`) arguments it sets, from the model section."""
        return {}

    def compiles(self, train: Any) -> bool:
        """Whether its value compiles code (the job then shares the sweep's compile cache)."""
        return False

    # ---- the job (torch is imported inside) -----------------------------------------------------------------------
    def process(self, train: Any, environ: dict) -> None:
        """Set up the job's process before it touches the device, in its environment `environ` (the allocator)."""

    def adapters(self, model: Any, lora: Any, train: Any, dtype: str) -> tuple[Any, Any]:
        """The model and the LoRA config the trainer gets (a PeftModel built here, then no config)."""
        return model, lora

    def trainer(self, trainer: Any, train: Any) -> str | None:
        """Change the built SFTTrainer; what it compiled, for the job's compile note (None: nothing)."""
        return None

    # ---- the exported script --------------------------------------------------------------------------------------
    def helpers(self, train: Any) -> list[str]:
        """The source of the functions the script's lines call (`source`)."""
        return []

    def adapter_lines(self, train: Any, dtype: str) -> list[str]:
        """The script's lines after its LoraConfig, as `adapters` does in the job."""
        return []

    def trainer_lines(self, train: Any) -> list[str]:
        """The script's lines after its trainer is built, as `trainer` does in the job."""
        return []

    def process_lines(self, train: Any) -> list[str]:
        """The script's lines at the start of its main, as `process` does in the job."""
        return []

    def needs(self, train: Any) -> tuple[str, ...]:
        """The packages the script needs for it beyond the training stack."""
        return ()
