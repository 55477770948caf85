"""The comparison table shown at the end of a sweep: one row per config, repeats pooled."""

from __future__ import annotations

import statistics
from collections import defaultdict

from pipeline.measure.stats import max_relative_deviation, median_ci, rank


def comparison_rows(results: list[dict]) -> list[dict]:
    """Pool repeats of each config name (`model split`), rank by median step time, and measure each job's loss
    deviation from the reference (the first finished job of the sweep)."""
    reference = next((r["losses"] for r in results if r.get("status") == "ok" and r.get("losses")), None)
    groups: dict[str, list[dict]] = defaultdict(list)
    for result in results:
        key = result["name"].split(" #")[0]
        groups[key].append(result)
    rows = []
    for key, jobs in groups.items():
        ok = [j for j in jobs if j.get("status") == "ok" and j["summary"].get("step_time_median_s") is not None]
        row: dict = {"config": key, "jobs": len(jobs), "ok": len(ok), "status": _status(jobs)}
        if ok:
            if len(ok) == 1:
                s = ok[0]["summary"]
                row.update(median=s["step_time_median_s"], low=s["step_time_ci_low_s"], high=s["step_time_ci_high_s"])
            else:  # repeats: interval of the median over the repeats' medians
                medians = sorted(j["summary"]["step_time_median_s"] for j in ok)
                low, high = median_ci(medians)
                row.update(median=statistics.median(medians), low=low, high=high)
            pick = ok[0]["summary"]
            row.update(
                tokens_per_s=statistics.median(j["summary"].get("tokens_per_s", 0.0) for j in ok),
                mfu=pick.get("mfu"),
                peak_gib=max(j["summary"].get("peak_gib", 0.0) for j in ok),
                verdict=pick.get("verdict"),
                phases={
                    phase: statistics.median(j["summary"][f"{phase}_median_s"] for j in ok)
                    for phase in ("forward", "backward", "optimizer", "data", "other")
                    if all(f"{phase}_median_s" in j["summary"] for j in ok)
                },
            )
        deviations = [max_relative_deviation(j["losses"], reference) for j in jobs if reference and j.get("losses")]
        row["loss_dev"] = max((d for d in deviations if d is not None), default=None)
        row["run_id"] = jobs[0].get("run_id") if len(jobs) == 1 else None
        row["run_ids"] = [j.get("run_id") for j in jobs]
        rows.append(row)
    # only configs that fit (or ran without a cap) compete: a fast config over the cap is no answer
    ranked = rank(
        {
            r["config"]: (r["median"], r["low"], r["high"])
            for r in rows
            if "median" in r and r.get("verdict") in ("fits", "no-cap")
        }
    )
    for row in rows:
        row["rank"] = ranked.get(row["config"])
    return rows


def _status(jobs: list[dict]) -> str:
    statuses = sorted({j.get("status", "failed") for j in jobs})
    return "/".join(statuses)


def num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def format_table(rows: list[dict]) -> str:
    header = [
        "config",
        "status",
        "step s (median [95% CI])",
        "tokens/s",
        "MFU",
        "peak GiB",
        "cap",
        "loss dev",
        "rank",
    ]
    lines = [header]
    for r in sorted(rows, key=lambda r: r.get("median", float("inf"))):
        step = "-" if "median" not in r else f"{r['median']:.4f} [{r['low']:.4f}, {r['high']:.4f}]"
        lines.append(
            [
                r["config"],
                r["status"],
                step,
                num(r.get("tokens_per_s"), ",.0f"),
                "-" if r.get("mfu") is None else f"{100 * r['mfu']:.1f}%",
                num(r.get("peak_gib"), ".2f"),
                r.get("verdict") or "-",
                num(r.get("loss_dev"), ".1e"),
                r.get("rank") or "-",
            ]
        )
    return markdown_table(lines)


def markdown_table(lines: list[list[object]]) -> str:
    """A header row then data rows, as an aligned Markdown table."""
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(lines[0]))]
    out = ["| " + " | ".join(str(c).ljust(w) for c, w in zip(line, widths, strict=True)) + " |" for line in lines]
    out.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(out)
