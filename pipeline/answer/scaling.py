"""What a study over world sizes says of its answer's devices: how many it uses, and its speed against the best config
on one device, from their paired comparison in the confirmation round (`compare.paired`), never from two runs
measured apart.

At a fixed effective batch every config trains the same tokens per optimizer step, so the ratio of step times is the
ratio of tokens/s; over N devices, that ratio divided by N is the scaling efficiency (tokens/s on N devices over N
times the tokens/s on one).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pipeline.answer import speedup
from pipeline.compare.paired import Comparison, bound, compare
from pipeline.search import ConfirmationRecord, TrialRecord


def unit(device: str | None, count: int) -> str:
    """`2 GPUs`, `1 GPU`, or `2 processes` on a CPU (gloo): what one rank of a job holds."""
    if device == "cpu":
        return f"{count} process" + ("" if count == 1 else "es")
    return f"{count} GPU" + ("" if count == 1 else "s")


@dataclass(frozen=True)
class Scaling:
    """The answer on several devices against the best config on one, paired in the confirmation round."""

    comparison: Comparison
    reference: TrialRecord  # the fastest eligible config on one device
    world_size: int
    device: str | None

    @property
    def efficiency(self) -> tuple[float, float, float]:
        """Speed-up over the devices used: (estimate, low, high)."""
        c, n = self.comparison, self.world_size
        return c.speedup / n, c.low / n, c.high / n

    def text(self) -> str:
        c = self.comparison
        value, low, high = self.efficiency
        return (
            f"{c.speedup:.2f}x the tokens/s of the best on {unit(self.device, 1)}, {self.reference.label} "
            f"[{bound(c.low)}, {bound(c.high)}] ({100 * c.confidence:g}%, paired over {c.rounds} rounds): scaling "
            f"efficiency {100 * value:.0f}% [{100 * low:.0f}%, {100 * high:.0f}%] (tokens/s on "
            f"{unit(self.device, self.world_size)} over {self.world_size}x those on one)"
        )


def best_by_size(eligible: list[TrialRecord]) -> dict[int, TrialRecord]:
    """The fastest eligible trial of each world size, by the search's medians."""
    found: dict[int, TrialRecord] = {}
    for r in sorted(eligible, key=lambda r: r.median):
        found.setdefault(r.world_size, r)
    return found


def paired(record: ConfirmationRecord | None, config: str, reference: str) -> Comparison | None:
    """`config` against `reference` over the rounds of the confirmation round where both ran; None without two."""
    if record is None:
        return None
    state = record.state
    comparison = compare(config, reference, state.times, state.confidence, state.tolerance)
    return comparison if comparison.judgement is not None else None


def world_lines(
    best: TrialRecord,
    eligible: list[TrialRecord],
    record: ConfirmationRecord | None,
    device: str | None,
    decided: Sequence[TrialRecord] = (),
) -> tuple[list[str], Scaling | None]:
    """The answer's lines on devices, where the study decided configs of more than one world size or the answer
    uses several; and its scaling against one device where that was paired."""
    sizes = best_by_size(eligible)
    searched = sorted({r.world_size for r in decided} | set(sizes) | {best.world_size})
    if len(searched) < 2 and best.world_size == 1:
        return [], None
    lines = [f"  uses {unit(device, best.world_size)} (world_size={best.world_size})"]
    if best.world_size > 1:
        one = sizes.get(1)
        if one is None:
            return [*lines, f"  no config on {unit(device, 1)} is eligible: no speed-up over one is claimed"], None
        comparison = paired(record, best.label, one.label)
        if comparison is None:
            why = "the confirmation round is off" if record is None else "they were not paired in its rounds"
            return [*lines, f"  no speed-up over {unit(device, 1)} ({one.label}) is claimed: {why}"], None
        if not comparison.claimed:
            why = speedup.untold(comparison)
            return [*lines, f"  no speed-up over {unit(device, 1)} ({one.label}) is claimed: {why}"], None
        scaling = Scaling(comparison, one, best.world_size, device)
        return [*lines, f"  {scaling.text()}"], scaling
    for size in searched:
        if size == best.world_size:
            continue
        other = sizes.get(size)
        if other is None:
            lines.append(f"  none on {unit(device, size)} is eligible ({_outcomes(decided, size)})")
            continue
        comparison = paired(record, other.label, best.label)  # as the round's own lines put it: against the best
        said = comparison.sentence() if comparison else "not paired with the answer: no comparison is claimed"
        lines.append(f"  the best on {unit(device, size)}, {other.label}: {said}")
    return lines, None


def _outcomes(decided: Sequence[TrialRecord], size: int) -> str:
    """How the configs of one world size ended: `2 pruned, 1 over-cap`."""
    counts: dict[str, int] = {}
    for r in decided:
        if r.world_size == size:
            name = str(r.status or r.state.name.lower())
            counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{n} {name}" for name, n in counts.items()) or "none decided"
