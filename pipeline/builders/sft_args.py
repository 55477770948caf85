"""The job's settings as `SFTConfig` keyword arguments: plain data, so the parent can print them without importing
TRL (the optimizer's answer gives them as a ready `SFTConfig(...)` call)."""

from __future__ import annotations

from pipeline import knobs
from pipeline.config.schema import TrainConfig


def sft_kwargs(
    micro: int,
    accumulation: int,
    train: TrainConfig,
    dtype: str,
    device: str,
    world_size: int = 1,
    timeout_s: float | None = None,
) -> dict:
    """Every SFTConfig argument the job sets, but where its files go: the run's own, then each speed knob's
    (`pipeline.knobs`). Several ranks (torchrun) add DDP's: every adapter weight takes part in every step, so DDP
    need not search the graph for unused ones (the Trainer would, without checkpointing), and the process group's
    timeout is the job's."""
    ddp = {}
    if world_size > 1:
        ddp = dict(ddp_find_unused_parameters=False)
        if timeout_s:  # else the Trainer's default, as builders.distributed's
            ddp["ddp_timeout"] = max(1, int(timeout_s))
    kwargs = ddp | dict(
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=accumulation,
        max_steps=train.steps,
        max_length=train.max_length,
        learning_rate=train.learning_rate,
        lr_scheduler_type=train.lr_scheduler,
        warmup_steps=train.warmup_steps,
        weight_decay=train.weight_decay,
        max_grad_norm=train.max_grad_norm,
        seed=train.seed,
        data_seed=train.seed,
        use_cpu=device == "cpu",
        logging_steps=1,
        logging_strategy="steps",
        save_strategy="no",
        report_to="none",
        disable_tqdm=not train.progress_bar,
        dataloader_num_workers=0,
        dataset_num_proc=None,
    )
    for knob in knobs.registry():
        kwargs.update(knob.sft_kwargs(train, dtype, device))
    return kwargs
