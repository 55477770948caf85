"""The plain text pieces every table of the tool is written with: a number or a dash, a median with its interval,
an aligned Markdown table."""

from __future__ import annotations

from pipeline.summaries import Interval


def num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def interval_text(median: float, ci: Interval, confidence: float) -> str:
    """`0.2615 [0.1840, 0.3390]`, with the interval's real coverage added when it falls short of `confidence`."""
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
