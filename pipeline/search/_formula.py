"""The memory predictor's formula: what a job's peak memory depends on (`Knobs`) and its terms, in bytes.

Terms, in bytes (b = bytes per element of the compute dtype, T = the tokens of a micro-batch as its layout computes
them: padded to its longest record, or without padding; micro x max_length where no batch is given; S = the sum of
its rows' squared lengths, a padding-free row being one):
- frozen weights:      b x (embedding + every layer's projections + LM head when untied)
- adapters:            16 x LoRA parameters (fp32 weights, fp32 gradients, two fp32 Adam moments)
- activations / token: without checkpointing every layer keeps b x (6h + 4q + 4k + 4i) (q = n_heads d, k = n_kv_heads
                       d), compiled layers b x (4h + 3q + 3k + 3i) (the compile knob's count), and b x 2(q - k) more
                       where SDPA repeats the key and value heads under a mask (the attention knob's), all with the
                       adapters in the compute dtype (PEFT's fp32 adapters keep their casts too: the adapter knob's
                       share), as counted on the CPU (`bench.saved_bytes`);
                       with checkpointing each layer keeps its input (b x h) and one layer is recomputed in full (the
                       checkpointing knob's count)
- attention / S:       what attention without a fused kernel keeps of its scores (eager attention: the attention
                       knob's count, the probabilities in fp32, and in the compute dtype where it is narrower), per
                       head and layer
- loss buffers / token: 8 bytes (TRL's fused LM head computes log-probabilities in tiles and never holds the full
                       logits; the tile's workspace is a constant, left to the offset)
- the speed knobs:     each knob's memory term (`pipeline.knobs`), beside the job's other knobs (searched or held by
                       the command line): a share of the activations (compiled layers, adapters in the compute dtype),
                       the elements of hidden and intermediate size eager layers do not keep (Liger's kernels), the
                       logits a loss keeps (per token and vocabulary entry), CUDA graphs' copies
                       of each layer's input; a knob without a term changes nothing.
The probes fix the sum's two free numbers (`search._predictor`): `scale` multiplies the activations, `offset` is what
the formula does not see (CUDA context and allocator slack; on CPU the interpreter); the logits and the graphs' copies
are measured figures and are not scaled.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from pipeline.knobs import KnobRole, Memory, role, unmodelled
from pipeline.knobs import memory as knob_memory
from pipeline.knobs.base import Compile
from pipeline.measure.flops import Shape

LORA_STATE_BYTES = 16
LOSS_BYTES_PER_TOKEN = 8
# the knobs the formula holds a field of its own for (`Knobs`, each field named as its role), the dtype first
FORMULA_ROLES = (KnobRole.DTYPE, KnobRole.CHECKPOINTING, KnobRole.COMPILE, KnobRole.ATTENTION)


@dataclass(frozen=True)
class Knobs:
    """What a job's peak memory depends on: the micro-batch (its size, and the tokens of the one measured or predicted
    on), the settings a line through measurements holds fixed (`other`: the searched knobs the formula has no field
    for, e.g. Liger, the compile mode, the loss, the padding; `compile`: what is compiled, a `Compile` value, and
    `attention`), and `held`: the other knobs' values as the command line holds them (the same for every config of a
    study: their terms count, they set no line apart)."""

    micro: int
    max_length: int
    dtype: str
    checkpointing: bool
    other: tuple[tuple[str, str], ...] = ()
    compile: str = "off"
    attention: str = "sdpa"  # the attention kernels, which the formula sees
    tokens: int | None = None  # T of the micro-batch measured or predicted; None: micro x max_length
    squares: int | None = None  # S; None: micro x max_length^2
    held: tuple[tuple[str, str], ...] = ()
    masked: bool = False  # whether the micro-batch's attention takes a mask (`records.MicroBatch.masked`)

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
            and element_bytes(self.dtype) == element_bytes(other.dtype)
        )

    def same_setting(self, other: Knobs) -> bool:
        """Everything but the micro-batch alike."""
        return self.same_formula(other) and self.setting == other.setting

    @property
    def setting(self) -> tuple:
        """What a line through measurements holds fixed beyond the formula's knobs."""
        return (self.compile, self.attention, self.other)

    @property
    def values(self) -> dict[str, str]:
        """Every knob value its memory term reads (a searched value over a held one)."""
        own = {role(r).key: str(getattr(self, r.value)) for r in FORMULA_ROLES if r is not KnobRole.DTYPE}
        return {**dict(self.held), **dict(self.other), **own}


@functools.cache
def element_bytes(dtype: str) -> int:
    """The bytes of an element in a compute dtype (the dtype knob's: `KnobRole.DTYPE`)."""
    return role(KnobRole.DTYPE).element_bytes(dtype)


