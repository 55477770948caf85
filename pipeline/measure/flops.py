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


def mfu(tokens_per_s: float, model_flops_per_token: float, peak_tflops: float | None) -> float | None:
    if not peak_tflops or tokens_per_s <= 0:
        return None
    return tokens_per_s * model_flops_per_token / (peak_tflops * 1e12)


def count_params(model) -> tuple[int, int]:
    """(weights of frozen Linear layers incl. the LM head, trainable adapter weights) of a PEFT-wrapped model."""
    import torch

    base = 0
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and "lora_" not in name:
            base += module.weight.numel()
    lora = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return base, lora
