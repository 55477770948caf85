"""train.torch_compile: what torch.compile compiles. `regional` compiles each decoder layer on its own with
`layer.compile()` after the trainer is built (PyTorch's regional compilation recipe; accelerate's `compile_regions`
does the same): the layers share their code, so Dynamo traces one and every other reuses its graph, seconds of
compiling where the whole model takes minutes; what lies between the layers stays eager. `whole` is the Trainer's own
(`SFTConfig(torch_compile=True)`). `true` and `false` are regional and off."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pipeline.knobs.base import COMPILE_ALIASES, Compile, Knob, KnobRole, Memory
from pipeline.knobs.compile_mode import KNOB as MODE
from pipeline.knobs.compile_mode import CompileMode

if TYPE_CHECKING:
    import torch


# What compiled layers keep without checkpointing: Inductor recomputes the element-wise work in the backward instead
# of saving it, so a layer keeps what its matrix products and attention need: b (4h + 3q + 3k + 3i) a token against
# eager's b (6h + 4q + 4k + 4i) (`search._formula`; q and k the query and key-value widths), both counted exactly by
# `bench.saved_bytes` on six shapes (the Qwen3 0.6B, 1.7B and 4B ones, and three that move the MLP, the heads and the
# key-value heads apart) with the adapters in the compute dtype, 232 bytes a token left over (LoRA's rank-wide
# tensors). Compiled layers keep 0.73-0.74 of eager's on those shapes; on the device regional's growth per token over
# eager's measured 0.734 on the 0.6B shape (record-h100-1205b, max_length, 4x2 to 8x1, compute-dtype adapters) and
# 0.62-0.65 on the 1.7B shape with fp32 adapters (grid-h200-seed.json; counted: 0.676). The whole model's graph keeps
# more than the layers' own: 1.02 times (0.69 of eager's with fp32 adapters on the knob study of 2026-11-30, 1.7B
# shape, over the count's 0.676). Under checkpointing the layers keep only their inputs, which compiling does not
# change (whole, 4x1: 4.97 vs 4.77 GiB).
WHOLE_OVER_LAYERS = 1.02


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's outermost decoder layers (transformers' repeated blocks are `GradientCheckpointingLayer`s), in
    order; a wrapper (PeftModel) is looked through."""
    from transformers.modeling_layers import GradientCheckpointingLayer

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


def layer_bytes(element: int, hidden: int, queries: int, kv: int, intermediate: int) -> float:
    """What a compiled layer keeps per token (`search._formula`, against eager's b (6h + 4q + 4k + 4i)): its matrix
    products' and attention's inputs in the compute dtype (`element` bytes)."""
    return element * (4 * hidden + 3 * queries + 3 * kv + 3 * intermediate)


class TorchCompileKnob(Knob):
    key = "train.torch_compile"
    default = Compile.OFF
    help = "regional: each decoder layer; whole: the model (true: regional, false: off)"
    aliases = COMPILE_ALIASES
    short = "compile"
    searched = (Compile.OFF, Compile.REGIONAL)  # whole compiles for minutes per config, to regional's speed
    screen = 10  # compiled layers early (after the padding): the best of every recorded grid has them, and a knob
    # that pays only beside them (a compiled loss) or differs beside them (flex attention) is screened beside them
    role = KnobRole.COMPILE
    term_text = (
        "compiled layers keep what their products and attention need, b (4h + 3q + 3k + 3i) a token and layer "
        "against eager's b (6h + 4q + 4k + 4i); the whole model's graph 1.02 times that",
        "nothing under checkpointing",
    )
    card = (4, "compile {}")

    layer_bytes = staticmethod(layer_bytes)

    def canonical(self, value: Any) -> str:
        return Compile.of(value).value

    def memory(self, value: str) -> Memory:
        choice = Compile(value)
        if choice is Compile.OFF:
            return Memory()
        return Memory(fused=True, activations=WHOLE_OVER_LAYERS if choice is Compile.WHOLE else 1.0)

    def sft_kwargs(self, train: Any, dtype: str, device: str) -> dict[str, Any]:
        return {"torch_compile": Compile.of(train.torch_compile) is Compile.WHOLE}

    def compiles(self, train: Any) -> bool:
        return Compile.of(train.torch_compile) is not Compile.OFF

    def trainer(self, trainer: Any, train: Any) -> str | None:
        choice = Compile.of(train.torch_compile)
        if choice is Compile.REGIONAL:
            return f"regional ({compile_layers(trainer.model, train.compile_mode)} layers)"
        return None if choice is Compile.OFF else choice.value  # whole: the Trainer compiles it

    def helpers(self, train: Any) -> list[str]:
        if Compile.of(train.torch_compile) is not Compile.REGIONAL:
            return []
        return [MODE.source("CompileMode"), self.source("decoder_layers", "compile_layers")]

    def trainer_lines(self, train: Any) -> list[str]:
        if Compile.of(train.torch_compile) is not Compile.REGIONAL:
            return []
        return [f"    compile_layers(trainer.model, {train.compile_mode!r})  # regional: each decoder layer"]


KNOB = TorchCompileKnob()
