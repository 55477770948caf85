"""`--help` of the entry points: what the command does, the config groups with their real options, the top-level
keys and examples, all read from conf/ and the schema (nothing copied by hand)."""

from __future__ import annotations

import dataclasses

from pipeline.config.compose import CONF_DIR
from pipeline.config.schema import GROUPS, Config

GROUP_ORDER = ("model", "lora", "gpu", "batch", "data", "train", "optimize", "experiment")


def group_options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def help_text(prog: str, doc: str) -> str:
    """The help of `python -m prog`, its module docstring `doc` first."""
    summary, _, examples = doc.strip().partition("\n\n")
    lines = [summary.strip(), "", f"usage: python -m {prog} [-m] [group=option ...] [key=value ...]", ""]
    lines.append("Config groups (group=option):")
    for group in GROUP_ORDER:
        fields = ""
        if group in GROUPS:
            fields = "; keys: " + ", ".join(f.name for f in dataclasses.fields(GROUPS[group]))
        lines.append(f"  {group:<11} {', '.join(group_options(group))}{fields}")
    top = [f.name for f in dataclasses.fields(Config) if f.name not in GROUPS and f.name not in ("repeat", "sweep_id")]
    lines += ["", "Top-level keys: " + ", ".join(top), "", "Examples:"]
    lines += [f"  {line.strip()}" for line in examples.strip().splitlines() if line.strip()]
    lines += [
        "",
        "-m runs a sweep (one isolated job per combination); --cfg job prints the composed config; "
        "--hydra-help shows Hydra's own options.",
        "Exit status: 0 all jobs finished under their cap, 1 a job failed or went over it, 2 bad input, "
        "3 nothing fits (optimize), 130 interrupted.",
    ]
    return "\n".join(lines)
