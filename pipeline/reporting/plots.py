"""The report's four plots, drawn with matplotlib's Agg backend (no display needed).

Every config of the sweep or study has its place on the step-time and memory plots, whatever became of it: measured
(coloured by its rank), pruned (its first steps only), over the cap or out of memory (its measured peak, marked),
skipped (its predicted peak, hatched as a prediction) or failed. Each plot is titled with the sweep or study, the
device and the date, so a plot pasted elsewhere still says what it shows.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import matplotlib

if not os.environ.get("MPLBACKEND"):  # a notebook's kernel sets its inline backend there: the notebook keeps it
    matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from pipeline.compare.paired import Judgement  # noqa: E402
from pipeline.records import PHASES, Status  # noqa: E402
from pipeline.reporting.table import Row  # noqa: E402

RANK_COLOURS = {Judgement.WINNER: "#2a9d5c", Judgement.EQUAL: "#e9a23b", Judgement.SLOWER: "#4c72b0"}
FIGSIZE = (8.0, 4.6)  # every plot the same size, so the report's page lines up
PHASE_COLOURS = dict(zip(PHASES, ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3"), strict=True))
FITS, OVER, PREDICTED, NEUTRAL = "#55a868", "#c44e52", "#bbbbbb", "#999999"
MEMORY_STYLES = {
    "fits": (FITS, "measured, fits"),
    "over": (OVER, "measured, over the cap"),
    "measured": (NEUTRAL, "measured (no cap)"),
}


@dataclass(frozen=True)
class Context:
    """What every plot says of itself: `kind` ('Sweep'/'Study'), its name, the device, the date; the cap."""

    kind: str
    name: str
    device: str
    date: str
    cap_gib: float | None
    on_cpu: bool

    def title(self, what: str) -> str:
        return f"{what}\n{self.kind} {self.name} · {self.device} · {self.date}"


def _legend(ax, handles: list) -> None:
    """Below the plot, the whole width: never over a bar, and the plot keeps the figure's width."""
    if handles:
        ax.legend(
            handles=handles, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=min(4, len(handles))
        )


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)  # no tight bounding box: every image the same size, so the report's page lines up
    plt.close(fig)
    return path


def _figure(rows: list[Row]):
    return plt.subplots(figsize=FIGSIZE)


def _names(ax, rows: list[Row]) -> None:
    ax.set_xticks(range(len(rows)))
    ax.set_xlim(-0.6, len(rows) - 0.4)
    ax.set_xticklabels(
        [r.name for r in rows],
        rotation=20 if len(rows) > 3 else 0,
        ha="right" if len(rows) > 3 else "center",
        fontsize=8,
    )


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=10, wrap=True)
    ax.set_xticks([])
    ax.set_yticks([])


def _bar(row: Row, rows: list[Row]) -> tuple[float, tuple[float, float] | None]:
    """The bar's height and interval. Where the rows are ranked, both come from the pairs, as the table's `time vs
    fastest`: the fastest's median times the config's paired time ratio, and its paired interval (a config's own
    median may fall outside it: the median pools runs the pairs weigh otherwise). Else the config's median and one
    run's interval."""
    if row.comparison is not None:
        reference = next(r for r in rows if r.judgement is not None and r.comparison is None)
        c = row.comparison
        return reference.median / c.speedup, (reference.median / c.high, reference.median / c.low)
    if row.ci is not None and not any(r.judgement for r in rows):
        return row.median, (row.ci.low, row.ci.high)
    return row.median, None


def step_label(rows: list[Row], confidence: float) -> str:
    """What the step-time plot's bars and whiskers are: the same coverage the table states."""
    if any(r.judgement for r in rows):
        return (
            "seconds per optimizer step\n(the fastest's median x the paired ratio; whiskers: "
            f"{100 * confidence:g}% paired interval)"
        )
    return f"seconds per optimizer step\n(median; whiskers: {100 * confidence:g}% interval of one run's steps)"


