"""What a job captures of the step beyond the decoder layers: the LM head and loss (`train.loss`) and the optimizer
step (`train.optimizer_step`), set on the built trainer.

TRL 1.16's own loss (`trl`) runs its fused LM head (log-probabilities in tiles, only at positions with a label) and
logs two metrics per micro-batch, entropy and token accuracy; on CUDA they read the device back seven times per
micro-batch (two boolean-mask indexes, `num_valid > 0` twice, three `.item()`), and each read stops the host until
the GPU has caught up, so on a launch-bound step the GPU then idles while the host launches what follows. `model` is
the model's own LM head and cross-entropy (`model.loss_function`), which reads nothing back; `compiled` is the same
with the cross-entropy compiled (the upcast to fp32 and the log-softmax fused, forward and backward); `liger` is
Liger's fused linear cross-entropy (the LM head and the loss in chunks, never the whole logits; one read per
micro-batch). With any of the three the job also drops the Trainer's NaN filter of the logged loss
(`logging_nan_inf_filter`, two more reads per micro-batch: a NaN loss is logged as NaN instead of being replaced).
None of the three logs entropy or token accuracy.

The optimizer step `compiled` is `torch.compile` of `optimizer.step` (Inductor fuses the update of every adapter
weight into a few kernels); `graph` records it as a CUDA graph (mode reduce-overhead). Dynamo makes AdamW
capturable on CUDA (its step count on the device). The learning rate becomes a 0-dim CPU tensor, so the scheduler's
new value each step is no recompilation; and a step at learning rate 0 (the first of a linear warm-up) runs at 1e-30
instead: capturable AdamW divides by the learning rate, and 0 turns weights with zero gradients (LoRA's A, while B is
still zero) into NaN (pytorch/pytorch#126514); at 1e-30 such a step changes no weight by more than about 1e-30.

The functions here import nothing from the rest of the package: an exported script (`builders.script`) carries their
source as it is, so a user's script does exactly what the job did.
"""

from __future__ import annotations

import types

import torch

from pipeline.config.choices import Loss


def model_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
    """`SFTTrainer.compute_loss` without TRL's LM head and metrics: the model's own loss over the labels, normalised by
    the step's label count as TRL's is (so the losses agree), scaled for DDP's gradient average as TRL's is."""
    inputs = {**inputs, "use_cache": False}
    if num_items_in_batch is not None:
        inputs["num_items_in_batch"] = num_items_in_batch
    outputs = model(**inputs)
    loss = outputs.loss
    if self.args.average_tokens_across_devices and num_items_in_batch is not None:
        loss = loss * self.accelerator.num_processes
    return (loss, outputs) if return_outputs else loss


def capture_loss(trainer, mode: str) -> None:
    """Set the LM head and loss `mode` (one of trl, model, compiled, liger) on a built SFTTrainer."""
    if mode == Loss.TRL:
        return
    trainer.compute_loss = types.MethodType(model_loss, trainer)
    base = trainer.model.get_base_model() if hasattr(trainer.model, "get_base_model") else trainer.model
    if mode == Loss.COMPILED:
        base.loss_function = torch.compile(base.loss_function)
    elif mode == Loss.LIGER:
        from liger_kernel.transformers.monkey_patch import _apply_liger_kernel_to_instance

        # the fused linear cross-entropy alone (the layer kernels are train.liger_kernel's); it replaces the forward
        # TRL patched in for its own fused head
        _apply_liger_kernel_to_instance(
            model=base, fused_linear_cross_entropy=True, cross_entropy=False, rope=False, rms_norm=False, swiglu=False
        )


def compile_optimizer_step(trainer, mode: str) -> None:
    """Compile the optimizer step of a built trainer (`mode`: eager, compiled, or graph: a CUDA graph). The optimizer
    is made here, before training (the Trainer keeps one it already has)."""
    if mode == "eager":
        return
    optimizer = trainer.create_optimizer()
    for group in optimizer.param_groups:
        group["lr"] = torch.tensor(float(group["lr"]))  # a new value each step is no recompilation
        if any(p.is_cuda for p in group["params"]):
            group["capturable"] = True  # what Dynamo sets on CUDA; also for a step it would leave eager
    step = torch.compile(optimizer.step, mode="reduce-overhead" if mode == "graph" else None)

    def compiled_step(*args, **kwargs):
        idle = [group["lr"] for group in optimizer.param_groups if group["lr"] == 0]
        for lr in idle:
            lr.fill_(1e-30)  # capturable AdamW divides by the learning rate (pytorch/pytorch#126514)
        try:
            return step(*args, **kwargs)
        finally:
            for lr in idle:
                lr.fill_(0.0)

    optimizer.step = compiled_step


def capture_step(trainer, loss: str, optimizer_step: str) -> None:
    """Both knobs on a built trainer."""
    capture_loss(trainer, loss)
    compile_optimizer_step(trainer, optimizer_step)
