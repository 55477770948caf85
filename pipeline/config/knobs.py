"""The speed knobs checked up front, each against what the installed stack and the device can do: a knob that
cannot run is refused with one line before any model loads, not found out after minutes of compilation."""

from __future__ import annotations

import importlib.util

from omegaconf import DictConfig

from pipeline.config.choices import (
    CPU,
    AdapterDtype,
    Attention,
    CompileMode,
    Dtype,
    Loss,
    Optimizer,
    OptimizerStep,
    Padding,
)
from pipeline.config.devices import cuda_device_count
from pipeline.config.errors import ConfigError
from pipeline.records import CUDA_GRAPH_MODES, Compile

COMPILE_FORMS = "off, regional, whole (true is regional, false is off)"
PACKAGES = {  # the attention implementations that need a package beyond torch and transformers
    Attention.FLASH_ATTENTION_2: "flash_attn",
    Attention.FLASH_ATTENTION_3: "flash_attn_interface",
}


def on_cuda(gpu: DictConfig) -> bool:
    """Whether the job will run on a CUDA device."""
    return gpu.name != CPU and cuda_device_count() > 0


def compute_dtype(t: DictConfig, gpu: DictConfig) -> str | None:
    """The dtype the job will compute in, where it can be told before a device is opened (None: auto on an
    unknown card)."""
    if t.dtype != Dtype.AUTO:
        return t.dtype
    if not on_cuda(gpu):
        return Dtype.FP32
    return {True: Dtype.BF16, False: Dtype.FP16, None: None}[gpu.bf16]


def compile_choice(value: object) -> Compile:
    """What `train.torch_compile` compiles; a value that names no choice is refused with the accepted ones."""
    try:
        return Compile.of(value)
    except ValueError:
        raise ConfigError("train.torch_compile", f"got '{value}'; accepted: {COMPILE_FORMS}") from None


def check_compile(t: DictConfig, accumulation: int, cuda: bool) -> Compile:
    """The compile choice and its mode. CUDA graphs (reduce-overhead, max-autotune) need static shapes: one batch
    shape (padding to max_length, full micro-batches) and no accumulation (a replay would overwrite the gradients
    being accumulated, which live in the graph's memory); regional graphs also fail inside gradient checkpointing's
    recomputation (pytorch/pytorch#154306: the recorded layer sees its input freed, the replay does not)."""
    compiled = compile_choice(t.torch_compile)
    if compiled is Compile.OFF and t.compile_mode != CompileMode.DEFAULT:
        raise ConfigError(
            "train.compile_mode",
            f"{t.compile_mode} applies to compiled code and train.torch_compile is off; accepted with it: default "
            "(or train.torch_compile=regional or whole)",
        )
    if t.compile_mode not in CUDA_GRAPH_MODES:
        return compiled
    if not cuda:
        raise ConfigError(
            "train.compile_mode",
            f"{t.compile_mode} records CUDA graphs; accepted on the CPU: default, max-autotune-no-cudagraphs",
        )
    if accumulation > 1:
        raise ConfigError(
            "train.compile_mode",
            f"{t.compile_mode} with gradient accumulation replays over the accumulated "
            "gradients (CUDA graphs own their outputs); accepted: a split Mx1, or default, "
            "max-autotune-no-cudagraphs",
        )
    if t.padding != Padding.MAX_LENGTH:
        raise ConfigError(
            "train.compile_mode",
            f"{t.compile_mode} records one CUDA graph per batch shape; accepted with it: train.padding=max_length",
        )
    if compiled is Compile.REGIONAL and t.gradient_checkpointing:
        raise ConfigError(
            "train.compile_mode",
            f"{t.compile_mode} graphs of checkpointed layers fail when the layer is recomputed "
            "(pytorch/pytorch#154306); accepted with train.gradient_checkpointing=true and regional: default, "
            "max-autotune-no-cudagraphs",
        )
    return compiled


def check_knobs(t: DictConfig, gpu: DictConfig, model: DictConfig, accumulation: int) -> Compile:
    """Every speed knob; returns the compile choice."""
    cuda = on_cuda(gpu)
    if t.liger_kernel and importlib.util.find_spec("liger_kernel") is None:
        raise ConfigError(
            "train.liger_kernel", "true needs the liger-kernel package (pip install liger-kernel); accepted: false"
        )
    if t.liger_kernel and not cuda:
        raise ConfigError(
            "train.liger_kernel", f"Liger kernels need a CUDA device; accepted with gpu={gpu.name} here: false"
        )
    compiled = check_compile(t, accumulation, cuda)
    check_capture(t, cuda, compiled)
    if t.adapter_dtype == AdapterDtype.COMPUTE and compute_dtype(t, gpu) == Dtype.FP16:
        raise ConfigError(
            "train.adapter_dtype",
            "compute with fp16 cannot train: the gradient scaler of fp16 training refuses fp16 "
            "weights, and AdamW's epsilon is 0 in fp16; accepted with fp16: fp32 (or train.dtype=bf16)",
        )
    package = PACKAGES.get(model.attn_implementation)
    if package and importlib.util.find_spec(package) is None:
        installed = [a for a in Attention if a not in PACKAGES or importlib.util.find_spec(PACKAGES[a])]
        raise ConfigError(
            "model.attn_implementation",
            f"{model.attn_implementation} needs the {package} package, which is not "
            f"installed; accepted here: {', '.join(installed)}",
        )
    if model.attn_implementation.startswith("flash_attention") and not cuda:
        raise ConfigError("model.attn_implementation", f"{model.attn_implementation} needs a CUDA device")
    return compiled


COMPILED_OPTIMIZERS = (Optimizer.ADAMW_TORCH, Optimizer.SGD)  # torch.optim's own steps, which Dynamo traces


def check_capture(t: DictConfig, cuda: bool, compiled: Compile) -> None:
    """The LM head and loss (`train.loss`) and the optimizer step (`train.optimizer_step`) against the stack, the
    device and the other knobs."""
    if t.loss == Loss.LIGER and importlib.util.find_spec("liger_kernel") is None:
        raise ConfigError(
            "train.loss",
            "liger needs the liger-kernel package (pip install liger-kernel); accepted: trl, model, compiled",
        )
    if t.loss == Loss.LIGER and not cuda:
        raise ConfigError(
            "train.loss", "liger runs Triton kernels on a CUDA device; accepted on the CPU: trl, model, compiled"
        )
    if t.loss == Loss.COMPILED and compiled is Compile.WHOLE:
        raise ConfigError(
            "train.loss",
            "compiled is part of the model that train.torch_compile=whole compiles already; accepted with whole: trl, "
            "model, liger",
        )
    if t.optimizer_step == OptimizerStep.EAGER:
        return
    if t.optimizer not in COMPILED_OPTIMIZERS:
        fused = " (the fused step is one kernel already)" if t.optimizer == "adamw_torch_fused" else ""
        raise ConfigError(
            "train.optimizer_step",
            f"{t.optimizer_step} compiles torch.optim's own step, not {t.optimizer}'s{fused}; accepted with "
            f"train.optimizer={t.optimizer}: eager (or train.optimizer={' or '.join(COMPILED_OPTIMIZERS)})",
        )
    if t.optimizer_step == OptimizerStep.GRAPH and not cuda:
        raise ConfigError("train.optimizer_step", "graph records a CUDA graph; accepted on the CPU: eager, compiled")
