"""Floating-point work per trained token, for MFU.

For a decoder with frozen base weights and LoRA adapters, per token:
  forward   F = 2*N_base + 2*N_lora + A            (A = attention scores and values: 2 * L * T * n_heads * head_dim,
                                                    T the padded sequence length; causal masking is not discounted)
  backward  B = 2*N_base + 4*N_lora + 2*A          (activation gradients through every matmul; weight gradients
                                                    only for the adapters, whose weights are trained)
  model FLOPs per token = F + B; with gradient checkpointing the hardware also recomputes F (reported separately,
  MFU uses model FLOPs). N_base counts the weights of every Linear layer and the LM head; embeddings cost no FLOPs.
MFU = real tokens per second * model FLOPs per token / peak dense TFLOP/s of the gpu profile.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class FlopsPerToken:
    model: float
    hardware: float


def flops_per_token(
    base_matmul_params: int,
    lora_params: int,
    layers: int,
    seq_len: float,
    n_heads: int,
    head_dim: int,
    recompute: bool,
) -> FlopsPerToken:
    attention = 2.0 * layers * seq_len * n_heads * head_dim
    forward = 2.0 * base_matmul_params + 2.0 * lora_params + attention
    backward = 2.0 * base_matmul_params + 4.0 * lora_params + 2.0 * attention
    model = forward + backward
    return FlopsPerToken(model=model, hardware=model + (forward if recompute else 0.0))


def mfu(model_flops_per_s: float, peak_flops: float | None) -> float | None:
    """Model FLOP/s achieved over the device's peak dense FLOP/s; None without a peak figure (CPU)."""
    if not peak_flops or model_flops_per_s <= 0:
        return None
    return model_flops_per_s / peak_flops


@dataclass(frozen=True)
class Shape:
    """A decoder's matrix shapes, from the model group of a config."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool

    @classmethod
    def from_model(cls, m) -> Shape:
        """`m`: the model group (its fields read as attributes)."""
        return cls(
            m.hidden_size,
            m.intermediate_size,
            m.num_hidden_layers,
            m.num_attention_heads,
            m.num_key_value_heads,
            m.head_dim,
            m.vocab_size,
            bool(m.tie_word_embeddings),
        )

    def base_matmul_params(self) -> int:
        """Weights of every decoder Linear and the LM head (embeddings cost no FLOPs)."""
        per_layer = sum(i * o for i, o in self.projections().values())
        return self.layers * per_layer + self.vocab * self.hidden

    def lora_params(self, r: int, targets: list[str]) -> int:
        chosen = (
            self.projections()
            if targets == ["all-linear"]
            else {k: v for k, v in self.projections().items() if k in targets}
        )
        return self.layers * sum(r * (i + o) for i, o in chosen.values())

    def projections(self) -> dict[str, tuple[int, int]]:
        """(in, out) of each Linear in one decoder layer."""
        h, i, q, kv = self.hidden, self.intermediate, self.heads * self.head_dim, self.kv_heads * self.head_dim
        return {
            "q_proj": (h, q),
            "k_proj": (h, kv),
            "v_proj": (h, kv),
            "o_proj": (q, h),
            "gate_proj": (h, i),
            "up_proj": (h, i),
            "down_proj": (i, h),
        }


def count_params(model: torch.nn.Module) -> tuple[int, int]:
    """(weights of frozen Linear layers incl. the LM head, trainable adapter weights) of a PEFT-wrapped model."""
    import torch  # the job process's: the commands that only plan or read never import it

    base = sum(
        module.weight.numel()
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.Linear) and "lora_" not in name
    )
    lora = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return base, lora


def flops_fields(model: torch.nn.Module, steps, checkpointing: bool) -> dict:
    """The trained model's parameter counts and FLOPs per token, at the mean padded length its steps ran."""
    base, lora = count_params(model)
    padded_length = sum(s.padded_tokens for s in steps) / max(1, sum(s.samples for s in steps)) if steps else 0
    m = model.base_model.model.config
    head_dim = getattr(m, "head_dim", None) or m.hidden_size // m.num_attention_heads
    fpt = flops_per_token(
        base, lora, m.num_hidden_layers, padded_length, m.num_attention_heads, head_dim, checkpointing
    )
    return {"base_matmul_params": base, "lora_params": lora, "model_flops_per_token": fpt.model}
