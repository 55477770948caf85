"""Regional compilation: each decoder layer compiled on its own with `layer.compile()`, after the trainer is built
(PyTorch's regional compilation recipe; accelerate's `compile_regions` does the same). The layers share their code,
so Dynamo traces one layer and every other reuses its graph: seconds of compiling where the whole model takes
minutes. Everything between the layers (embedding, final norm, LM head and loss) stays eager."""

from __future__ import annotations

import torch
from transformers.modeling_layers import GradientCheckpointingLayer

from pipeline.config.choices import CompileMode


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's outermost decoder layers (transformers' repeated blocks are `GradientCheckpointingLayer`s), in
    order; a wrapper (PeftModel) is looked through."""
    layers: list[torch.nn.Module] = []
    names: list[str] = []
    for name, module in model.named_modules():
        if isinstance(module, GradientCheckpointingLayer) and not any(name.startswith(f"{n}.") for n in names):
            layers.append(module)
            names.append(name)
    return layers


def compile_layers(model: torch.nn.Module, mode: str) -> int:
    """Compile every decoder layer of `model` in place (lazily: the first forward compiles); `mode` is torch.compile's
    (`default` is its own). Returns how many layers were set to compile."""
    layers = decoder_layers(model)
    if not layers:
        raise ValueError(f"{type(model).__name__} has no decoder layers to compile; use train.torch_compile=whole")
    for layer in layers:
        layer.compile(mode=None if mode == CompileMode.DEFAULT else mode)
    return len(layers)
