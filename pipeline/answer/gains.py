"""What each knob bought: the knob model (`search._knob_model`) fitted to every config the study measured, and for
each key where the answer differs from the baseline, the factor its value is worth (the baseline's value against the
answer's, the other keys as the answer has them) with its 95% interval. A user learns which knobs carry the gain and
which are along for the ride. The claim is the confirmation round's (`answer.speedup`): these are estimates of each
knob's share of it from unpaired runs, said so, and never a second figure of what the round compared."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.answer.speedup import Speedup
from pipeline.compare.paired import bound
from pipeline.search import Factor, TrialRecord, fit_points, measured_points, searched_values

KNOB_ESTIMATE = "knob_estimate."  # the study run's metric of a knob's estimated share, by its key


@dataclass(frozen=True)
class Gains:
    """The factors of the keys the answer moved from the baseline (largest first), over `measured` configs, said
    beside the round's claim (`claim`: the answer's paired speed-up over the baseline; None where the round did not
    decide one). The claim is the one figure of the whole move: the model's factors are estimates of each knob's
    share, said so; where the answer moves one knob only, its factor is the whole move, the very comparison the
    round made, so the claim's figure is its own; and where the round decided nothing, no factor has an interval
    that would read as a decision."""

    factors: tuple[Factor, ...] = ()
    measured: int = 0
    moves: int = 0  # the keys in which the answer differs from the baseline
    claim: Speedup | None = None
    untold: str = "no paired round told the answer from the baseline"  # why there is no claim

    @property
    def whole(self) -> bool:
        return self.moves == 1 and len(self.factors) == 1

    def lines(self) -> list[str]:
        if not self.factors:
            return []
        if self.whole:
            return self._whole()
        over = f"over the {self.measured} configs measured, one unpaired run each"
        if self.claim is None:
            head = (
                f"not decided: {self.untold}; the knob model's estimates of each knob's share, {over}, without "
                "intervals"
            )
            return [f"  what each knob bought ({head}):", *(f"    {f.estimate_text()}" for f in self.factors)]
        head = (
            f"the knob model's estimates of each knob's share of the claim above, {over}: the step time with the "
            "baseline's value over the answer's, the other keys as the answer has them"
        )
        return [f"  what each knob bought ({head}):", *(f"    {f.text()}" for f in self.factors)]

    def _whole(self) -> list[str]:
        f = self.factors[0]
        move = f"{f.key}={f.after} (from {f.before})"
        if self.claim is None:
            head = f"one knob moved from the baseline, not decided: {self.untold}"
            by = " by the round" if self.untold == Gains.untold else ""  # no round ran: none decided it
            return [f"  what each knob bought ({head}):", f"    {move}: not decided{by}"]
        c = self.claim.comparison
        figure = f"{c.speedup:.2f}x [{bound(c.low)}, {bound(c.high)}]"
        return [
            "  what each knob bought (one knob moved from the baseline: the claim above is its figure):",
            f"    {move}: {figure} (the claim: {100 * c.confidence:g}%, paired over {c.rounds} rounds)",
        ]

    def metrics(self) -> dict[str, float]:
        """The model's estimates as the study's run records them (`knob_estimate.<key>`), where the lines give them
        as figures: not where one knob moved (the claim's metrics are its figure) or the round decided nothing."""
        if self.whole or self.claim is None:
            return {}
        return {f"{KNOB_ESTIMATE}{f.key}": f.ratio for f in self.factors}


def knob_gains(
    records: list[TrialRecord],
    answer: TrialRecord,
    baseline: TrialRecord | None,
    claim: Speedup | None = None,
    untold: str | None = None,
) -> Gains:
    """What the answer's moves from the baseline are worth, beside the round's `claim` (`untold`: why there is none,
    where it is not that the round could not tell them apart); nothing where the baseline is not a point of the
    answer's space or no more configs were measured than the keys that vary."""
    target = searched_values(answer)
    if baseline is None or set(searched_values(baseline)) != set(target):
        return Gains()
    points = measured_points(records, set(target))
    varying = [key for key in target if len({point[key] for point, _ in points.values()}) > 1]
    moved = [key for key in varying if target[key] != searched_values(baseline)[key]]
    if not moved or len(points) <= len(varying):
        return Gains()
    fit = fit_points(points, searched_values(baseline))
    factors = [fit.factor(target, key, searched_values(baseline)[key]) for key in moved]
    moves = sum(1 for key in target if target[key] != searched_values(baseline)[key])
    factors = tuple(sorted(factors, key=lambda f: -f.ratio))
    return Gains(factors, len(points), moves, claim, *([untold] if untold else []))
