"""The study's answer as tables and lines: every trial with its figures and notes, and the confirmation round's
comparisons; in full, or as the console prints them by default, 120 columns wide: where the labels make it wider,
each config by what differs from the baseline (`render.names`); the notes under the table."""

from __future__ import annotations

import dataclasses
import statistics

from pipeline.answer import slow
from pipeline.compare.paired import Comparison
from pipeline.config.identity import display_name, parse_override
from pipeline.records import Status
from pipeline.render.names import shown_names
from pipeline.render.table import step_header
from pipeline.render.text import WIDTH, fitted_table, interval_text, markdown_table, num, table_width, wrapped_lines
from pipeline.search import ConfirmationRecord, Role, TrialRecord, trial_loss_deviation
from pipeline.summaries import TOKENS_RATE

SPLIT = "batch.split"


def full_name(record: TrialRecord) -> str:
    """The trial's config named by every key of the space (its label names only those that vary in it)."""
    values = dict(parse_override(o) for o in record.overrides)
    if SPLIT not in values:
        return record.label
    others = [(k, v) for k, v in values.items() if k != SPLIT]
    return display_name(record.label.split()[0], values[SPLIT], others)


def reference_of(records: list[TrialRecord]) -> TrialRecord | None:
    """What the compact table names every config against: the baseline, else the first trial."""
    labelled = [r for r in records if r.label]
    return next((r for r in labelled if r.role is Role.BASELINE), labelled[0] if labelled else None)


def compact_names(records: list[TrialRecord]) -> dict[str, str]:
    """Each trial's label as the compact lines show it: the reference's as it is, every other by its difference
    from the reference (by every key of the space, so that a key its label leaves out still counts)."""
    reference = reference_of(records)
    if reference is None:
        return {}
    full = {r.label: full_name(r) for r in records if r.label}
    shown = shown_names(list(full.values()), full[reference.label])
    return {label: label if label == reference.label else shown[name] for label, name in full.items()}


def _step_cell(r: TrialRecord, confidence: float) -> str:
    if r.median is None or r.ci is None:
        return "-"
    if r.status is Status.OK:
        return interval_text(r.median, r.ci, confidence)
    return f"{r.median:.4f} (first steps)"  # a pruned trial's few steps: no interval to speak of


def format_trials(
    records: list[TrialRecord], confidence: float, baseline: TrialRecord | None, busy_threshold: float = 0.5
) -> str:
    """Every trial with its figures; a note says what a config is bound by where it was measured (`answer.slow`)."""
    header = ["#", "config", "status", step_header(confidence), TOKENS_RATE, "peak GiB", "predicted GiB", "fits"]
    lines: list[list[object]] = [[*header, "loss dev", "note"]]
    for r, note in _ordered(records, busy_threshold):
        fits = "no (predicted)" if r.status is Status.SKIPPED else {True: "yes", False: "no", None: "-"}[r.feasible]
        lines.append([r.number, r.label, _status(r), _step_cell(r, confidence), num(r.tokens_per_s, ",.0f")])
        lines[-1] += [num(r.peak_gib, ".3f"), num(r.predicted_gib, ".3f"), fits]
        lines[-1] += [num(trial_loss_deviation(r, baseline), ".1e"), note]
    return markdown_table(lines)


def compact_trials(
    records: list[TrialRecord], confidence: float, baseline: TrialRecord | None, busy_threshold: float = 0.5
) -> str:
    """`format_trials` in 120 columns: a run's median alone, the notes under the table by trial number, and where
    the labels are long, each config by what differs from the reference (`shortened`)."""
    ordered, reference, names = _ordered(records, busy_threshold), reference_of(records), shortened(records)
    said = [line for r, note in ordered if note for line in wrapped_lines(f"  #{r.number}: {note}", WIDTH, "    ")]
    out = [fitted_table(_compact_cells(ordered, baseline, names), WIDTH, wrapped=(1,))]
    out += ["notes:", *said] if said else []
    steps = "step s: each trial's median, a pruned one's of its first steps"
    legend = [f"{steps} ({100 * confidence:g}% intervals: wide=true)"]
    if reference is not None and names:
        who = "the baseline" if reference.role is Role.BASELINE else "the first trial"
        legend.insert(0, f"config: each by what differs from #{reference.number}, {who}, named in full on its row")
    return "\n".join([*out, *(line for text in legend for line in wrapped_lines(text))])


def shortened(records: list[TrialRecord]) -> dict[str, str]:
    """`compact_names` where the labels make the compact table wider than the console (each config by what differs
    from the reference, in the table and the round's lines); none where they fit."""
    cells = _compact_cells([(r, "") for r in records], None, {})
    return compact_names(records) if table_width(cells) > WIDTH else {}


