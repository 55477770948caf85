"""The configuration reference of the docs, generated from what the tool reads: the config groups and their options
(conf/, each option's first comment line), every key of the schema (`config.schema`) with its type, default (the
default composition's), accepted values (the field's enum and aliases, each value's comment where its enum has one)
and help (the field's, else the comment beside it in its group's default YAML or in the schema), and every speed
knob from its module (`pipeline.knobs`). Nothing is copied by hand, so the page cannot drift from what the tool
accepts: `docs/hooks.py` writes it into docs/reference/configuration.md at build time, and tests/test_docs.py
compares it with the schema."""

from __future__ import annotations

import dataclasses
import inspect
import io
import re
import tokenize
from enum import StrEnum
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from pipeline import knobs
from pipeline.config.accepted import choices_of
from pipeline.config.compose import CONF_DIR, compose_job, group_options
from pipeline.config.schema import GROUPS, INTERNAL_KEYS, Config

OTHER_GROUPS = ("experiment", "hydra/launcher")  # groups of conf/ without a schema of their own


def default_options() -> dict[str, str]:
    """Each group's option in the primary config's defaults list (conf/config.yaml)."""
    entries = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "config.yaml").defaults)
    return {
        group: str(option)
        for entry in entries
        if isinstance(entry, dict)
        for group, option in entry.items()
        if option is not None and not group.startswith("override ")
    }


def option_summary(group: str, option: str) -> str:
    """The first sentence of the comment that opens conf/<group>/<option>.yaml (`@package` lines aside), or ''."""
    said = []
    for line in (CONF_DIR / group / f"{option}.yaml").read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        if not line.startswith("# @package"):
            said.append(line.lstrip("# ").strip())
    text = " ".join(said)
    end = re.search(r"\.(\s|$)", text)
    return text[: end.start() + 1] if end else text


def yaml_comments(path: Path) -> dict[str, str]:
    """The comment beside each key of a YAML file (`section.key` for a key under a section), with the comment-only
    lines that continue it."""
    found: dict[str, str] = {}
    last, section = None, ""
    for line in path.read_text(encoding="utf-8").splitlines():
        keyed = re.match(r"^( *)([A-Za-z_]\w*):([^#]*)(?:#\s?(.*))?$", line)
        if keyed:
            indent, name, value, comment = keyed.groups()
            if not indent:
                section = name if not value.strip() else ""
            key = f"{section}.{name}" if indent and section else name
            last = key if comment else None
            if comment:
                found[key] = comment.strip()
        elif last and re.match(r"^\s+#", line):
            found[last] += " " + line.strip().lstrip("# ").strip()
        else:
            last = None
    return found


def source_comments(obj: Any) -> dict[str, str]:
    """The comment at the end of each `name: ...` or `NAME = ...` line in the source of a class."""
    found = {}
    tokens = tokenize.generate_tokens(io.StringIO(inspect.getsource(obj)).readline)
    line_name: dict[int, str] = {}
    for token in tokens:
        if token.type == tokenize.NAME and token.start[1] == 4 and token.start[0] not in line_name:
            line_name[token.start[0]] = token.string
        elif token.type == tokenize.COMMENT and token.start[0] in line_name:
            found[line_name[token.start[0]]] = token.string.lstrip("# ").strip()
    return found


def accepted(key: str, spec: dataclasses.Field) -> str:
    """The accepted values of a field with a fixed set, each with its enum's comment, aliases last."""
    values = choices_of(key)
    if values is None:
        return ""
    enum = spec.metadata.get("choices")
    said = source_comments(enum) if isinstance(enum, type) and issubclass(enum, StrEnum) else {}
    names = {m.value: m.name for m in enum} if enum else {}
    knob = knobs.by_key().get(key)
    aliases = dict(knob.aliases) if knob else {}
    parts = []
    for value in values:
        note = said.get(names.get(value, ""), "")
        if value in aliases:
            note = f"means `{aliases[value]}`"
        parts.append(f"`{value}`" + (f" ({note})" if note else ""))
    return ", ".join(parts)


