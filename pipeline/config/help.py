"""`--help` of the entry points: what the command does, the config groups with their real options, the top-level
keys, the speed knobs and examples, all read from conf/, the schema and the knobs' modules (nothing copied by
hand)."""

from __future__ import annotations

import dataclasses

from pipeline import knobs
from pipeline.config.accepted import choices_of, field_choices
from pipeline.config.compose import group_options
from pipeline.config.schema import GROUPS, INTERNAL_KEYS, Config

GROUP_ORDER = ("model", "lora", "gpu", "batch", "data", "train", "optimize", "experiment")


def help_text(prog: str, doc: str, sweeps: bool = True) -> str:
    """The help of `python -m prog`, its module docstring `doc` first; `sweeps`: whether it takes -m."""
    summary, _, examples = doc.strip().partition("\n\n")
    usage = f"usage: python -m {prog} {'[-m] ' if sweeps else ''}[-v] [group=option ...] [key=value ...]"
    lines = [summary.strip(), "", usage, ""]
    lines.append("Config groups (group=option):")
    for group in GROUP_ORDER:
        fields = ""
        if group in GROUPS:
            fields = "; keys: " + ", ".join(f.name for f in dataclasses.fields(GROUPS[group]))
        lines.append(f"  {group:<11} {', '.join(group_options(group))}{fields}")
    top = [f for f in dataclasses.fields(Config) if f.name not in GROUPS and f.name not in INTERNAL_KEYS]
    nested = [f for f in top if dataclasses.is_dataclass(f.default_factory)]
    lines += ["", "Other sections (section.key=value):"]
    lines += [
        f"  {f.name:<11} keys: {', '.join(k.name for k in dataclasses.fields(f.default_factory))}" for f in nested
    ]
    lines += ["", "Top-level keys: " + ", ".join(f.name for f in top if f not in nested)]
    lines += ["", "Keys with a fixed set of values (key=value):"]
    lines += [f"  {key:<27} {' | '.join(choices_of(key))}" for key in field_choices() if key not in knobs.by_key()]
    lines += ["", "Speed knobs (key=value; each is one module of pipeline/knobs/):"]
    for knob in knobs.registry():
        lines += [f"  {knob.key:<27} {' | '.join(choices_of(knob.key))}", f"  {'':<27} {knob.help}"]
    lines += ["", "Examples:"]
    lines += [f"  {line.strip()}" for line in examples.strip().splitlines() if line.strip()]
    lines += [
        "",
        ("-m runs a sweep (one isolated job per combination); " if sweeps else "")
        + "--cfg job prints the composed config; --hydra-help shows Hydra's own options.",
        "-v (--verbose, launcher.verbose=true) shows every line a job prints as it comes; without it each job's "
        "output goes to its log, job.log on its MLflow run, and its line counts the libraries' warnings there.",
        "Exit status: 0 all jobs finished (under the cap, where one is set), 1 a job failed or went over the cap, "
        "2 bad input, 3 nothing fits (optimize), 130 interrupted.",
    ]
    return "\n".join(lines)