def _compact_cells(
    ordered: list[tuple[TrialRecord, str]], baseline: TrialRecord | None, names: dict[str, str]
) -> list[list[object]]:
    lines: list[list[object]] = [["#", "config", "status", "step s", "tokens/s", "peak GiB", "pred. GiB", "fits"]]
    lines[0].append("loss dev")
    for r, _ in ordered:
        fits = {True: "yes", False: "no", None: "-"}[False if r.status is Status.SKIPPED else r.feasible]
        step = "-" if r.median is None or r.ci is None else f"{r.median:.4f}"
        lines.append([r.number, names.get(r.label, r.label), _status(r), step, num(r.tokens_per_s, ",.0f")])
        lines[-1] += [num(r.peak_gib, ".3f"), num(r.predicted_gib, ".3f"), fits]
        lines[-1].append(num(trial_loss_deviation(r, baseline), ".1e"))
    return lines


def _ordered(records: list[TrialRecord], busy_threshold: float) -> list[tuple[TrialRecord, str]]:
    """Measured in full first, by step time; then pruned, over the cap, skipped, failed; each with its note."""
    costs = slow.micro_costs(records)
    found = []
    for r in sorted(records, key=lambda r: (r.status is not Status.OK, r.median is None, r.median or 0.0)):
        role = ("baseline, outside the space" if r.outside else "baseline") if r.role is Role.BASELINE else ""
        found.append((r, "; ".join(n for n in (role, r.note[:60], slow.note(r, costs, busy_threshold)) if n)))
    return found


def _status(r: TrialRecord) -> str:
    return str(r.status or r.state.name.lower())


def renamed(comparison: Comparison, names: dict[str, str]) -> Comparison:
    """A comparison of the round with its configs as `names` shows them."""
    return dataclasses.replace(
        comparison,
        config=names.get(comparison.config, comparison.config),
        reference=names.get(comparison.reference, comparison.reference),
    )


def spread_lines(times: dict[str, dict[int, float]], shown: dict[str, str]) -> list[str]:
    """Each finalist's speed from process to process: its runs' figures in the round (one fresh process each), their
    range and the farthest from their median, so that a reader sees how much one run of the exported script may
    differ from the figure the table gives."""
    lines = []
    for name, by_round in times.items():
        figures = sorted(by_round.values())
        if len(figures) < 2:
            continue
        middle = statistics.median(figures)
        farthest = max(abs(f / middle - 1) for f in figures)
        lines.append(
            f"  {shown.get(name, name)}: {len(figures)} fresh processes, {figures[0]:.4f}-{figures[-1]:.4f} s/step, "
            f"farthest {100 * farthest:.1f}% from their median"
        )
    return lines


def confirmation_lines(
    record: ConfirmationRecord, winner: str, total_s: float, shown: dict[str, str] | None = None
) -> list[str]:
    """The round's lines: what it ran and each finalist against the winner (`shown`: the names the lines give the
    configs, where not their labels)."""
    s, shown = record.state, shown or {}
    names = [f"{n} (baseline)" if n == record.baseline and n not in shown else shown.get(n, n) for n in s.finalists]
    if record.rounds == 0 and not record.finished:
        return [
            "confirmation round (the study stopped during the round; the same command goes on with it): no run of "
            f"{', '.join(names)} finished"
        ]
    if record.rounds == 0:
        return [
            f"confirmation round: not run; its budget, {record.budget_s:.0f} s, buys fewer than two rounds of "
            f"{', '.join(names)}: raise optimize.confirm_share (or optimize.confirm_floor_s), or train more steps"
        ]
    stopped = "" if record.finished else " (the study stopped during the round; the same command goes on with it)"
    lines = [
        f"confirmation round{stopped}: {record.rounds} round{'s' if record.rounds != 1 else ''} of "
        f"{record.steps_text()} steady steps, {s.seconds:.0f} s "
        f"({100 * s.seconds / total_s:.0f}% of the study's device time; budget {record.budget_s:.0f} s): "
        + ", ".join(names)
    ]
    lines += [f"  {renamed(c, shown).sentence()}" for c in s.comparisons(winner)] if winner in s.times else []
    lines += spread_lines(s.times, shown)
    if record.left_out:
        left = ", ".join(shown.get(n, n) for n in record.left_out)
        lines.append(f"  not re-measured (the budget buys too few rounds): {left}")
    if s.failed:
        failed = ", ".join(shown.get(n, n) for n in s.failed)
        lines.append(f"  failed in the round (out of memory or a failed job), so not the answer: {failed}")
    return lines
