"""A knob's memory, as the parent reads it: its term in the peak-memory prediction (`Memory`), and what a process of
a config may keep unused over another's peak of it (`Slack`). Apart from `base`, whose `Knob` returns them."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class Memory:
    """A knob's term in the peak-memory prediction (`search._predictor`). `activations` multiplies what the layers
    keep per token without checkpointing; `checkpointed`: the layers keep only their inputs and one layer is
    recomputed in full (the share then applies to nothing); `fused`: the layers are compiled, and keep what their
    matrix products and attention need rather than eager's element-wise intermediates (`search._formula`);
    `token_bytes` and `static_bytes` add to the bytes per token and the fixed bytes; `logit_bytes` to the bytes per
    token and vocabulary entry (what a loss keeps of the logits); `scores` counts the attention scores each head of
    each layer keeps (attention without a fused kernel keeps its probabilities: memory that grows with the squared
    length of a row); `inputs` counts the copies of each layer's input a token keeps beside the activations, in the
    compute dtype (CUDA graphs' static input buffers); `unkept` counts the elements of hidden size and of intermediate
    size an eager layer does not keep per token (fused kernels that recompute an element-wise intermediate), taken off
    eager's count before the shares apply; `repeated_kv` counts the copies of the query heads' surplus over the key
    and value heads (q - k elements) a token and layer keeps where the micro-batch's attention takes a mask (attention
    that then repeats the key and value heads to every query head). The logits and the inputs are measured figures: a
    line carried between settings adds them as they are, where it scales the activations. The default term changes
    nothing."""

    activations: float = 1.0
    checkpointed: bool = False
    fused: bool = False
    token_bytes: float = 0.0
    static_bytes: float = 0.0
    logit_bytes: float = 0.0
    scores: float = 0.0
    inputs: float = 0.0
    unkept: tuple[float, float] = (0.0, 0.0)  # (of hidden size, of intermediate size) a token and eager layer
    repeated_kv: float = 0.0

    def __add__(self, other: Memory) -> Memory:
        """Two terms together: shares multiply, flags join, the rest adds up (`unkept` element by element)."""
        joined = {}
        for f in dataclasses.fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            if f.name == "activations":
                joined[f.name] = a * b
            elif isinstance(a, bool):
                joined[f.name] = a or b
            elif isinstance(a, tuple):
                joined[f.name] = tuple(x + y for x, y in zip(a, b, strict=True))
            else:
                joined[f.name] = a + b
        return Memory(**joined)


@dataclass(frozen=True)
class Slack:
    """Memory a process may keep unused over another's peak of the same config: `logit_bytes` a token and vocabulary
    entry, and `peak_share` of that peak, `why` in words, `instead` what keeps none (a knob's value, and its cost), and
    `capped_fit` whether its processes were seen to keep none under a cap (a config over the cap by no more than its
    logits' part is then measured)."""

    logit_bytes: float
    why: str
    instead: str
    capped_fit: bool = False
    peak_share: float = 0.0

    def bytes_on(self, tokens: int, vocab: int, peak: float = 0.0) -> float:
        """What it keeps on a micro-batch of `tokens` over a vocabulary of `vocab` entries, beside a peak of `peak`
        bytes."""
        return tokens * vocab * self.logit_bytes + peak * self.peak_share
