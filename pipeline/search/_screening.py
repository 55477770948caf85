"""The model sampler's screening design: the centre (the probes' best guess), then each value of each knob moved once
from the anchor (the fastest config so far, unless a config nearer the centre is not told apart from it), then the
winners tried together: the config that holds every value that gained on the anchor it was moved from, and each value
that gained nothing beside an anchor the winners have since left (a compiled loss screened beside Liger kernels that
lost) tried again beside them. A gain is a config faster than its anchor and told apart from it: by more than the tie
tolerance, and with the steps' intervals apart where both are known."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pipeline import knobs
from pipeline.config.schema import OptimizeConfig
from pipeline.knobs.base import Knob
from pipeline.search._space import SPLIT_KEY, WORLD_KEY
from pipeline.summaries import Interval

Params = dict[str, Any]
TOLERANCE = OptimizeConfig.tie_tolerance  # the study's default: a gain within it does not move the screening's anchor


def key(params: Params) -> tuple:
    return tuple(sorted(params.items()))


def screen_order(names: Sequence[str]) -> list[str]:
    """The keys in the order the screening moves them: the split and the world size first, then the knobs by
    `Knob.screen` (the padding, then compiled layers and their mode, then the rest, with any other key the space
    names), the space's order among equals. On variable-length chats the space's order screened flex attention
    first; it won eagerly, and compiled layers were tried only beside it, where they lost, so the answer ran 2.6-2.9x
    slower than the chats grid's three fastest (BENCHMARKS.md)."""
    found = knobs.by_key()
    first = (SPLIT_KEY, WORLD_KEY)
    return sorted(
        names, key=lambda name: found[name].screen if name in found else (0 if name in first else Knob.screen)
    )


def next_screen(
    centre: Params,
    anchor: Params,
    points: Sequence[Params],
    taken: Sequence[Params],
    fits: Callable[[Params], bool] = lambda p: True,
    estimate: Callable[[Params], float] = lambda p: 0.0,
) -> Params | None:
    """The screening design's next point: the centre; then, for the first value (keys in `screen_order`, values in
    the space's order) that no taken config holds, the untried point nearest the anchor with that value that fits
    (fewest keys changed; among equals, the one `estimate` says is fastest, then the first in the space's order: a
    loss whose 8x1 point is over the cap is screened beside CUDA graphs at 8x1, which the measured configs say is
    fast, not at a 4x2 a probe measured slow); None once every value was held or none of a value's points fits."""
    done = {key(p) for p in taken}
    if key(centre) not in done and fits(centre):
        return centre
    held = {(name, p[name]) for p in taken for name in p}
    for name in screen_order(list(centre)):
        for value in dict.fromkeys(p[name] for p in points):
            if (name, value) in held:
                continue
            holding = [p for p in points if p[name] == value and key(p) not in done]
            holding.sort(key=lambda p: (sum(p[k] != anchor[k] for k in anchor), estimate(p)))  # stable: space order
            found = next((p for p in holding if fits(p)), None)
            if found is not None:
                return found
    return None


def anchor(
    centre: Params,
    observed: Sequence[tuple[Params, float]],
    tolerance: float = TOLERANCE,
    spreads: Sequence[Interval | None] = (),
) -> Params:
    """Where the screening moves from: of the configs not told apart from the fastest, the one with the fewest keys
    changed from the centre (among equals, the fastest); the centre before anything was measured. Not told apart:
    within `tolerance` of the fastest, or, where `spreads` (each observation's interval of its median step, in
    `observed`'s order) holds both, an interval that overlaps the fastest's."""
    if not observed:
        return centre
    spreads = list(spreads) + [None] * (len(observed) - len(spreads))
    first = min(range(len(observed)), key=lambda i: observed[i][1])
    fastest, top = observed[first][1], spreads[first]

    def tied(i: int) -> bool:
        seconds, spread = observed[i][1], spreads[i]
        overlaps = spread is not None and top is not None and spread.low <= top.high
        return seconds <= fastest * (1 + tolerance) or overlaps

    near = [(sum(p[k] != centre.get(k) for k in p), s, i) for i, (p, s) in enumerate(observed) if tied(i)]
    return observed[min(near)[2]][0]


