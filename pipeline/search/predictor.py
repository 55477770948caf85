"""A LoRA-aware prediction of a job's peak memory, calibrated by at most two short probe jobs.

Terms, in bytes (b = bytes per element of the compute dtype, T = tokens per micro-batch = micro x max_length):
- frozen weights:      b x (embedding + every layer's projections + LM head when untied)
- adapters:            16 x LoRA parameters (fp32 weights, fp32 gradients, two fp32 Adam moments)
- activations / token: without checkpointing every layer keeps b x (6h + 4 n_heads d + 4i) + 8h (fp32 norms);
                       with checkpointing each layer keeps its input (b x h) and one layer is recomputed in full
- loss buffers / token: 8 bytes (TRL's fused LM head computes log-probabilities in chunks and never holds the full
                       logits; the chunk's workspace is a constant, left to the offset)
The analytic sum is the shape of the answer; the probes fix its two free numbers: `scale` multiplies the per-token
terms (activations and loss buffers), `offset` is what the formula does not see (CUDA context and allocator slack
on a GPU; the interpreter and libraries on CPU). Two probes at the smallest and largest micro-batch give both; one
probe gives the offset with scale 1.

Measurements then take over from the formula: peak memory is linear in the micro-batch for fixed knobs, so a config
whose knobs (checkpointing, bytes per element, length) were measured at two micro-batches is predicted by the line
through them (least squares over all), and one measured at a single micro-batch by the calibrated slope through that
point. Only where no measurement shares its knobs does the calibrated formula answer alone (the probes calibrate
one setting of the knobs; the formula's per-token terms for another are off by up to ~20%).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from pipeline.measure.flops import Shape

DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}
LORA_STATE_BYTES = 16
LOSS_BYTES_PER_TOKEN = 8


@dataclass(frozen=True)
class Knobs:
    """What a job's peak memory depends on: the micro-batch, and the settings a line through measurements holds
    fixed (`other`: every memory knob the formula has no term for, e.g. Liger, compile, adapter dtype)."""

    micro: int
    max_length: int
    dtype: str
    checkpointing: bool
    other: tuple[tuple[str, str], ...] = ()

    def same_formula(self, other: Knobs) -> bool:
        """The formula's knobs alike, but the micro-batch (fp16 and bf16 take the same bytes)."""
        return (
            self.checkpointing == other.checkpointing
            and self.max_length == other.max_length
            and DTYPE_BYTES[self.dtype] == DTYPE_BYTES[other.dtype]
        )

    def same_setting(self, other: Knobs) -> bool:
        """Everything but the micro-batch alike."""
        return self.same_formula(other) and self.other == other.other


def static_bytes(shape: Shape, knobs: Knobs, lora_r: int, targets: list[str]) -> float:
    b = DTYPE_BYTES[knobs.dtype]
    per_layer = sum(i * o for i, o in shape.projections().values()) + 2 * shape.hidden
    weights = shape.vocab * shape.hidden * (1 if shape.tied else 2) + shape.layers * per_layer
    lora = shape.lora_params(lora_r, targets)
    return b * weights + LORA_STATE_BYTES * lora


def per_token_bytes(shape: Shape, knobs: Knobs) -> float:
    b = DTYPE_BYTES[knobs.dtype]
    h, i, q = shape.hidden, shape.intermediate, shape.heads * shape.head_dim
    layer = b * (6 * h + 4 * q + 4 * i) + 8 * h
    activations = (shape.layers * b * h + layer) if knobs.checkpointing else shape.layers * layer
    return activations + LOSS_BYTES_PER_TOKEN


