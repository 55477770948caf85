"""Hydra's `glob(...)` in a multirun's overrides, read before Hydra runs anything.

Hydra's sweeper expands `group=glob(pattern)` with its config loader, which the precheck (`compose.plan_sweep`) has
not: there it failed as `ConfigLoader is not set`. The command line's globs are expanded here, for the precheck and
for Hydra alike.
"""

from __future__ import annotations

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ValueType
from hydra.errors import OverrideParseException

from pipeline.config.compose import CONF_DIR, group_options
from pipeline.config.errors import ConfigError


def expand_globs(overrides: list[str]) -> list[str]:
    """A multirun's `group=glob(pattern)` as the list of the group's options it picks (conf/<group>/*.yaml, as
    Hydra's sweeper would pick them, less the schemas it would add), so that the precheck and Hydra run the same
    jobs; a glob of a key that is no config group, or one that picks nothing, is refused."""
    if not any("glob(" in o for o in overrides):
        return overrides
    parser = OverridesParser.create()
    expanded = []
    for text in overrides:
        try:
            override = parser.parse_override(text)
        except OverrideParseException:
            expanded.append(text)  # refused, with its own line, where it is composed
            continue
        if override.value_type is not ValueType.GLOB_CHOICE_SWEEP:
            expanded.append(text)
            continue
        key, pattern = override.key_or_group, text.partition("=")[2]
        groups = sorted(p.name for p in CONF_DIR.iterdir() if p.is_dir() and p.name != "hydra")
        if key not in groups:
            raise ConfigError(
                key,
                f"{pattern} picks among a config group's options, and {key} is no group; accepted: its values "
                f"listed ({key}=a,b,c), or a glob of a group ({', '.join(groups)})",
            )
        picked = override.value().filter(group_options(key))
        if not picked:
            raise ConfigError(key, f"{pattern} picks none of its options; accepted: {', '.join(group_options(key))}")
        expanded.append(f"{override.get_key_element()}={','.join(picked)}")
    return expanded