def told_apart(
    fast: float, slow: float, tolerance: float, fast_spread: Interval | None, slow_spread: Interval | None
) -> bool:
    """Whether `fast` seconds beat `slow` by more than `tolerance` and, where both intervals are known, apart."""
    overlaps = fast_spread is not None and slow_spread is not None and slow_spread.low <= fast_spread.high
    return slow > fast * (1 + tolerance) and not overlaps


@dataclass(frozen=True)
class Tried:
    """A config a trial took, in the order taken: its measured step seconds and their interval, or None where it
    measured none (out of memory, over the cap, failed, skipped by prediction)."""

    params: Params
    seconds: float | None = None
    spread: Interval | None = None


@dataclass(frozen=True)
class Move:
    """One config taken and the config it was moved from (`moves`): the values it changed, whether it gained on it,
    and whether it lost (measured, and told apart slower)."""

    params: Params
    anchor: Params
    seconds: float | None
    gained: bool
    lost: bool

    @property
    def changed(self) -> Params:
        return {k: v for k, v in self.params.items() if self.anchor.get(k) != v}


def moves(centre: Params, tried: Sequence[Tried], tolerance: float) -> list[Move]:
    """Every config taken after the first measured one (the centre's), against its parent: of the configs measured
    before it, the one it changes the fewest keys of (the anchor of the time among equals). The parent, not the
    anchor alone: two workers move from one anchor at once, and the second config taken is then measured after the
    first, which may have moved the anchor."""
    found = []
    for i, t in enumerate(tried):
        before = [b for b in tried[:i] if b.seconds is not None]
        if not before or key(t.params) == key(centre):
            continue
        start = anchor(centre, [(b.params, b.seconds) for b in before], tolerance, [b.spread for b in before])
        parent = min(before, key=lambda b, t=t, start=start: _apart(b.params, t.params, start))
        gained = t.seconds is not None and told_apart(t.seconds, parent.seconds, tolerance, t.spread, parent.spread)
        lost = t.seconds is not None and told_apart(parent.seconds, t.seconds, tolerance, parent.spread, t.spread)
        found.append(Move(t.params, parent.params, t.seconds, gained, lost))
    return found


def _apart(candidate: Params, params: Params, start: Params) -> tuple[int, bool]:
    """How far a measured config lies from `params`: the keys it changes, then whether it is not the anchor (min()
    keeps the first measured among equals)."""
    return sum(candidate.get(k) != v for k, v in params.items()), key(candidate) != key(start)


def winners(found: Sequence[Move]) -> Params:
    """Every value that gained on its anchor; of two gains of one key, the faster config's value."""
    best: dict[str, tuple[float, Any]] = {}
    for move in found:
        if move.gained:
            for k, v in move.changed.items():
                if k not in best or move.seconds < best[k][0]:
                    best[k] = (move.seconds, v)
    return {k: v for k, (_, v) in best.items()}


def nearest(
    target: Params, holding: Params, points: Sequence[Params], taken: set[tuple], fits: Callable[[Params], bool]
) -> Params | None:
    """The untried point that fits, holds every value of `holding`, and changes the fewest keys of `target` (among
    equals, the first in the space's order); None where that point was taken already."""
    ranked = sorted(
        (p for p in points if all(p.get(k) == v for k, v in holding.items())),
        key=lambda p: sum(p[k] != target.get(k) for k in p),
    )
    best = next((p for p in ranked if fits(p)), None)
    return None if best is None or key(best) in taken else best


def together(
    centre: Params,
    tried: Sequence[Tried],
    tolerance: float,
    points: Sequence[Params],
    taken: set[tuple],
    fits: Callable[[Params], bool] = lambda p: True,
) -> Params | None:
    """After the screening: the anchor with every winning value; then each value that did not lose (tied, or measured
    nothing: out of memory, over the cap) where its anchor held a value the winners have left, moved onto them; None
    once each was taken."""
    found = moves(centre, tried, tolerance)
    measured = [t for t in tried if t.seconds is not None]
    if not measured:
        return None
    won = winners(found)
    start = anchor(centre, [(t.params, t.seconds) for t in measured], tolerance, [t.spread for t in measured])
    target = {**start, **won}
    point = nearest(target, won, points, taken, fits)
    if point is not None:
        return point
    for move in found:
        beside_a_loser = any(target.get(k) != v for k, v in move.anchor.items() if k not in move.changed)
        if move.gained or move.lost or not beside_a_loser:
            continue
        point = nearest({**target, **move.changed}, {**won, **move.changed}, points, taken, fits)
        if point is not None:
            return point
    return None