@dataclass
class Predictor:
    shape: Shape
    lora_r: int
    targets: list[str]
    scale: float = 1.0
    offset: float = 0.0
    measured: list[tuple[Knobs, float]] = field(default_factory=list)  # (knobs, peak bytes) of finished jobs

    def analytic(self, knobs: Knobs) -> tuple[float, float]:
        """(static bytes, per-micro-batch bytes) before calibration."""
        tokens = knobs.micro * knobs.max_length
        return static_bytes(self.shape, knobs, self.lora_r, self.targets), tokens * per_token_bytes(self.shape, knobs)

    def formula(self, knobs: Knobs) -> float:
        static, dynamic = self.analytic(knobs)
        return static + self.scale * dynamic + self.offset

    def predict(self, knobs: Knobs) -> float:
        """Peak memory is linear in the micro-batch for a fixed setting, so measurements take over from the formula:
        - its own setting measured at two micro-batches or more: the line through them (least squares);
        - measured at one: that point, with the slope of the nearest setting measured at two (the same formula
          knobs, the most other knobs alike: Liger, compile and the adapter dtype move the peak, but far less its
          growth per sequence than the formula errs), else the formula's slope;
        - never measured: the nearest measured setting's line, else the calibrated formula."""
        same_formula = [(k, peak) for k, peak in self.measured if k.same_formula(knobs)]
        own = [(k.micro, peak) for k, peak in same_formula if k.same_setting(knobs)]
        if len({m for m, _ in own}) >= 2:
            return _line(own, knobs.micro)
        nearest = _nearest_lines(same_formula, knobs)
        if own:
            micro, peak = own[0]
            slope = _slope(nearest[0]) if nearest else self._formula_slope(knobs)
            return peak + slope * (knobs.micro - micro)
        if nearest:
            return _line(nearest[0], knobs.micro)
        points = [(k.micro, peak) for k, peak in same_formula]
        if points:  # measured only at single micro-batches, in other settings: the nearest point, formula's slope
            micro, peak = points[0]
            return peak + self._formula_slope(knobs) * (knobs.micro - micro)
        return self.formula(knobs)

    def _formula_slope(self, knobs: Knobs) -> float:
        """The calibrated formula's bytes per extra sequence at this setting."""
        return self.scale * self.analytic(knobs)[1] / knobs.micro

    def calibrate(self, probes: list[tuple[Knobs, float]]) -> None:
        """Fit scale and offset to measured peaks (bytes) of one or two probe jobs."""
        points = [(self.analytic(k), peak) for k, peak in probes]
        if len(points) >= 2 and points[0][0][1] != points[1][0][1]:
            (s0, d0), p0 = points[0]
            (s1, d1), p1 = points[1]
            self.scale = max(0.05, ((p1 - s1) - (p0 - s0)) / (d1 - d0))
        if points:
            (s0, d0), p0 = points[0]
            self.offset = p0 - s0 - self.scale * d0


def _slope(points: list[tuple[int, float]]) -> float:
    """Bytes per extra sequence of a line through (micro, peak) points; never negative (resident memory on CPU is
    noisy, and memory never shrinks with a larger micro-batch)."""
    slope, _ = statistics.linear_regression([float(m) for m, _ in points], [p for _, p in points])
    return max(slope, 0.0)


def _line(points: list[tuple[int, float]], micro: int) -> float:
    mean_m = statistics.fmean(m for m, _ in points)
    mean_p = statistics.fmean(p for _, p in points)
    return mean_p + _slope(points) * (micro - mean_m)


def _nearest_lines(measured: list[tuple[Knobs, float]], knobs: Knobs) -> list[list[tuple[int, float]]]:
    """The (micro, peak) points of every other setting measured at two micro-batches or more, nearest first (the
    most `other` knobs alike)."""
    settings: dict[tuple, list[tuple[int, float]]] = {}
    for k, peak in measured:
        if k.other != knobs.other:
            settings.setdefault(k.other, []).append((k.micro, peak))
    lines = [(other, points) for other, points in settings.items() if len({m for m, _ in points}) >= 2]
    alike = dict(knobs.other)
    lines.sort(key=lambda item: -sum(alike.get(key) == value for key, value in item[0]))
    return [points for _, points in lines]
