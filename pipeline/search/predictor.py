"""A LoRA-aware prediction of a job's peak memory, calibrated by at most two short probe jobs.

Terms, in bytes (b = bytes per element of the compute dtype, T = tokens per micro-batch = micro x max_length):
- frozen weights:      b x (embedding + every layer's projections + LM head when untied)
- adapters:            16 x LoRA parameters (fp32 weights, fp32 gradients, two fp32 Adam moments)
- activations / token: without checkpointing every layer keeps b x (6h + 4 n_heads d + 4i) + 8h (fp32 norms);
                       with checkpointing each layer keeps its input (b x h) and one layer is recomputed in full
- loss buffers / token: 8 bytes (TRL's fused LM head computes log-probabilities in chunks and never holds the full
                       logits; the chunk's workspace is a constant, left to the offset)
- the speed knobs:     each knob's memory term (`pipeline.knobs`): checkpointing keeps each layer's input and
                       recomputes one layer; compiled layers keep a share of eager's activations (`torch_compile`),
                       which applies without checkpointing only; a knob without a term changes nothing.
The analytic sum is the shape of the answer; the probes fix its two free numbers: `scale` multiplies the per-token
terms (activations and loss buffers), `offset` is what the formula does not see (CUDA context and allocator slack
on a GPU; the interpreter and libraries on CPU). Two probes at the smallest and largest micro-batch give both; one
probe gives the offset with scale 1.

Measurements then take over from the formula: peak memory is linear in the micro-batch for fixed knobs, so a config
whose knobs (checkpointing, bytes per element, length) were measured at two micro-batches is predicted by the line
through them (least squares over all), and one measured at a single micro-batch by the calibrated slope through that
point. A line measured under another compile choice is used with its slope scaled by the formula's ratio of
activations (compiling changes what grows with the micro-batch, not the weights). Only where no measurement shares
its knobs does the calibrated formula answer alone (the probes calibrate one setting of the knobs; the formula's
per-token terms for another are off by up to ~20%).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from pipeline.knobs import Memory
from pipeline.knobs import memory as knob_memory
from pipeline.measure.flops import Shape

DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}
LORA_STATE_BYTES = 16
LOSS_BYTES_PER_TOKEN = 8


@dataclass(frozen=True)
class Knobs:
    """What a job's peak memory depends on: the micro-batch, and the settings a line through measurements holds
    fixed (`other`: every memory knob the formula has no term for, e.g. Liger, the compile mode, adapter dtype;
    `compile`: what is compiled, a `Compile` value, which the formula sees)."""

    micro: int
    max_length: int
    dtype: str
    checkpointing: bool
    other: tuple[tuple[str, str], ...] = ()
    compile: str = "off"

    def same_formula(self, other: Knobs) -> bool:
        """The formula's knobs alike, but the micro-batch (fp16 and bf16 take the same bytes)."""
        return (
            self.checkpointing == other.checkpointing
            and self.max_length == other.max_length
            and DTYPE_BYTES[self.dtype] == DTYPE_BYTES[other.dtype]
        )

    def same_setting(self, other: Knobs) -> bool:
        """Everything but the micro-batch alike."""
        return self.same_formula(other) and self.setting == other.setting

    @property
    def setting(self) -> tuple:
        """What a line through measurements holds fixed beyond the formula's knobs."""
        return (self.compile, self.other)


def memory_term(knobs: Knobs) -> Memory:
    """The speed knobs' term: checkpointing and the compile choice as the formula holds them, and every other knob
    the setting holds."""
    own = {"train.gradient_checkpointing": knobs.checkpointing, "train.torch_compile": knobs.compile}
    return knob_memory([*own.items(), *((k, v) for k, v in knobs.other if k not in own)], knobs.dtype)


def static_bytes(shape: Shape, knobs: Knobs, lora_r: int, targets: list[str]) -> float:
    b = DTYPE_BYTES[knobs.dtype]
    per_layer = sum(i * o for i, o in shape.projections().values()) + 2 * shape.hidden
    weights = shape.vocab * shape.hidden * (1 if shape.tied else 2) + shape.layers * per_layer
    lora = shape.lora_params(lora_r, targets)
    return b * weights + LORA_STATE_BYTES * lora + memory_term(knobs).static_bytes


def per_token_bytes(shape: Shape, knobs: Knobs) -> float:
    b = DTYPE_BYTES[knobs.dtype]
    h, i, q = shape.hidden, shape.intermediate, shape.heads * shape.head_dim
    layer = b * (6 * h + 4 * q + 4 * i) + 8 * h
    term = memory_term(knobs)
    kept = shape.layers * b * h + layer if term.checkpointed else term.activations * shape.layers * layer
    return kept + LOSS_BYTES_PER_TOKEN + term.token_bytes + logit_token_bytes(shape, knobs)


