"""The one place a LoRA config becomes a `peft.LoraConfig`, and the one place a model gets its adapters when the
job builds the PeftModel itself (adapters kept in the compute dtype)."""

from __future__ import annotations

from peft import LoraConfig, PeftModel, TaskType, get_peft_model
from transformers import PreTrainedModel

from pipeline.config import schema


def build_lora_config(lora: schema.LoraConfig) -> LoraConfig:
    """PEFT's config of the lora group."""
    targets = list(lora.target_modules)
    return LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules="all-linear" if targets == ["all-linear"] else targets,
        bias=lora.bias,
        task_type=TaskType.CAUSAL_LM,
    )


def build_peft_model(model: PreTrainedModel, lora: LoraConfig) -> PeftModel:
    """The model with adapters in its own dtype: PEFT otherwise keeps them in fp32 (`autocast_adapter_dtype`), which
    costs a cast of every adapter's input and output at every step."""
    return get_peft_model(model, lora, autocast_adapter_dtype=False)
