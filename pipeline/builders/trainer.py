"""The one place the job's settings become an `SFTConfig`, and the one place an `SFTTrainer` is built."""

from __future__ import annotations

from datasets import Dataset
from peft import LoraConfig
from transformers import PreTrainedModel, PreTrainedTokenizerBase, PrinterCallback, TrainerCallback
from trl import SFTConfig, SFTTrainer


def build_sft_config(output_dir: str, kwargs: dict) -> SFTConfig:
    """`kwargs` from `builders.sft_args.sft_kwargs`: the same arguments the answer of a study prints."""
    return SFTConfig(output_dir=output_dir, **kwargs)


def build_trainer(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    dataset: Dataset,
    output_dir: str,
    sft_kwargs: dict,
    peft_config: LoraConfig | None,
    callbacks: list[TrainerCallback],
) -> SFTTrainer:
    """`peft_config` None: `model` is a PeftModel already (built by a speed knob: `Knob.adapters`)."""
    sft_config = build_sft_config(output_dir, sft_kwargs)
    trainer = SFTTrainer(
        model=model,
        args=sft_config,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=callbacks,
    )
    if sft_config.disable_tqdm:
        trainer.remove_callback(PrinterCallback)  # quiet means quiet: no per-step log dicts either
    return trainer
