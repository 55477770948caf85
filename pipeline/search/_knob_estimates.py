"""The knob model (`search._knob_model`) fitted to the configs a study measured: each config's searched values, its
first measured step time, and the model's estimate of each config's step time. The confirmation round ranks its
finalists by those estimates; the answer's gains (`answer.gains`) read factors from the same fit."""

from __future__ import annotations

from pipeline.config.identity import parse_override
from pipeline.search import _knob_model as knob_model
from pipeline.search._trials import TrialRecord, measured_seconds


def searched_values(record: TrialRecord) -> dict[str, str]:
    """A trial's searched values, as its overrides write them."""
    return dict(parse_override(o) for o in record.overrides)


def measured_points(records: list[TrialRecord], keys: set[str]) -> dict[str, tuple[dict[str, str], float]]:
    """Each config's searched values and its first measured step seconds, by config id: those of `keys` alone."""
    found: dict[str, tuple[dict[str, str], float]] = {}
    for record in records:
        seconds = measured_seconds(record)
        if seconds is not None and record.config_id and set(searched_values(record)) == keys:
            found.setdefault(record.config_id, (searched_values(record), seconds))
    return found


def fit_points(points: dict[str, tuple[dict[str, str], float]], reference: dict[str, str]) -> knob_model.Posterior:
    """The knob model fitted to `points` (from `measured_points`), its terms relative to `reference`'s values."""
    space = {key: list(dict.fromkeys(point[key] for point, _ in points.values())) for key in reference}
    return knob_model.fit(knob_model.Encoding.of(space, reference), list(points.values()))


def estimates(records: list[TrialRecord], baseline: TrialRecord | None) -> dict[str, float]:
    """Each measured config's step seconds as the knob model puts it (by label): its own run, pooled with what the
    other configs say of each of its values. One run of a config is off by its process's offset (15-30% on a GPU
    host); the model's estimate of it is nearer its truth where several configs share its values. Empty where the
    model has too little to go on (as `answer.gains.knob_gains`)."""
    if baseline is None or not baseline.overrides:
        return {}
    keys = set(searched_values(baseline))
    points = measured_points(records, keys)
    varying = [key for key in keys if len({point[key] for point, _ in points.values()}) > 1]
    if len(points) <= len(varying):
        return {}
    fit = fit_points(points, searched_values(baseline))
    labels = {r.config_id: r.label for r in records if r.config_id in points}
    return {labels[cid]: fit.seconds(point) for cid, (point, _) in points.items()}
