"""The one place the job's settings become an `SFTConfig` and an `SFTTrainer`."""

from __future__ import annotations

from transformers import PrinterCallback, TrainerCallback
from trl import SFTConfig, SFTTrainer


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


def sft_kwargs(output_dir: str, micro: int, accumulation: int, train: dict, dtype: str, device: str) -> dict:
    padding = train["padding"]
    return dict(
        output_dir=output_dir,
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=accumulation,
        max_steps=train["steps"],
        max_length=train["max_length"],
        learning_rate=train["learning_rate"],
        lr_scheduler_type=train["lr_scheduler"],
        warmup_steps=train["warmup_steps"],
        weight_decay=train["weight_decay"],
        max_grad_norm=train["max_grad_norm"],
        optim=train["optimizer"],
        seed=train["seed"],
        data_seed=train["seed"],
        bf16=dtype == "bf16",
        fp16=dtype == "fp16",
        use_cpu=device == "cpu",
        gradient_checkpointing=train["gradient_checkpointing"],
        gradient_checkpointing_kwargs={"use_reentrant": False} if train["gradient_checkpointing"] else None,
        padding_free=padding == "padding_free",
        packing=padding == "packing",
        pad_to_multiple_of=train["max_length"] if padding == "max_length" else None,
        logging_steps=1,
        logging_strategy="steps",
        save_strategy="no",
        report_to="none",
        disable_tqdm=not train["progress_bar"],
        dataloader_num_workers=0,
        dataset_num_proc=None,
    )


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
