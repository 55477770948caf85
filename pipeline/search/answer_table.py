"""The study's answer as tables and lines: every trial with its figures and notes, and the confirmation round's
comparisons."""

from __future__ import annotations

from pipeline.records import Status
from pipeline.render.table import step_header
from pipeline.render.text import interval_text, markdown_table, num
from pipeline.search import slow, trials
from pipeline.search.confirmation import ConfirmationRecord
from pipeline.search.trials import Role, TrialRecord
from pipeline.summaries import TOKENS_RATE


def _step_cell(r: TrialRecord, confidence: float) -> str:
    if r.median is None or r.ci is None:
        return "-"
    if r.status is Status.OK:
        return interval_text(r.median, r.ci, confidence)
    return f"{r.median:.4f} (first steps)"  # a pruned trial's few steps: no interval to speak of


def format_trials(
    records: list[TrialRecord], confidence: float, baseline: TrialRecord | None, busy_threshold: float = 0.5
) -> str:
    """Every trial with its figures; a note says what a config is bound by where it was measured (`search.slow`)."""
    costs = slow.micro_costs(records)
    header = ["#", "config", "status", step_header(confidence), TOKENS_RATE, "peak GiB", "predicted GiB", "fits"]
    lines: list[list[object]] = [[*header, "loss dev", "note"]]
    # measured in full first, by step time; then pruned, over the cap, skipped, failed
    for r in sorted(records, key=lambda r: (r.status is not Status.OK, r.median is None, r.median or 0.0)):
        fits = "no (predicted)" if r.status is Status.SKIPPED else {True: "yes", False: "no", None: "-"}[r.feasible]
        role = ("baseline, outside the space" if r.outside else "baseline") if r.role is Role.BASELINE else ""
        note = "; ".join(n for n in (role, r.note[:60], slow.note(r, costs, busy_threshold)) if n)
        status = r.status or r.state.name.lower()
        lines.append([r.number, r.label, status, _step_cell(r, confidence), num(r.tokens_per_s, ",.0f")])
        lines[-1] += [num(r.peak_gib, ".3f"), num(r.predicted_gib, ".3f"), fits]
        lines[-1] += [num(trials.loss_deviation(r, baseline), ".1e"), note]
    return markdown_table(lines)


def confirmation_lines(record: ConfirmationRecord, winner: str, total_s: float) -> list[str]:
    s = record.state
    names = [f"{n} (baseline)" if n == record.baseline else n for n in s.finalists]
    if record.rounds == 0:
        return [
            f"confirmation round: not run; its budget, {record.budget_s:.0f} s, buys fewer than two rounds of "
            f"{', '.join(names)}: raise optimize.confirm_share (or optimize.confirm_budget_s), or train more steps"
        ]
    stopped = "" if record.finished else " (the study stopped during the round; the same command goes on with it)"
    lines = [
        f"confirmation round{stopped}: {record.rounds} round{'s' if record.rounds != 1 else ''} of "
        f"{record.steps_text()} steady steps, {s.seconds:.0f} s "
        f"({100 * s.seconds / total_s:.0f}% of the study's device time; budget {record.budget_s:.0f} s): "
        + ", ".join(names)
    ]
    lines += [f"  {c.sentence()}" for c in s.comparisons(winner)]
    if record.left_out:
        lines.append(f"  not re-measured (the budget buys too few rounds): {', '.join(record.left_out)}")
    if s.failed:
        lines.append(f"  failed in the round: {', '.join(s.failed)}")
    return lines
