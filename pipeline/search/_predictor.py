"""A LoRA-aware prediction of a job's peak memory (`search._formula`), calibrated by at most two short probe jobs,
then taken over by the peaks the study measures.

The probes fix the formula's two free numbers: `scale` multiplies the activations, `offset` is what the formula does
not see. Measured peaks then take over: for fixed knobs the peak is linear in the tokens of the run's longest
micro-batch (`search._longest`), so every setting measured is a line (`search._lines`): through its points where it has
two token counts, else its point with the growth per token of the nearest setting that has (else the formula's). A
config is predicted on its own setting's line, else on the nearest measured setting's, carried by the difference of
their terms; the calibrated formula answers alone only where nothing of its formula's knobs was measured.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from pipeline.knobs import Memory
from pipeline.measure.flops import Shape
from pipeline.search._formula import (
    Knobs,
    activation_token_bytes,
    beyond_terms,
    held_token_bytes,
    memory_term,
    static_bytes,
    term_of,
    token_equivalents,
)
from pipeline.search._lines import Line, Terms

Measured = list[tuple[Knobs, float]]  # (knobs, peak bytes)


@dataclass
class Predictor:
    shape: Shape
    lora_r: int
    targets: list[str]
    scale: float = 1.0
    offset: float = 0.0
    measured: Measured = field(default_factory=list)  # (knobs, peak bytes) of finished jobs
    kept: dict = field(default_factory=dict, repr=False, compare=False)  # what it worked out, by what it depends on

    def terms(self, knobs: Knobs) -> Terms:
        """The knobs' formula: the fixed bytes, the activations per token, the measured figures per token."""
        key = ("terms", knobs)
        if key not in self.kept:
            static = static_bytes(self.shape, knobs, self.lora_r, self.targets)
            activations = activation_token_bytes(self.shape, knobs)
            self.kept[key] = Terms(static, activations, held_token_bytes(self.shape, knobs))
        return self.kept[key]

    def x(self, knobs: Knobs) -> float:
        """Where a line through measurements places the knobs' micro-batch: its token equivalents."""
        key = ("x", knobs)
        if key not in self.kept:
            self.kept[key] = token_equivalents(self.shape, knobs)
        return self.kept[key]

    def formula(self, knobs: Knobs) -> float:
        return self.formula_line(knobs).at(self.x(knobs))

    def formula_line(self, knobs: Knobs) -> Line:
        """The calibrated formula as a line through the knobs' token equivalents."""
        terms = self.terms(knobs)
        return Line(terms.static + self.offset, self.scale * terms.activations + terms.held, 0)

    def predict(self, knobs: Knobs) -> float:
        """Peak memory is linear in the micro-batch's tokens for a fixed setting (`x`), so measurements take over from
        the formula: the knobs' own setting's line where it was measured, else the nearest measured setting's line
        carried to it (`nearest`); the calibrated formula where nothing of the same formula's knobs was measured."""
        same = tuple((k, p) for k, p in self.measured if k.same_formula(knobs))
        key = ("lines", same, self.scale, self.offset)
        if key not in self.kept:
            self.kept[key] = self.lines(list(same))
        found = self.nearest(knobs, self.kept[key])
        if found is None:
            return self.formula(knobs)
        source, line = found
        return line.carried(self.terms(source), self.terms(knobs)).at(self.x(knobs))

    def lines(self, measured: Measured) -> list[tuple[Knobs, Line]]:
        """Each measured setting's line (and a knobs of it): through its points where they hold two token counts or
        more; else its point with the growth per token of the nearest setting that has (carried to it), else the
        formula's."""
        settings: dict[tuple, list[tuple[Knobs, float]]] = {}
        for k, peak in measured:
            settings.setdefault(k.setting, []).append((k, peak))
        fitted = []
        for found in settings.values():
            line = Line.through([(self.x(k), p) for k, p in found])
            if line is not None:
                fitted.append((found[0][0], line))
        lines = list(fitted)
        for found in settings.values():
            if Line.through([(self.x(k), p) for k, p in found]) is None:
                k = found[0][0]
                slope = self.slope(k, fitted)
                lines.append((k, Line.point([(self.x(k), p) for _, p in found], slope)))
        return lines

    def slope(self, knobs: Knobs, fitted: list[tuple[Knobs, Line]]) -> float:
        """The growth per token of the knobs' setting: the nearest measured line's, carried to it, else the
        formula's."""
        found = self.nearest(knobs, fitted)
        if found is None:
            return self.formula_line(knobs).slope
        source, line = found
        return line.carried(self.terms(source), self.terms(knobs)).slope

    def nearest(self, knobs: Knobs, lines: list[tuple[Knobs, Line]]) -> tuple[Knobs, Line] | None:
        """The measured line nearest the knobs: with the fewest changes that move the peak beyond any term
        (`Knob.unmodelled`: the padding's layout, ...), then the fewest keys apart whose change changes the memory
        term, then the least added to what was measured: the change of the formula's peak across those keys, and the
        growth beyond the tokens it measured (the less a line is carried, the less it can be off), then the fewest keys
        apart, a line before a point. Its own setting's line is the nearest unless it must be carried beyond its
        tokens and another setting's, apart only in keys without a term, was measured there."""
        here, mine, beyond = self.x(knobs), self.terms(knobs), beyond_terms(knobs)

        def distance(entry: tuple[Knobs, Line]) -> tuple:
            k, line = entry
            theirs = self.terms(k)
            grown = mine.activations + mine.held - theirs.activations - theirs.held
            moved = abs(mine.static - theirs.static + grown * here) + line.beyond(here)
            apart, by_memory = keys_apart(knobs, k)
            found = beyond_terms(k)
            unknown = sum(beyond.get(key) != found.get(key) for key in beyond.keys() | found.keys())
            return (unknown, by_memory, moved, apart, line.points < 2)

        return min(lines, key=distance, default=None)

    def calibrate(self, probes: Measured) -> None:
        """Fit scale and offset to measured peaks (bytes) of one or two probe jobs: the scale to the growth of what the
        activations do not explain of the peak, the offset to the rest."""
        self.scale, self.offset = 1.0, 0.0
        points = []
        for k, peak in probes:
            terms, x = self.terms(k), self.x(k)
            points.append((terms.activations * x, peak - terms.static - terms.held * x))
        if len(points) >= 2 and points[0][0] != points[1][0]:
            (d0, p0), (d1, p1) = points[0], points[1]
            self.scale = max(0.05, (p1 - p0) / (d1 - d0))
        if points:
            d0, p0 = points[0]
            self.offset = p0 - self.scale * d0


def keys_apart(knobs: Knobs, other: Knobs) -> tuple[int, int]:
    """How many knob values two settings differ in, and in how many of them the change (alone, beside the knobs' other
    values) changes the memory term on the knobs' micro-batch (a term for a mask counts only where it takes one)."""
    mine, theirs = knobs.values, other.values
    apart = [key for key in mine.keys() | theirs.keys() if mine.get(key) != theirs.get(key)]

    def on_batch(term: Memory) -> Memory:
        return term if knobs.masked else dataclasses.replace(term, repeated_kv=0.0)

    base = on_batch(memory_term(knobs))
    swapped = (
        {**mine, key: theirs[key]} if key in theirs else {k: v for k, v in mine.items() if k != key} for key in apart
    )
    return len(apart), sum(on_batch(term_of(tuple(sorted(v.items())), knobs.dtype)) != base for v in swapped)