def memory_term(knobs: Knobs) -> Memory:
    """The speed knobs' term: every knob value of the config, each beside the others."""
    return term_of(tuple(sorted(knobs.values.items())), knobs.dtype)


def beyond_terms(knobs: Knobs) -> dict[str, str]:
    """What of the knobs' values moves the peak beyond their terms (`pipeline.knobs.unmodelled`), by key."""
    return dict(unmodelled_of(tuple(sorted(knobs.values.items()))))


@functools.lru_cache(maxsize=1 << 16)
def unmodelled_of(values: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    return unmodelled(values)


@functools.lru_cache(maxsize=1 << 16)
def term_of(values: tuple[tuple[str, str], ...], dtype: str) -> Memory:
    """`pipeline.knobs.memory` of knob values, kept: a study asks it of the same few settings thousands of times."""
    return knob_memory(values, dtype)


def static_bytes(shape: Shape, knobs: Knobs, lora_r: int, targets: list[str]) -> float:
    b = element_bytes(knobs.dtype)
    per_layer = sum(i * o for i, o in shape.projections().values()) + 2 * shape.hidden
    weights = shape.vocab * shape.hidden * (1 if shape.tied else 2) + shape.layers * per_layer
    lora = shape.lora_params(lora_r, targets)
    return b * weights + LORA_STATE_BYTES * lora + memory_term(knobs).static_bytes


def activation_token_bytes(shape: Shape, knobs: Knobs) -> float:
    """What the layers keep per token (and the loss's buffers): the part of the growth per token the calibration
    scales. A micro-batch whose attention takes a mask keeps more (`masked_token_bytes`), which its token equivalents
    hold: a setting's peak stays one line in them."""
    return layer_token_bytes(shape, knobs, masked=False) + LOSS_BYTES_PER_TOKEN + memory_term(knobs).token_bytes


def masked_token_bytes(shape: Shape, knobs: Knobs) -> float:
    """What the layers keep more per token where the micro-batch's attention takes a mask (`Memory.repeated_kv`)."""
    return layer_token_bytes(shape, knobs, masked=True) - layer_token_bytes(shape, knobs, masked=False)


def layer_token_bytes(shape: Shape, knobs: Knobs, masked: bool) -> float:
    """What every layer together keeps per token, on a micro-batch whose attention takes a mask or not."""
    b = element_bytes(knobs.dtype)
    h, i, q, k = shape.hidden, shape.intermediate, shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    term = memory_term(knobs)

    def eager(t: Memory) -> float:  # b x (6h + 4q + 4k + 4i), less what the term's kernels do not keep
        return b * (6 * h + 4 * q + 4 * k + 4 * i - t.unkept[0] * h - t.unkept[1] * i)

    def repeated(t: Memory) -> float:  # the key and value heads repeated to the query heads (the attention knob's)
        return b * t.repeated_kv * (q - k) if masked else 0.0

    if term.checkpointed:  # the checkpointing knob's own count, its recomputed layer eager with the terms eager has
        off = memory_term(replace(knobs, compile=Compile.OFF.value))
        layer = off.activations * (eager(off) + repeated(off))
        kept = role(KnobRole.CHECKPOINTING).kept_bytes(shape.layers, b, h, layer)
    else:  # compiled layers: the compile knob's
        layer = role(KnobRole.COMPILE).layer_bytes(b, h, q, k, i) if term.fused else eager(term)
        kept = term.activations * shape.layers * (layer + repeated(term))
    return kept


def held_token_bytes(shape: Shape, knobs: Knobs) -> float:
    """What the knobs' terms add per token as measured figures, not scaled: the logits a loss keeps, and the copies of
    each layer's input CUDA graphs keep."""
    term = memory_term(knobs)
    return term.logit_bytes * shape.vocab + term.inputs * element_bytes(knobs.dtype) * shape.hidden * shape.layers


def per_token_bytes(shape: Shape, knobs: Knobs) -> float:
    return activation_token_bytes(shape, knobs) + held_token_bytes(shape, knobs)


def square_bytes(shape: Shape, knobs: Knobs) -> float:
    """What attention keeps per unit of S (a squared row length): its scores' bytes in every head and layer."""
    per_score = role(KnobRole.ATTENTION).score_bytes(element_bytes(knobs.dtype))  # the attention knob's
    return memory_term(knobs).scores * shape.heads * shape.layers * per_score


def token_equivalents(shape: Shape, knobs: Knobs) -> float:
    """The knobs' micro-batch as tokens of its formula: T, S at its bytes over a token's, and where its attention
    takes a mask, what that keeps more of T at its bytes over a token's."""
    tokens, squares = knobs.work
    masked = tokens * masked_token_bytes(shape, knobs) if knobs.masked else 0.0
    return tokens + (squares * square_bytes(shape, knobs) + masked) / per_token_bytes(shape, knobs)