def sections() -> list[tuple[str, type | None]]:
    """The config's sections in the order of `--help`: the groups, the other sections, then the top-level keys."""
    nested = [
        (f.name, f.default_factory)
        for f in dataclasses.fields(Config)
        if f.name not in GROUPS and dataclasses.is_dataclass(f.default_factory)
    ]
    return [*GROUPS.items(), *nested, ("", Config)]


def key_rows(section: str, schema: type, defaults: Any, comments: dict[str, str]) -> list[list[str]]:
    """One row per key of a section: key, type, default, accepted values, help."""
    rows = []
    schema_comments = source_comments(schema)
    knob_keys = knobs.by_key()
    for spec in dataclasses.fields(schema):
        key = f"{section}.{spec.name}" if section else spec.name
        if not section and (
            spec.name in GROUPS or spec.name in INTERNAL_KEYS or dataclasses.is_dataclass(spec.default_factory)
        ):
            continue
        knob = knob_keys.get(key)
        said = comments.get(key) or comments.get(spec.name) or schema_comments.get(spec.name, "")
        help_text = knob.help if knob else spec.metadata.get("help") or said
        default = OmegaConf.to_container(defaults, resolve=False).get(spec.name) if defaults is not None else None
        rows.append([f"`{key}`", str(spec.type), f"`{_yaml(default)}`", accepted(key, spec), help_text])
    return rows


def _yaml(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    cell = lambda text: str(text).replace("|", "\\|")  # noqa: E731 - one escape, used per cell
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]


def groups_markdown() -> list[str]:
    """The table of every config group's options, the default marked."""
    chosen = default_options()
    rows = []
    for group in [*GROUPS, *OTHER_GROUPS]:
        for option in group_options(group):
            mark = " (default)" if chosen.get(group) == option else ""
            rows.append([f"`{group}`", f"`{option}`{mark}", option_summary(group, option)])
    return [
        "## Config groups",
        "",
        "Pick an option with `group=option`.",
        "",
        *_table(["group", "option", "what it is"], rows),
    ]


def keys_markdown() -> list[str]:
    """A table of keys per section, each under the section's docstring."""
    cfg = compose_job("config", [])
    chosen = default_options()
    lines = []
    for section, schema in sections():
        title = f"`{section}`" if section else "Top-level keys"
        yaml = CONF_DIR / section / f"{chosen[section]}.yaml" if section in chosen else CONF_DIR / "config.yaml"
        comments = yaml_comments(yaml) if yaml.exists() else {}
        defaults = cfg[section] if section else cfg
        lines += ["", f"## {title}", ""]
        doc = inspect.getdoc(schema) or ""
        if doc and not doc.startswith(f"{schema.__name__}("):  # a dataclass without a docstring has its signature
            lines += [" ".join(doc.split()), ""]
        rows = key_rows(section, schema, defaults, comments)
        lines += _table(["key", "type", "default", "accepted values", "help"], rows)
    return lines


def knobs_markdown() -> list[str]:
    """Each speed knob from its module: its key, default, values, name in a config's name, and the module's text."""
    lines = ["", "## Speed knobs", ""]
    lines += ["Each is one module of `pipeline/knobs/`, which validation, `--help`, the job, the exported script, the"]
    lines += ["memory predictor and the search all read (adding one: [Development](../development.md)).", ""]
    for knob in knobs.registry():
        default = knob.default.value if isinstance(knob.default, StrEnum) else _yaml(knob.default)
        values = ", ".join(f"`{v}`" for v in choices_of(knob.key))
        module = inspect.getdoc(inspect.getmodule(type(knob))) or ""
        text = " ".join(module.split()).removeprefix(f"{knob.key}:").strip()
        lines += [f"### `{knob.key}`", "", text[:1].upper() + text[1:], ""]
        lines += [f"Default `{default}`; accepted: {values}; in a config's name: `{knob.short or knob.name}=`.", ""]
    return lines


def markdown() -> str:
    """The whole generated reference, as Markdown."""
    return "\n".join([*groups_markdown(), *keys_markdown(), *knobs_markdown()]) + "\n"
