"""The values a config field accepts, read off the schema (`config.schema`): a field with a fixed set of values keeps
them on the field as its enum and aliases (`chosen(...)`), which validation, `--help`, the configuration reference and
the test of the YAML comments read through here; a boolean field accepts true and false."""

from __future__ import annotations

import dataclasses
from enum import StrEnum

from pipeline.config.schema import SECTIONS


def field_choices() -> dict[str, tuple[type[StrEnum], tuple[str, ...]]]:
    """Every field with a fixed set of values, by its dotted key: (its enum, its aliases)."""
    found = {}
    for section, schema in SECTIONS.items():
        for f in dataclasses.fields(schema):
            if "choices" in f.metadata:
                found[f"{section}.{f.name}"] = (f.metadata["choices"], f.metadata["aliases"])
    return found


def choices_of(key: str) -> tuple[str, ...] | None:
    """The accepted values of the field at `key` (its enum's, then its aliases), or None for a field without a
    fixed set; true and false for a boolean field."""
    section, _, name = key.partition(".")
    schema = SECTIONS.get(section)
    spec = next((f for f in dataclasses.fields(schema) if f.name == name), None) if schema else None
    if spec is None:
        return None
    if "choices" in spec.metadata:
        return (*(m.value for m in spec.metadata["choices"]), *spec.metadata["aliases"])
    return ("true", "false") if spec.type in ("bool", bool) else None
