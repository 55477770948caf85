"""The one place the job's settings become an `SFTConfig` and an `SFTTrainer`."""

from __future__ import annotations

from transformers import PrinterCallback, TrainerCallback
from trl import SFTConfig, SFTTrainer

from pipeline.build.sft_args import sft_kwargs


def build_sft_config(
    output_dir: str,
    micro: int,
    accumulation: int,
    train: dict,
    dtype: str,
    device: str,
) -> SFTConfig:
    """Everything TRL needs to reproduce the job, as SFTConfig keyword arguments the report also prints."""
    return SFTConfig(**sft_kwargs(output_dir, micro, accumulation, train, dtype, device))


def build_trainer(model, tokenizer, dataset, sft_config: SFTConfig, peft_config, callbacks: list[TrainerCallback]):
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
