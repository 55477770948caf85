"""The job's settings as `SFTConfig` keyword arguments: plain data, so the parent can print them without importing
TRL (the optimizer's answer gives them as a ready `SFTConfig(...)` call)."""

from __future__ import annotations

from pipeline.config.choices import CompileMode, Loss, Padding
from pipeline.config.schema import TrainConfig
from pipeline.records import CUDA_GRAPH_MODES, Compile


def sft_kwargs(
    micro: int,
    accumulation: int,
    train: TrainConfig,
    dtype: str,
    device: str,
    world_size: int = 1,
    timeout_s: float | None = None,
) -> dict:
    """Every SFTConfig argument the job sets, but where its files go. The Trainer compiles only the whole model
    (`torch_compile`); regional compilation is done on the built trainer's layers (`builders.compile`). Several
    ranks (torchrun) add DDP's: every adapter weight takes part in every step, so DDP need not search the graph for
    unused ones (the Trainer would, without checkpointing), and the process group's timeout is the job's."""
    padding = train.padding
    whole = Compile.of(train.torch_compile) is Compile.WHOLE
    mode = train.compile_mode
    ddp = {}
    if world_size > 1:
        ddp = dict(ddp_find_unused_parameters=False)
        if timeout_s:  # else the Trainer's default, as builders.distributed's
            ddp["ddp_timeout"] = max(1, int(timeout_s))
    return ddp | dict(
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=accumulation,
        max_steps=train.steps,
        # padding-free without packing: TRL enforces no max_length itself and refuses one, so the job's data comes
        # truncated already (`builders.dataset.truncated`)
        max_length=None if padding == Padding.PADDING_FREE else train.max_length,
        learning_rate=train.learning_rate,
        lr_scheduler_type=train.lr_scheduler,
        warmup_steps=train.warmup_steps,
        weight_decay=train.weight_decay,
        max_grad_norm=train.max_grad_norm,
        optim=train.optimizer,
        seed=train.seed,
        data_seed=train.seed,
        bf16=dtype == "bf16",
        fp16=dtype == "fp16",
        use_cpu=device == "cpu",
        gradient_checkpointing=train.gradient_checkpointing,
        gradient_checkpointing_kwargs={"use_reentrant": False} if train.gradient_checkpointing else None,
        padding_free=padding == Padding.PADDING_FREE,
        packing=padding == Padding.PACKING,
        pad_to_multiple_of=train.max_length if padding == Padding.MAX_LENGTH else None,
        use_liger_kernel=train.liger_kernel,
        torch_compile=whole,
        torch_compile_mode=mode if whole and mode != CompileMode.DEFAULT else None,
        logging_steps=1,
        logging_strategy="steps",
        logging_nan_inf_filter=train.loss == Loss.TRL,  # two reads of the device per micro-batch (builders.step)
        save_strategy="no",
        report_to="none",
        disable_tqdm=not train.progress_bar,
        dataloader_num_workers=0,
        dataloader_drop_last=mode in CUDA_GRAPH_MODES,  # CUDA graphs: every micro-batch full, one shape
        dataset_num_proc=None,
    )
