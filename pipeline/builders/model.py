"""The base model, allocated directly on its device in the target dtype (no fp32 copy on the way)."""

from __future__ import annotations

import torch
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedModel


def build_model(
    source: str,
    name_or_path: str | None,
    architecture: dict,
    dtype: torch.dtype,
    device: str,
    attn_implementation: str,
    seed: int,
) -> PreTrainedModel:
    """`source: config` builds `architecture` (a model_type plus shape fields) with random weights seeded by `seed`;
    `source: pretrained` loads `name_or_path`."""
    if source == "pretrained":
        return AutoModelForCausalLM.from_pretrained(
            name_or_path, dtype=dtype, device_map=device, attn_implementation=attn_implementation
        )
    arch = dict(architecture)
    config = AutoConfig.for_model(arch.pop("model_type"), **arch)
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attn_implementation)
    return model
