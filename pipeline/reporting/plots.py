"""The report's four plots, drawn with matplotlib's Agg backend (no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from pipeline.records import PHASES
from pipeline.reporting.table import Row


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def step_times(rows: list[Row], path: Path) -> Path:
    rows = [r for r in rows if r.median is not None]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    names = [r.name for r in rows]
    medians = [r.median for r in rows]
    errors = [[r.median - r.ci.low for r in rows], [r.ci.high - r.median for r in rows]]
    ax.bar(names, medians, yerr=errors, capsize=6, color="#4c72b0")
    ax.set_ylabel("step time (s), median and 95% CI")
    ax.set_title("Step time per config")
    return _save(fig, path)


def phases(rows: list[Row], path: Path) -> Path:
    rows = [r for r in rows if r.phases]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    bottoms = [0.0] * len(rows)
    for phase in PHASES:
        values = [max(0.0, r.phases.get(phase, 0.0)) for r in rows]
        ax.bar([r.name for r in rows], values, bottom=bottoms, label=phase)
        bottoms = [b + v for b, v in zip(bottoms, values, strict=True)]
    ax.set_ylabel("seconds per optimizer step (medians)")
    ax.set_title("Where a step goes")
    ax.legend(fontsize=8)
    return _save(fig, path)


def memory(rows: list[Row], cap_gib: float | None, path: Path) -> Path:
    rows = [r for r in rows if r.peak_gib is not None]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar([r.name for r in rows], [r.peak_gib for r in rows], color="#55a868")
    if cap_gib:
        ax.axhline(cap_gib, color="#c44e52", linestyle="--", label=f"cap {cap_gib:.2f} GiB")
        ax.legend(fontsize=8)
    ax.set_ylabel("peak memory (GiB)")
    ax.set_title("Peak memory per config")
    return _save(fig, path)


def losses(curves: dict[str, list[tuple[int, float]]], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name, points in curves.items():
        if points:
            ax.plot([p[0] for p in points], [p[1] for p in points], label=name, alpha=0.8)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss")
    ax.set_title("Loss per step (curves should overlap)")
    ax.legend(fontsize=8)
    return _save(fig, path)