def step_times(rows: list[Row], context: Context, confidence: float, path: Path) -> Path:
    fig, ax = _figure(rows)
    ax.set_title(context.title("Step time per config"), fontsize=9)
    timed = [r for r in rows if r.median is not None or r.first_steps is not None]
    if not timed:
        _empty(ax, "no config has a step time (see the table and the memory plot)")
        return _save(fig, path)
    bars = {r.config_id: _bar(r, rows) for r in rows if r.median is not None}
    top = max([r.median or r.first_steps for r in timed] + [h for h, _ in bars.values()])
    top = max([top] + [e[1] for _, e in bars.values() if e])
    for x, row in enumerate(rows):
        if row.median is None and row.first_steps is not None:
            ax.bar(x, row.first_steps, color="white", edgecolor=NEUTRAL, hatch="///")
        elif row.median is None:
            ax.text(x, 0.5 * top, _why_no_time(row), ha="center", va="center", fontsize=8, rotation=90, color=OVER)
        else:
            height, error = bars[row.config_id]
            yerr = [[height - error[0]], [error[1] - height]] if error else None
            ax.bar(x, height, color=RANK_COLOURS.get(row.judgement, NEUTRAL), yerr=yerr, capsize=5)
            if (
                error
                and row.ci is not None
                and error == (row.ci.low, row.ci.high)
                and row.ci.level < confidence - 1e-12
            ):
                ax.text(x, row.ci.high, f"{100 * row.ci.level:.0f}% interval", ha="center", va="bottom", fontsize=7)
    _names(ax, rows)
    ax.set_ylim(0, 1.12 * top)
    ax.set_ylabel(step_label(rows, confidence), fontsize=8)
    handles = [Patch(color=c, label=str(j)) for j, c in RANK_COLOURS.items() if any(r.judgement is j for r in rows)]
    if any(r.median is not None and r.judgement is None for r in rows):
        handles.append(Patch(color=NEUTRAL, label="not ranked"))
    if any(r.median is None and r.first_steps is not None for r in rows):
        handles.append(Patch(facecolor="white", edgecolor=NEUTRAL, hatch="///", label="stopped early: its first steps"))
    _legend(ax, handles)
    return _save(fig, path)


def _why_no_time(row: Row) -> str:
    statuses = {j.status for j in row.jobs}
    for status, text in (
        (Status.SKIPPED, "skipped: predicted over the cap"),
        (Status.OVER_CAP, "over the cap"),
        (Status.OOM, "out of memory"),
        (Status.PRUNED, "pruned as slow"),
        (Status.FAILED, "failed"),
        (Status.KILLED, "killed"),
    ):
        if status in statuses:
            return text
    return "no steady steps"


def phases(rows: list[Row], context: Context, path: Path) -> Path:
    rows = [r for r in rows if r.phases]
    fig, ax = _figure(rows)
    ax.set_title(context.title("Where a step goes (medians of the steady steps)"), fontsize=9)
    if not rows:
        _empty(ax, "no config finished steady steps")
        return _save(fig, path)
    bottoms = [0.0] * len(rows)
    for phase in PHASES:
        values = [max(0.0, r.phases.get(phase, 0.0)) for r in rows]
        ax.bar(range(len(rows)), values, bottom=bottoms, label=phase, color=PHASE_COLOURS[phase])
        bottoms = [b + v for b, v in zip(bottoms, values, strict=True)]
    _names(ax, rows)
    ax.set_ylabel("seconds per optimizer step")
    _legend(ax, ax.get_legend_handles_labels()[0])
    return _save(fig, path)


def memory(rows: list[Row], context: Context, path: Path) -> Path:
    fig, ax = _figure(rows)
    ax.set_title(context.title("Peak memory per config"), fontsize=9)
    if not rows:
        _empty(ax, "no config was recorded")
        return _save(fig, path)
    cap, drawn = context.cap_gib, set()
    for x, row in enumerate(rows):
        if row.peak_gib is not None:
            kind = "measured" if cap is None else "over" if row.peak_gib > cap else "fits"
            ax.bar(x, row.peak_gib, color=MEMORY_STYLES[kind][0])
            drawn.add(kind)
        elif row.predicted_gib is not None:
            ax.bar(x, row.predicted_gib, color="white", edgecolor=PREDICTED, hatch="///")
            drawn.add("predicted")
        else:
            ax.text(
                x,
                0.05,
                "no peak",
                ha="center",
                va="bottom",
                fontsize=8,
                rotation=90,
                transform=ax.get_xaxis_transform(),
            )
    if cap:
        ax.axhline(cap, color=OVER, linestyle="--")
    _names(ax, rows)
    what = "peak resident memory of the job (CPU)" if context.on_cpu else "peak reserved + CUDA context"
    ax.set_ylabel(f"GiB: {what}", fontsize=8)
    handles = [
        Patch(color=MEMORY_STYLES[k][0], label=MEMORY_STYLES[k][1]) for k in ("fits", "over", "measured") if k in drawn
    ]
    if "predicted" in drawn:
        handles.append(Patch(facecolor="white", edgecolor=PREDICTED, hatch="///", label="predicted (not launched)"))
    if cap:
        handles.append(plt.Line2D([], [], color=OVER, linestyle="--", label=f"cap {cap:.2f} GiB"))
    _legend(ax, handles)
    return _save(fig, path)


def losses(curves: dict[str, list[tuple[int, float]]], context: Context, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=FIGSIZE)
    ax.set_title(context.title("Loss per step (the same seed and data: curves should overlap)"), fontsize=9)
    drawn = {name: points for name, points in curves.items() if points}
    if not drawn:
        _empty(ax, "no job logged a loss")
        return _save(fig, path)
    for name, points in drawn.items():
        ax.plot([p[0] for p in points], [p[1] for p in points], label=name, alpha=0.8)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss")
    _legend(ax, ax.get_legend_handles_labels()[0])
    return _save(fig, path)
