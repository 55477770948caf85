"""The one place a LoRA config becomes a `peft.LoraConfig`."""

from __future__ import annotations

from peft import LoraConfig, TaskType


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
