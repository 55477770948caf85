"""The one place a LoRA config becomes a `peft.LoraConfig` (the trainer builds the PeftModel, or a speed knob
does: `Knob.adapters`)."""

from __future__ import annotations

from peft import LoraConfig, TaskType

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
