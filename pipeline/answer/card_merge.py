"""Result cards from several machines in one table by GPU (`python -m pipeline.report --cards a.json b.json`).

One row per config (its name without the model: `4x1`, `4x1 ckpt=off`), one column per GPU and setting, headed by
its device; a cell holds the config's step time, its time against the fastest of that card with the paired interval,
its rank and its peak. Cards of one GPU and one setting share a column: the newest card's, the others named under the
table with their date and answer (a card holds its rounds' results, not the rounds, so it cannot pool them). Cards
are grouped by setting (A, B, ...): columns of one setting can be compared; between settings the merge names every
key that differs, and only the ratios inside each column compare.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pipeline import exits
from pipeline.answer.card import Card, CardError, answer_line, load, setting_line
from pipeline.compare.paired import ratio_text
from pipeline.records import Status
from pipeline.render.rows import FASTEST
from pipeline.render.text import markdown_table

GROUPS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
VARIED = "varied"


def row_key(card: Card, record: dict) -> str:
    """A row's name without the card's model, so that one config lines up across cards of different models."""
    model, name = card.setting.get("model.name"), str(record["config"])
    return name[len(str(model)) + 1 :] if model is not None and name.startswith(f"{model} ") else name


def cell(record: dict) -> str:
    """`0.3480 s, 1.60x [1.42, 1.81], slower, 4.77 GiB`; a row without a step time says its status."""
    step = record["step_s"]
    if step is None:
        return str(record["status"])
    parts = [f"{step:.4f} s" + (f" ({record['runs']} runs)" if int(record["runs"]) > 1 else "")]
    ratio, low, high = record["time_vs_fastest"], record["time_low"], record["time_high"]
    rank = None if record["rank"] in ("-", None) else str(record["rank"])
    fastest = ratio == low == high == 1.0
    if ratio is not None and not (fastest and rank and rank.startswith(FASTEST)):
        parts.append(FASTEST if fastest else ratio_text(ratio, low, high))
    if rank:  # the fastest's rank says `fastest; equal with ...` itself: the ratio's `fastest` is not said twice
        parts.append(rank)
    if record["peak_gib"] is not None:
        parts.append(f"{record['peak_gib']:.2f} GiB")
    if record["status"] != Status.OK:
        parts.append(str(record["status"]))
    return ", ".join(parts)


def _value(card: Card, key: str) -> str:
    if key in card.setting:
        value = card.setting[key]
        return json.dumps(value) if isinstance(value, list | dict) else str(value)
    return VARIED if key in card.varying else "unset"


def groups(cards: list[Card]) -> list[str]:
    """Each card's setting group: cards with equal settings (and the same varied keys) share a letter."""
    seen: dict[str, str] = {}
    out = []
    for card in cards:
        key = json.dumps([card.setting, sorted(card.varying)], sort_keys=True, default=str)
        seen.setdefault(key, GROUPS[len(seen) % len(GROUPS)])
        out.append(seen[key])
    return out


def differences(cards: list[Card], labels: list[str]) -> list[str]:
    """`model.name: qwen3-1.7b (A), tiny (B)` for every key whose value differs between the cards' settings; where a
    group's `name` differs (`model.name`), the rest of that group follows from it and is left out."""
    keys = list(dict.fromkeys(k for c in cards for k in [*c.setting, *c.varying]))
    differ = [k for k in keys if len({_value(c, k) for c in cards}) > 1]
    named = {k.rsplit(".", 1)[0] for k in differ if k.endswith(".name")}
    shown = [k for k in differ if k.endswith(".name") or k.rsplit(".", 1)[0] not in named]
    lines = []
    for key in shown:
        by_value: dict[str, list[str]] = {}
        for card, label in zip(cards, labels, strict=True):
            by_value.setdefault(_value(card, key), [])
            if label not in by_value[_value(card, key)]:
                by_value[_value(card, key)].append(label)
        lines.append(f"{key}: " + ", ".join(f"{v} ({', '.join(ls)})" for v, ls in by_value.items()))
    return lines


def merge(named: list[tuple[str, Card]]) -> str:
    """The Markdown of the merged cards (`named`: each card with the name of its file)."""
    cards = [card for _, card in named]
    labels = groups(cards)
    facts = [["card", "device", "versions", "kind", "date", "setting"]]
    for (file, card), label in zip(named, labels, strict=True):
        versions = ", ".join(f"{k} {card.versions[k]}" for k in ("torch", "transformers", "trl") if k in card.versions)
        facts.append([file, card.device_text, versions, f"{card.kind} {card.name}", card.date, label])
    out = [f"# {len(cards)} result cards by GPU", "", markdown_table(facts), ""]
    for label in dict.fromkeys(labels):
        first = cards[labels.index(label)]
        out.append(f"- Setting {label}: {setting_line(first)}")
    diffs = differences(cards, labels)
    if diffs:
        out += [
            "",
            "The settings differ, so figures of different settings cannot be compared (only the ratios "
            "within each column can):",
            *(f"- {d}" for d in diffs),
        ]
    else:
        out += ["", "Every card has the same setting: the columns compare."]
    shown, others = columns(named, labels)
    out += ["", markdown_table(_by_config(shown)), ""]
    out += [f"- {file} ({card.device.name}): {answer_line(card.answer)}" for file, card, _ in shown]
    out += [
        f"- {file} ({card.device.name}, {label}, {card.date}): the same GPU and setting as {newest}, whose newer "
        f"card the column shows; its answer: {answer_line(card.answer)}"
        for file, card, label, newest in others
    ]
    return "\n".join(out) + "\n"


def columns(
    named: list[tuple[str, Card]], labels: list[str]
) -> tuple[list[tuple[str, Card, str]], list[tuple[str, Card, str, str]]]:
    """One column per GPU and setting: the newest card of each (in the order the cards were given), and the others
    with the file whose column stands for them."""
    groups: dict[tuple[str, str], list[tuple[str, Card, str]]] = {}
    for (file, card), label in zip(named, labels, strict=True):
        groups.setdefault((card.device_text, label), []).append((file, card, label))
    shown, others = [], []
    for members in groups.values():
        newest = max(members, key=lambda m: m[1].date)
        shown.append(newest)
        others += [(*m, newest[0]) for m in members if m is not newest]
    return shown, others


def _by_config(shown: list[tuple[str, Card, str]]) -> list[list[object]]:
    header = ["config", *(f"{card.device.name} ({file}, {label})" for file, card, label in shown)]
    keys = list(dict.fromkeys(row_key(card, r) for _, card, _ in shown for r in card.rows))
    cells = [{row_key(card, r): cell(r) for r in card.rows} for _, card, _ in shown]
    return [header, *([key, *(c.get(key, "-") for c in cells)] for key in keys)]


def merge_files(paths: list[Path]) -> str:
    """Merge the card files at `paths` (CardError names the first that is not one)."""
    return merge([(path.name, load(path)) for path in paths])


def merge_cards(paths: list[Path], out: Path) -> int:
    """`report --cards`: print the merged table and write it to `<out>/cards.md`; the exit code (2: a file that is
    no card, named in one line)."""
    try:
        text = merge_files(paths)
    except CardError as err:
        print(f"error: --cards: {err}; accepted: JSON files written by python -m pipeline.card", file=sys.stderr)
        return exits.BAD_INPUT
    out.mkdir(parents=True, exist_ok=True)
    (out / "cards.md").write_text(text, encoding="utf-8")
    print(text, end="")
    print(f"merged: {out / 'cards.md'}")
    return exits.OK