def logit_token_bytes(shape: Shape, knobs: Knobs) -> float:
    """What the loss keeps of the logits per token: a measured figure, not the formula's, so a line of another
    setting carries it as it is (not scaled with the activations)."""
    return memory_term(knobs).logit_bytes * shape.vocab


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
          knobs; the same compile choice first, then the most other knobs alike: Liger, the compile mode and the
          adapter dtype move the peak, but far less its growth per sequence than the formula errs), else the
          formula's slope;
        - never measured: the nearest measured setting's line, else the nearest single point with the formula's
          slopes, else the calibrated formula.
        A line or point of another compile choice has its growth per sequence scaled to this one's (`_Line`)."""
        same_formula = [(k, peak) for k, peak in self.measured if k.same_formula(knobs)]
        own = [(k.micro, peak) for k, peak in same_formula if k.same_setting(knobs)]
        if len({m for m, _ in own}) >= 2:
            return _Line(own).at(knobs.micro)
        nearest = self._nearest_lines(same_formula, knobs)
        if own:
            micro, peak = own[0]
            slope = nearest[0].slope if nearest else self._formula_slope(knobs)
            return peak + slope * (knobs.micro - micro)
        if nearest:
            return nearest[0].at(knobs.micro)
        if same_formula:  # measured only at single micro-batches, in other settings: a point, the formula's slopes
            k, peak = same_formula[0]
            return peak - self._formula_slope(k) * k.micro + self._formula_slope(knobs) * knobs.micro
        return self.formula(knobs)

    def _nearest_lines(self, measured: list[tuple[Knobs, float]], knobs: Knobs) -> list[_Line]:
        """Every other setting measured at two micro-batches or more, nearest first (the same compile choice, then
        compiled or not alike, then the most `other` knobs alike), its slope scaled to `knobs`' activations."""
        settings: dict[tuple, list[tuple[Knobs, float]]] = {}
        for k, peak in measured:
            if k.setting != knobs.setting:
                settings.setdefault(k.setting, []).append((k, peak))

        def distance(found: list[tuple[Knobs, float]]) -> tuple[int, bool, bool, int]:
            """Keys set apart by a memory term first (its own knob's term differs), then the compile choice
            (compiled or not before which), then any other key."""
            k = found[0][0]
            mine, theirs = dict(knobs.other), dict(k.other)
            apart = [key for key in mine.keys() | theirs.keys() if mine.get(key) != theirs.get(key)]
            by_memory = sum(
                knob_memory([(key, mine[key])], knobs.dtype) != knob_memory([(key, theirs[key])], k.dtype)
                for key in apart
                if key in mine and key in theirs
            )
            compiled_apart = (k.compile == "off") != (knobs.compile == "off")
            return (by_memory, k.compile != knobs.compile, compiled_apart, len(apart))

        lines = sorted((f for f in settings.values() if len({k.micro for k, _ in f}) >= 2), key=distance)
        return [self._carried(f, knobs) for f in lines]

    def _carried(self, found: list[tuple[Knobs, float]], knobs: Knobs) -> _Line:
        """A line of another setting carried to `knobs`: its growth per sequence scaled by the formula's activations,
        the loss's measured bytes per sequence added as they are."""
        other = found[0][0]
        activations = per_token_bytes(self.shape, knobs) - logit_token_bytes(self.shape, knobs)
        ratio = activations / (per_token_bytes(self.shape, other) - logit_token_bytes(self.shape, other))
        logits = (logit_token_bytes(self.shape, knobs) - logit_token_bytes(self.shape, other)) * knobs.max_length
        return _Line([(k.micro, p) for k, p in found], ratio, logits)

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


@dataclass(frozen=True)
class _Line:
    """The least-squares line through (micro, peak) points of one setting; `ratio` scales what grows with the
    micro-batch to another setting's activations (1: the points' own)."""

    points: list[tuple[int, float]]
    ratio: float = 1.0
    extra: float = 0.0  # bytes per sequence another setting's loss keeps beyond the points' own

    @property
    def slope(self) -> float:
        return _slope(self.points) * self.ratio + self.extra

    def at(self, micro: int) -> float:
        mean_m = statistics.fmean(m for m, _ in self.points)
        mean_p = statistics.fmean(p for _, p in self.points)
        return mean_p - _slope(self.points) * mean_m + self.slope * micro
