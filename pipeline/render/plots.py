"""The report's four plots, drawn with matplotlib's Agg backend (no display needed).

Every config of the sweep or study has its place on the step-time and memory plots, whatever became of it: measured
(coloured by its rank, with its time ratio above), pruned (its first steps only), over the cap or out of memory (its
measured peak, marked), skipped (its predicted peak, hatched as a prediction) or failed. The bars and the labels of
the step-time plot are one number: the reference's bar is its step column, every other ranked bar is that times its
`time vs` cell (the paired ratio written above it; with every round complete, its own step column), an unranked bar
its own step column. The step-time axis is set by the bars, never by an interval, which a few rounds may leave open.
Each plot is titled with the sweep or study, the device and the date: pasted elsewhere, it still says what it shows.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from pathlib import Path

import matplotlib

if not os.environ.get("MPLBACKEND"):  # a notebook's kernel sets its inline backend there: the notebook keeps it
    matplotlib.use("Agg")
matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text in the SVG: smaller, and a browser can read it
matplotlib.rcParams["svg.hashsalt"] = "batch-split"  # the same figure gives the same markup
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from pipeline.compare.paired import Judgement  # noqa: E402
from pipeline.records import PHASES, Status  # noqa: E402
from pipeline.render.rows import ANSWER, FASTEST, Row, close, reference_role  # noqa: E402
from pipeline.render.table import paired_text  # noqa: E402

FIGSIZE = (8.0, 4.6)  # every plot the same size, so the report's page lines up
PHASE_COLOURS = dict(zip(PHASES, ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3"), strict=True))
FITS, OVER, PREDICTED, NEUTRAL = "#55a868", "#c44e52", "#bbbbbb", "#999999"
LABEL_BOX = {"facecolor": "white", "edgecolor": "none", "alpha": 0.85, "pad": 1.0}  # a whisker passes behind it
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


@dataclass(frozen=True)
class Plot:
    """A plot as the report holds it: a PNG file (for report.md), and the same figure as SVG markup, embedded in
    report.html so that the page stands alone (MLflow's artifact viewer serves no file beside it) and its bars and
    labels can be read in a browser (ids `step-bar-<i>` and `step-label-<i>` in the table's order, `step-axes`)."""

    png: Path
    svg: str


def _save(fig, path: Path) -> Plot:
    fig.tight_layout()
    fig.savefig(path, dpi=110)  # no tight bounding box: every image the same size, so the report's page lines up
    markup = io.StringIO()
    fig.savefig(markup, format="svg")
    plt.close(fig)
    svg = markup.getvalue()
    return Plot(path, svg[svg.index("<svg") :])  # the element alone: no XML declaration or DOCTYPE inside HTML


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


@dataclass(frozen=True)
class Rank:
    """How a ranked bar is drawn and named: its colour and its legend's words."""

    colour: str
    label: str


RANKS = {
    "winner": Rank("#2a9d5c", "winner (faster than every other, paired)"),
    FASTEST: Rank("#8fd1a8", "fastest, tied (no other faster, paired)"),
    ANSWER: Rank("#8fd1a8", "the study's answer (no other faster, paired)"),
    "equal": Rank("#e9a23b", "equal (within the tie tolerance)"),
    "apart": Rank("#c9b3d9", "not told apart (wider than the tie tolerance)"),
    "slower": Rank("#4c72b0", "slower (paired)"),
}


def rank_of(row: Row) -> Rank | None:
    """The rank a bar is drawn with, as the table's rank column says it; None where the row is not ranked."""
    if row.judgement is None:
        return None
    if row.comparison is None:
        return RANKS["winner" if row.judgement is Judgement.WINNER else row.role or FASTEST]
    if row.judgement is Judgement.EQUAL:
        return RANKS["equal" if close(row) else "apart"]
    return RANKS["slower" if row.judgement is Judgement.SLOWER else "winner"]


def step_label(rows: list[Row], confidence: float) -> str:
    """What the step-time plot's bars, whiskers and labels are: the table's step column, with its interval where
    it has one; a ranked bar the reference's times its `time vs` cell, written above it."""
    several = any(r.runs > 1 for r in rows if r.median is not None)
    bars = "mean of paired runs" if several else "median"
    whiskers = f"; whiskers: {100 * confidence:g}% interval of one run's steps" if not several else ""
    role = reference_role(rows)
    above = f"\nranked: the {role}'s times its time vs {role}, paired (above)" if any(r.judgement for r in rows) else ""
    return f"seconds per optimizer step\n({bars}{whiskers}){above}"


def bar_height(row: Row, rows: list[Row]) -> float | None:
    """A bar's height: the reference's step column times a ranked row's paired time ratio (the label above it, so
    bar and label are one number), else the row's own step column (or the first steps of one stopped early)."""
    reference = next((r for r in rows if r.judgement is not None and r.comparison is None), None)
    if row.comparison is not None and reference is not None and reference.median is not None:
        return reference.median / row.comparison.speedup
    return row.median if row.median is not None else row.first_steps


def axis_top(rows: list[Row]) -> float:
    """The step-time axis's top: set by the bars alone (medians, and the first steps of configs stopped early),
    never by an interval, which may be open (`[0.00, 1212.40]`) and would flatten every bar."""
    heights = [bar_height(r, rows) for r in rows]
    return 1.3 * max(h for h in heights if h is not None)


def _whiskers(ax, x: int, row: Row, top: float, confidence: float) -> None:
    """One run's interval, as the step column shows it; an end beyond the axis is cut there, its value written."""
    low, high = row.ci.low, row.ci.high
    ax.errorbar(x, row.median, yerr=[[row.median - low], [min(high, top) - row.median]], color="black", capsize=5)
    if high > top:
        ax.annotate(f"to {high:.3g}", (x, top), xytext=(4, -10), textcoords="offset points", fontsize=7, ha="left")
    if row.ci.level < confidence - 1e-12:
        said = f"{100 * row.ci.level:.0f}% interval" if row.ci.level > 0 else "1 step"  # one step: no interval
        ax.text(x, min(high, top), said, ha="center", va="bottom", fontsize=7)


def step_times(rows: list[Row], context: Context, confidence: float, path: Path) -> Plot:
    """Each config's bar is the table's step column, in the table's order and coloured by its rank; above a
    ranked bar, its `time vs` cell."""
    fig, ax = _figure(rows)
    ax.patch.set_gid("step-axes")
    ax.set_title(context.title("Step time per config"), fontsize=9)
    if not any(r.median is not None or r.first_steps is not None for r in rows):
        _empty(ax, "no config has a step time (see the table and the memory plot)")
        return _save(fig, path)
    top = axis_top(rows)
    for x, row in enumerate(rows):
        if row.median is None and row.first_steps is not None:
            ax.bar(x, row.first_steps, color="white", edgecolor=NEUTRAL, hatch="///", gid=f"step-bar-{x}")
        elif row.median is None:
            ax.text(x, 0.5 * top, _why_no_time(row), ha="center", va="center", fontsize=8, rotation=90, color=OVER)
        else:
            rank, height = rank_of(row), bar_height(row, rows)
            ax.bar(x, height, color=rank.colour if rank else NEUTRAL, gid=f"step-bar-{x}")
            if row.ci is not None and row.comparison is None:  # one run's steps, around its own median
                _whiskers(ax, x, row, top, confidence)
            if rank:
                ax.annotate(
                    paired_text(row), (x, height), xytext=(0, 3), textcoords="offset points", ha="center",
                    va="bottom", fontsize=7, gid=f"step-label-{x}", zorder=5, bbox=LABEL_BOX,
                )  # fmt: skip
    _names(ax, rows)
    ax.set_ylim(0, top)
    ax.set_ylabel(step_label(rows, confidence), fontsize=8)
    drawn = {rank_of(r) for r in rows if r.median is not None}
    handles = [Patch(color=r.colour, label=r.label) for r in dict.fromkeys(RANKS.values()) if r in drawn]
    if None in drawn:
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


def phases(rows: list[Row], context: Context, path: Path) -> Plot:
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


def memory(rows: list[Row], context: Context, path: Path) -> Plot:
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


def losses(curves: dict[str, list[tuple[int, float]]], context: Context, path: Path) -> Plot:
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
