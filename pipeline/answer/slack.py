"""Whether the answer's fit can change from one process to the next: where a knob says a process of the answer may
keep memory unused over the peak its trial measured (`pipeline.knobs.slack`: PyTorch's cached allocator beside a loss
that builds the full logits keeps up to one fp32 copy of a micro-batch's logits, there or not by the order of its
blocks; under a 20 GiB cap one such config fit in 1 of 3 processes; and, where the run's micro-batches vary in
shape, a tenth of its trial's peak: a run that meets its longest micro-batch after shorter ones ran out of memory
where the trial fit: BENCHMARKS.md), and the answer's headroom under the cap is less than that, its answer says so,
with what keeps none."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.knobs import Slack
from pipeline.records import GIB
from pipeline.search import TrialRecord


@dataclass(frozen=True)
class AnswerSlack:
    """A knob's slack (`Slack`) on the answer's micro-batch and peak: `gib`, its tokens times the vocabulary times the
    bytes, and its share of the peak."""

    slack: Slack
    gib: float

    @classmethod
    def of(cls, slack: Slack | None, tokens: int, vocab: int, peak_gib: float = 0.0) -> AnswerSlack | None:
        return None if slack is None else cls(slack, slack.bytes_on(tokens, vocab, peak_gib * GIB) / GIB)


def slack_line(best: TrialRecord, cap_bytes: int | None, found: AnswerSlack | None) -> str | None:
    """One line where the answer's headroom under the cap is less than what a process of it may keep unused."""
    if not cap_bytes or found is None or not best.peak_gib:
        return None
    left = cap_bytes / GIB - best.peak_gib
    if left >= found.gib:
        return None
    return (
        f"its fit can change from process to process: {left:.2f} GiB left under the cap, less than {found.slack.why} "
        f"({found.gib:.2f} GiB); {found.slack.instead}"
    )
