"""The base model, allocated directly on its device in the target dtype (no fp32 copy on the way)."""

from __future__ import annotations

import torch
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedModel, PreTrainedTokenizerBase

from pipeline import knobs
from pipeline.config.choices import ModelSource
from pipeline.config.schema import ARCH_KEYS, ModelConfig


def architecture(model: ModelConfig, tokenizer: PreTrainedTokenizerBase) -> dict:
    """The shape fields of a model built from its config, with the tokenizer's special tokens."""
    arch = {k: getattr(model, k) for k in ARCH_KEYS}
    arch.update(pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=None)
    return arch


def build_model(
    model: ModelConfig, tokenizer: PreTrainedTokenizerBase, dtype: torch.dtype, device: str, seed: int
) -> PreTrainedModel:
    """`source: config` builds the model group's architecture with random weights seeded by `seed`;
    `source: pretrained` loads `name_or_path`. The speed knobs add their arguments (`Knob.model_kwargs`)."""
    kwargs = knobs.model_kwargs(model)
    if model.source == ModelSource.PRETRAINED:
        return AutoModelForCausalLM.from_pretrained(model.name_or_path, dtype=dtype, device_map=device, **kwargs)
    arch = architecture(model, tokenizer)
    config = AutoConfig.for_model(arch.pop("model_type"), **arch)
    torch.manual_seed(seed)
    with torch.device(device):
        built = AutoModelForCausalLM.from_config(config, dtype=dtype, **kwargs)
    return built
