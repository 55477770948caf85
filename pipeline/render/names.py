"""A config's name as its difference from a reference config's: `4x1 loss=compiled` beside `tiny 1x4 loss=trl
dtype=fp32`. A name lists the model, the split and every key that varies (`config.identity.display_name`), so a
study over many knobs repeats each of them on every row; what a row differs by is what a reader compares, and what
a table 120 columns wide has room for (`render.compact`, the study's trials)."""

from __future__ import annotations

POSITIONAL = ("model", "split")  # what a name's first words say, before its `key=value` words


def words(name: str) -> dict[str, str]:
    """A display name's words by what each says: the model, the split, then each `key=value` by its key."""
    found: dict[str, str] = {}
    for i, word in enumerate(name.split()):
        key = word.partition("=")[0] if "=" in word else POSITIONAL[i] if i < len(POSITIONAL) else word
        found[key] = word
    return found


def difference(name: str, reference: str) -> str:
    """The words of `name` that `reference` does not have alike (`4x1 loss=compiled`); '' where none differ."""
    theirs = words(reference)
    return " ".join(word for key, word in words(name).items() if theirs.get(key) != word)


def shown_names(names: list[str], reference: str | None) -> dict[str, str]:
    """Each name as a compact table shows it: the reference in full, every other by its difference from the
    reference (in full where it has none: a name the reference's words cannot tell apart)."""
    if reference is None:
        return {name: name for name in names}
    return {name: (difference(name, reference) or name) if name != reference else name for name in names}
