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
