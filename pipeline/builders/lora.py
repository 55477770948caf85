"""The one place a LoRA config becomes a `peft.LoraConfig`, and the one place a model gets its adapters when the
job builds the PeftModel itself (adapters kept in the compute dtype)."""

from __future__ import annotations

from peft import LoraConfig, PeftModel, TaskType, get_peft_model
from transformers import PreTrainedModel


def build_lora_config(r: int, alpha: int, dropout: float, target_modules: list[str], bias: str) -> LoraConfig:
    targets: str | list[str] = "all-linear" if list(target_modules) == ["all-linear"] else list(target_modules)
    return LoraConfig(
        r=r,
        lora_alpha=alpha,
        lora_dropout=dropout,
        target_modules=targets,
        bias=bias,
        task_type=TaskType.CAUSAL_LM,
    )


def build_peft_model(model: PreTrainedModel, lora: LoraConfig) -> PeftModel:
    """The model with adapters in its own dtype: PEFT otherwise keeps them in fp32 (`autocast_adapter_dtype`), which
    costs a cast of every adapter's input and output at every step."""
    return get_peft_model(model, lora, autocast_adapter_dtype=False)
