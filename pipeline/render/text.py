"""The plain text pieces every table of the tool is written with: a number or a dash, a median with its interval,
an aligned Markdown table, and the same fitted to the console's width (its long cells wrapped) with the lines
beside it."""

from __future__ import annotations

import textwrap

from pipeline.summaries import Interval


def num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def interval_text(median: float, ci: Interval, confidence: float) -> str:
    """`0.2615 [0.1840, 0.3390]`, with the interval's real coverage added when it falls short of `confidence`; one
    steady step has none (`0.0288 (1 step)`, where `[0.0288, 0.0288] (0%)` read as an interval)."""
    if ci.level <= 0:
        return f"{median:.4f} (1 step)"
    text = f"{median:.4f} [{ci.low:.4f}, {ci.high:.4f}]"
    if ci.level < confidence - 1e-12:
        text += f" ({100 * ci.level:.0f}%)"
    return text


def markdown_table(lines: list[list[object]]) -> str:
    """A header row then data rows, as an aligned Markdown table ('|' in a cell escaped)."""
    cells = [[str(c).replace("|", "\\|") for c in line] for line in lines]
    widths = [max(len(line[i]) for line in cells) for i in range(len(cells[0]))]
    out = ["| " + " | ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) + " |" for line in cells]
    out.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(out)


WIDTH = 120  # the console's tables and lines, unless `wide=true`


def table_width(lines: list[list[object]]) -> int:
    """The width of `markdown_table(lines)`, its cells unwrapped."""
    return _width([max(len(str(line[i])) for line in lines) for i in range(len(lines[0]))])


def _width(widths: list[int]) -> int:
    return sum(widths) + 3 * len(widths) + 1


def fitted_table(lines: list[list[object]], width: int = WIDTH, wrapped: tuple[int, ...] = (0,)) -> str:
    """`markdown_table` no wider than `width`: the cells of the `wrapped` columns (by index) break at spaces onto
    continuation rows (the other cells empty), the widest column narrowed first, down to its longest word (a word
    breaks only where the table cannot fit otherwise)."""
    cells = [[str(c).replace("|", "\\|") for c in line] for line in lines]
    widths = [max(len(line[i]) for line in cells) for i in range(len(cells[0]))]
    for floor in (_longest_words(cells, wrapped), dict.fromkeys(wrapped, 8)):
        while _width(widths) > width:
            narrower = [i for i in wrapped if widths[i] > max(floor[i], len(cells[0][i]))]
            if not narrower:
                break
            widths[max(narrower, key=lambda i: widths[i])] -= 1
    out = []
    for n, line in enumerate(cells):
        parts = [
            textwrap.wrap(c, widths[i], break_on_hyphens=False) or [""] if i in wrapped and n else [c]
            for i, c in enumerate(line)
        ]
        for k in range(max(len(p) for p in parts)):
            row = [(p[k] if k < len(p) else "").ljust(w) for p, w in zip(parts, widths, strict=True)]
            out.append("| " + " | ".join(row) + " |")
    out.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(out)


def _longest_words(cells: list[list[str]], wrapped: tuple[int, ...]) -> dict[int, int]:
    return {i: max((len(word) for line in cells[1:] for word in line[i].split()), default=0) for i in wrapped}


def wrapped_lines(text: str, width: int = WIDTH, indent: str = "  ") -> list[str]:
    """A line broken at spaces into lines no wider than `width`, the continuations indented by `indent`."""
    return textwrap.wrap(text, width, subsequent_indent=indent, break_on_hyphens=False) or [""]
