"""The speed knobs checked up front, each against what the installed stack and the device can do: a knob that
cannot run is refused with one line before any model loads, not found out after minutes of compilation."""

from __future__ import annotations

import importlib.util

from omegaconf import DictConfig

from pipeline.config.devices import cuda_device_count
from pipeline.config.errors import ConfigError, choice
from pipeline.records import CUDA_GRAPH_MODES, Compile

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune")
COMPILE_FORMS = "off, regional, whole (true is regional, false is off)"
ADAPTER_DTYPES = ("fp32", "compute")
ATTENTION = {  # implementation -> the package it needs (None: built into torch and transformers)
    "eager": None,
    "sdpa": None,
    "flex_attention": None,
    "flash_attention_2": "flash_attn",
    "flash_attention_3": "flash_attn_interface",
}


def on_cuda(gpu: DictConfig) -> bool:
    """Whether the job will run on a CUDA device."""
    return gpu.name != "cpu" and cuda_device_count() > 0


def compute_dtype(t: DictConfig, gpu: DictConfig) -> str | None:
    """The dtype the job will compute in, where it can be told before a device is opened (None: auto on an
    unknown card)."""
    if t.dtype != "auto":
        return t.dtype
    if not on_cuda(gpu):
        return "fp32"
    return {True: "bf16", False: "fp16", None: None}[gpu.bf16]


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
    choice("train.compile_mode", t.compile_mode, COMPILE_MODES)
    if compiled is Compile.OFF and t.compile_mode != "default":
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
    if t.padding != "max_length":
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
    choice("train.adapter_dtype", t.adapter_dtype, ADAPTER_DTYPES)
    if t.adapter_dtype == "compute" and compute_dtype(t, gpu) == "fp16":
        raise ConfigError(
            "train.adapter_dtype",
            "compute with fp16 cannot train: the gradient scaler of fp16 training refuses fp16 "
            "weights, and AdamW's epsilon is 0 in fp16; accepted with fp16: fp32 (or train.dtype=bf16)",
        )
    choice("model.attn_implementation", model.attn_implementation, tuple(ATTENTION))
    package = ATTENTION[model.attn_implementation]
    if package and importlib.util.find_spec(package) is None:
        installed = [name for name, needs in ATTENTION.items() if needs is None or importlib.util.find_spec(needs)]
        raise ConfigError(
            "model.attn_implementation",
            f"{model.attn_implementation} needs the {package} package, which is not "
            f"installed; accepted here: {', '.join(installed)}",
        )
    if model.attn_implementation.startswith("flash_attention") and not cuda:
        raise ConfigError("model.attn_implementation", f"{model.attn_implementation} needs a CUDA device")
    return compiled


LOSSES = ("trl", "model", "compiled", "liger")  # what pipeline.builders.step sets on the trainer
OPTIMIZER_STEPS = ("eager", "compiled", "graph")
COMPILED_OPTIMIZERS = ("adamw_torch", "sgd")  # torch.optim's own steps, which Dynamo traces


def check_capture(t: DictConfig, cuda: bool, compiled: Compile) -> None:
    """The LM head and loss (`train.loss`) and the optimizer step (`train.optimizer_step`) against the stack, the
    device and the other knobs."""
    choice("train.loss", t.loss, LOSSES)
    if t.loss == "liger" and importlib.util.find_spec("liger_kernel") is None:
        raise ConfigError(
            "train.loss",
            "liger needs the liger-kernel package (pip install liger-kernel); accepted: trl, model, compiled",
        )
    if t.loss == "liger" and not cuda:
        raise ConfigError(
            "train.loss", "liger runs Triton kernels on a CUDA device; accepted on the CPU: trl, model, compiled"
        )
    if t.loss == "compiled" and compiled is Compile.WHOLE:
        raise ConfigError(
            "train.loss",
            "compiled is part of the model that train.torch_compile=whole compiles already; accepted with whole: trl, "
            "model, liger",
        )
    choice("train.optimizer_step", t.optimizer_step, OPTIMIZER_STEPS)
    if t.optimizer_step == "eager":
        return
    if t.optimizer not in COMPILED_OPTIMIZERS:
        fused = " (the fused step is one kernel already)" if t.optimizer == "adamw_torch_fused" else ""
        raise ConfigError(
            "train.optimizer_step",
            f"{t.optimizer_step} compiles torch.optim's own step, not {t.optimizer}'s{fused}; accepted with "
            f"train.optimizer={t.optimizer}: eager (or train.optimizer={' or '.join(COMPILED_OPTIMIZERS)})",
        )
    if t.optimizer_step == "graph" and not cuda:
        raise ConfigError("train.optimizer_step", "graph records a CUDA graph; accepted on the CPU: eager, compiled")
