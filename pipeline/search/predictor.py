"""A LoRA-aware prediction of a job's peak memory, calibrated by at most two short probe jobs.

Terms, in bytes (b = bytes per element of the compute dtype, T = the tokens of a micro-batch as its layout computes
them: padded to its longest record, or without padding; micro x max_length where no batch is given; S = the sum of
its rows' squared lengths, a padding-free row being one):
- frozen weights:      b x (embedding + every layer's projections + LM head when untied)
- adapters:            16 x LoRA parameters (fp32 weights, fp32 gradients, two fp32 Adam moments)
- activations / token: without checkpointing every layer keeps b x (6h + 4 n_heads d + 4i) + 8h (fp32 norms);
                       with checkpointing each layer keeps its input (b x h) and one layer is recomputed in full
- attention / S:       what attention without a fused kernel keeps of its scores (`model.attn_implementation=eager`:
                       the probabilities in fp32, and in the compute dtype where it is narrower), per head and layer
- loss buffers / token: 8 bytes (TRL's fused LM head computes log-probabilities in chunks and never holds the full
                       logits; the chunk's workspace is a constant, left to the offset)
- the speed knobs:     each knob's memory term (`pipeline.knobs`): checkpointing keeps each layer's input and
                       recomputes one layer; compiled layers keep a share of eager's activations (`torch_compile`),
                       which applies without checkpointing only; a knob without a term changes nothing.
The probes fix the sum's two free numbers: `scale` multiplies the per-token terms, `offset` is what the formula does
not see (CUDA context and allocator slack; on CPU the interpreter). Measurements then take over: for fixed knobs the
peak is linear in the tokens of the run's longest micro-batch (`search.longest`), so a config measured at two token
counts is predicted by the line through them, one measured once by the calibrated slope through that point (a line
measured under another compile choice, with its slope scaled by the formula's ratio of activations); the calibrated
formula answers alone only where no measurement shares the config's knobs.
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
    """What a job's peak memory depends on: the micro-batch (its size, and the tokens of the one measured or predicted
    on), and the settings a line through measurements holds fixed (`other`: every memory knob the formula has no
    term for, e.g. Liger, the compile mode, adapter dtype, padding; `compile`: what is compiled, a `Compile` value,
    and `attention`, which the formula sees)."""

    micro: int
    max_length: int
    dtype: str
    checkpointing: bool
    other: tuple[tuple[str, str], ...] = ()
    compile: str = "off"
    attention: str = "sdpa"  # model.attn_implementation, which the formula sees
    tokens: int | None = None  # T of the micro-batch measured or predicted; None: micro x max_length
    squares: int | None = None  # S; None: micro x max_length^2

    @property
    def work(self) -> tuple[int, int]:
        """(T, S) of its micro-batch."""
        tokens = self.tokens if self.tokens is not None else self.micro * self.max_length
        squares = self.squares if self.squares is not None else self.micro * self.max_length**2
        return tokens, squares

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
        return (self.compile, self.attention, self.other)


def memory_term(knobs: Knobs) -> Memory:
    """The speed knobs' term: checkpointing, the compile choice and the attention as the formula holds them, and
    every other knob the setting holds."""
    own = {
        "train.gradient_checkpointing": knobs.checkpointing,
        "train.torch_compile": knobs.compile,
        "model.attn_implementation": knobs.attention,
    }
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


def square_bytes(shape: Shape, knobs: Knobs) -> float:
    """What attention keeps per unit of S (a squared row length): its scores' bytes in every head and layer."""
    b = DTYPE_BYTES[knobs.dtype]
    per_score = 4 + (b if b < 4 else 0)  # the fp32 probabilities, and their copy in a narrower compute dtype
    return memory_term(knobs).scores * shape.heads * shape.layers * per_score


