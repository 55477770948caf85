"""What each knob bought: the knob model (`search.knob_model`) fitted to every config the study measured, and for
each key where the answer differs from the baseline, the factor its value is worth (the baseline's value against the
answer's, the other keys as the answer has them) with its 95% interval. A user learns which knobs carry the gain and
which are along for the ride."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.config.identity import parse_override
from pipeline.search import knob_model
from pipeline.search.knob_model import Factor
from pipeline.search.trials import TrialRecord, measured_seconds


def values(record: TrialRecord) -> dict[str, str]:
    """A trial's searched values, as its overrides write them."""
    return dict(parse_override(o) for o in record.overrides)


@dataclass(frozen=True)
class Gains:
    """The factors of the keys the answer moved from the baseline (largest first), over `measured` configs."""

    factors: tuple[Factor, ...] = ()
    measured: int = 0

    def lines(self) -> list[str]:
        if not self.factors:
            return []
        head = (
            f"  what each knob bought (a model of log step time over the {self.measured} configs measured: the step "
            "time with the baseline's value over the answer's, the other keys as the answer has them, 95%):"
        )
        return [head, *(f"    {f.text()}" for f in self.factors)]


def _measured(records: list[TrialRecord], keys: set[str]) -> dict[str, tuple[dict[str, str], float]]:
    """Each config's searched values and its first measured step seconds, by config id: those of `keys` alone."""
    found: dict[str, tuple[dict[str, str], float]] = {}
    for record in records:
        seconds = measured_seconds(record)
        if seconds is not None and record.config_id and set(values(record)) == keys:
            found.setdefault(record.config_id, (values(record), seconds))
    return found


def _fit(measured: dict[str, tuple[dict[str, str], float]], reference: dict[str, str]) -> knob_model.Fit:
    space = {key: list(dict.fromkeys(point[key] for point, _ in measured.values())) for key in reference}
    return knob_model.fit(knob_model.Encoding.of(space, reference), list(measured.values()))


def knob_gains(records: list[TrialRecord], answer: TrialRecord, baseline: TrialRecord | None) -> Gains:
    """What the answer's moves from the baseline are worth; nothing where the baseline is not a point of the
    answer's space or no more configs were measured than the keys that vary."""
    target = values(answer)
    if baseline is None or set(values(baseline)) != set(target):
        return Gains()
    measured = _measured(records, set(target))
    varying = [key for key in target if len({point[key] for point, _ in measured.values()}) > 1]
    moved = [key for key in varying if target[key] != values(baseline)[key]]
    if not moved or len(measured) <= len(varying):
        return Gains()
    fitted = _fit(measured, values(baseline))
    factors = [fitted.factor(target, key, values(baseline)[key]) for key in moved]
    return Gains(tuple(sorted(factors, key=lambda f: -f.ratio)), len(measured))


def estimates(records: list[TrialRecord], baseline: TrialRecord | None) -> dict[str, float]:
    """Each measured config's step seconds as the knob model puts it (by label): its own run, pooled with what the
    other configs say of each of its values. One run of a config is off by its process's offset (15-30% on a GPU
    host); the model's estimate of it is nearer its truth where several configs share its values. Empty where the
    model has too little to go on (as `knob_gains`)."""
    if baseline is None or not baseline.overrides:
        return {}
    keys = set(values(baseline))
    measured = _measured(records, keys)
    varying = [key for key in keys if len({point[key] for point, _ in measured.values()}) > 1]
    if len(measured) <= len(varying):
        return {}
    fitted = _fit(measured, values(baseline))
    labels = {r.config_id: r.label for r in records if r.config_id in measured}
    return {labels[cid]: fitted.seconds(point) for cid, (point, _) in measured.items()}
