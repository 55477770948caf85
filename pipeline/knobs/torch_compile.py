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
# of saving it, so a layer keeps what its matrix products and attention need (`search._formula`: b (6q + 2i) + 8h a
# token, against eager's b (6h + 4q + 4i) + 8h; a form chosen to match both shapes measured: 0.615 of eager's on the
# Qwen3-1.7B shape, where regional's slope over eager's measured 0.62-0.65 (bench/results/grid-h200-seed.json, 512
# tokens), 0.73 on the Qwen3-0.6B shape, where it measured 0.78 (record-h200/grid-chats-optuna.db, max_length, 1,024
# tokens)). The whole model's graph keeps more than the layers' own: 1.12 against 1.62 GiB a sequence on the 1.7B shape
# (0.69 of eager's: the knob study of 2026-11-30), 1.12 times regional's. Under checkpointing the layers keep only
# their inputs, which compiling does not change (whole, 4x1: 4.97 vs 4.77 GiB).
WHOLE_OVER_LAYERS = 1.12


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


def layer_bytes(element: int, hidden: int, queries: int, intermediate: int) -> float:
    """What a compiled layer keeps per token (`search._formula`, against eager's b (6h + 4q + 4i) + 8h): its matrix
    products' and attention's inputs in the compute dtype (`element` bytes), its fp32 norms."""
    return element * (6 * queries + 2 * intermediate) + 8 * hidden


class TorchCompileKnob(Knob):
    key = "train.torch_compile"
    default = Compile.OFF
    help = "regional: each decoder layer; whole: the model (true: regional, false: off)"
    aliases = COMPILE_ALIASES
    short = "compile"
    searched = (Compile.OFF, Compile.REGIONAL)  # whole compiles for minutes per config, to regional's speed
    role = KnobRole.COMPILE
    term_text = (
        "compiled layers keep what their products and attention need, b (6q + 2i) + 8h a token and layer against "
        "eager's b (6h + 4q + 4i) + 8h; the whole model's graph 1.12 times that",
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