def token_equivalents(shape: Shape, knobs: Knobs) -> float:
    """The knobs' micro-batch as tokens of its formula: T, and S at its bytes over a token's."""
    tokens, squares = knobs.work
    return tokens + squares * square_bytes(shape, knobs) / per_token_bytes(shape, knobs)


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
        dynamic = self.x(knobs) * per_token_bytes(self.shape, knobs)
        return static_bytes(self.shape, knobs, self.lora_r, self.targets), dynamic

    def x(self, knobs: Knobs) -> float:
        """Where a line through measurements places the knobs' micro-batch: its token equivalents."""
        return token_equivalents(self.shape, knobs)

    def formula(self, knobs: Knobs) -> float:
        static, dynamic = self.analytic(knobs)
        return static + self.scale * dynamic + self.offset

    def predict(self, knobs: Knobs) -> float:
        """Peak memory is linear in the micro-batch's tokens for a fixed setting (`x`), so measurements take over
        from the formula:
        - its own setting measured at two token counts or more: the line through them (least squares);
        - measured at one: that point, with the slope of the nearest setting measured at two (the same formula
          knobs; the same compile choice first, then the most other knobs alike: Liger, the compile mode, the
          adapter dtype and the padding move the peak, but far less its growth per token than the formula errs),
          else the formula's slope;
        - never measured: the nearest measured setting's line, else the nearest single point with the formula's
          slopes, else the calibrated formula.
        A line or point of another compile choice has its growth per token scaled to this one's (`_Line`)."""
        same_formula = [(k, peak) for k, peak in self.measured if k.same_formula(knobs)]
        own = [(self.x(k), peak) for k, peak in same_formula if k.same_setting(knobs)]
        here = self.x(knobs)
        if len({round(x, 6) for x, _ in own}) >= 2:
            return _Line(own).at(here)
        nearest = self._nearest_lines(same_formula, knobs)
        if own:
            x, peak = own[0]
            slope = nearest[0].slope if nearest else self._formula_slope(knobs)
            return peak + slope * (here - x)
        if nearest:
            return nearest[0].at(here)
        if same_formula:  # measured only at single token counts, in other settings: a point, the formula's slopes
            k, peak = same_formula[0]
            return peak - self._formula_slope(k) * self.x(k) + self._formula_slope(knobs) * here
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

        lines = sorted((f for f in settings.values() if len({round(self.x(k), 6) for k, _ in f}) >= 2), key=distance)
        return [self._carried(f, knobs) for f in lines]

    def _carried(self, found: list[tuple[Knobs, float]], knobs: Knobs) -> _Line:
        """A line of another setting carried to `knobs`: its growth per token scaled by the formula's activations,
        the loss's measured bytes per token added as they are."""
        other = found[0][0]
        activations = per_token_bytes(self.shape, knobs) - logit_token_bytes(self.shape, knobs)
        ratio = activations / (per_token_bytes(self.shape, other) - logit_token_bytes(self.shape, other))
        logits = logit_token_bytes(self.shape, knobs) - logit_token_bytes(self.shape, other)
        return _Line([(self.x(k), p) for k, p in found], ratio, logits)

    def _formula_slope(self, knobs: Knobs) -> float:
        """The calibrated formula's bytes per extra token at this setting."""
        return self.scale * per_token_bytes(self.shape, knobs)

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


def _slope(points: list[tuple[float, float]]) -> float:
    """Bytes per extra token of a line through (tokens, peak) points; never negative (resident memory on CPU is
    noisy, and memory never shrinks with a larger micro-batch)."""
    slope, _ = statistics.linear_regression([float(m) for m, _ in points], [p for _, p in points])
    return max(slope, 0.0)


@dataclass(frozen=True)
class _Line:
    """The least-squares line through (tokens, peak) points of one setting; `ratio` scales what grows with the
    tokens to another setting's activations (1: the points' own)."""

    points: list[tuple[float, float]]
    ratio: float = 1.0
    extra: float = 0.0  # bytes per token another setting's loss keeps beyond the points' own

    @property
    def slope(self) -> float:
        return _slope(self.points) * self.ratio + self.extra

    def at(self, x: float) -> float:
        mean_x = statistics.fmean(x for x, _ in self.points)
        mean_p = statistics.fmean(p for _, p in self.points)
        return mean_p - _slope(self.points) * mean_x + self.slope * x
