"""train.compile_mode: torch.compile's mode for what `train.torch_compile` compiles. reduce-overhead and max-autotune
record CUDA graphs, which replay a step's kernels in one launch but need one batch shape and no accumulation."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from pipeline.knobs.base import CUDA_GRAPH_MODE_VALUES, Compile, Knob, Memory, Setting
from pipeline.knobs.padding import Padding


class CompileMode(StrEnum):
    DEFAULT = "default"
    REDUCE_OVERHEAD = "reduce-overhead"
    MAX_AUTOTUNE_NO_CUDAGRAPHS = "max-autotune-no-cudagraphs"
    MAX_AUTOTUNE = "max-autotune"


CUDA_GRAPH_MODES = tuple(CompileMode(v) for v in CUDA_GRAPH_MODE_VALUES)  # the modes that record CUDA graphs
# What CUDA graphs of compiled layers keep per token: a copy of each layer's input in the graph's static buffer (the
# compute dtype's bytes x hidden size x layers; the graphs' pool holds their outputs, which the activations count).
# Measured against the same layers without graphs at 4x1 on the Qwen3-1.7B shape, 512 tokens (112 KiB a token, the
# formula's 112: bench/results/grid-h200-seed.json, regional, 8.43 -> 8.65 GiB) and at 8x1 on Qwen3-0.6B, 1,024
# tokens (72 KiB, the formula's 56: bench/results/h200-2026-12-01b/call3, 12.92 -> 13.49 GiB).
GRAPH_INPUT_COPIES = 1.0


def graphs_of_compiled_layers(setting: Mapping[str, Any]) -> bool:
    """Whether `setting` (knob values by key) runs compiled code under CUDA graphs."""
    compiled = Compile.of(str(setting.get("train.torch_compile", "off"))) is not Compile.OFF
    return compiled and str(setting.get("train.compile_mode", CompileMode.DEFAULT)) in CUDA_GRAPH_MODES


class CompileModeKnob(Knob):
    key = "train.compile_mode"
    default = CompileMode.DEFAULT
    help = "CUDA graphs: reduce-overhead, max-autotune"
    short = "mode"
    searched = (CompileMode.DEFAULT, CompileMode.REDUCE_OVERHEAD)  # max-autotune tunes for minutes per shape
    screen = 11  # right after compiled layers (`torch_compile`'s comment), so they are screened in the default mode
    # first, one key moved: on the chats, CUDA graphs screened first moved both keys, recorded graphs for each new
    # bucket's shape, were pruned, and held compiled layers' value, so the default mode was never tried
    term_text = ("CUDA graphs keep a copy of each layer's input: b h a token and layer", "compiled layers only")

    def memory_in(self, value: str, setting: Mapping[str, Any]) -> Memory:
        graphed = graphs_of_compiled_layers({**setting, self.key: value})
        return Memory(inputs=GRAPH_INPUT_COPIES) if graphed else Memory()

    def refuses(self, s: Setting) -> str | None:
        """CUDA graphs need a few static shapes: micro-batches padded to a length bucket or to max_length (padding to
        the longest is bucketed under them), full micro-batches, and no accumulation (a replay would overwrite the gradients being accumulated, which live in the graph's memory);
        regional graphs also fail inside gradient checkpointing's recomputation (pytorch/pytorch#154306: the
        recorded layer sees its input freed, the replay does not)."""
        t, mode = s.train, s.train.compile_mode
        compiled = Compile.of(t.torch_compile)
        if compiled is Compile.OFF and mode != CompileMode.DEFAULT:
            return (
                f"{mode} applies to compiled code and train.torch_compile is off; accepted with it: default "
                "(or train.torch_compile=regional or whole)"
            )
        if mode not in CUDA_GRAPH_MODES:
            return None
        if not s.cuda:
            return f"{mode} records CUDA graphs; accepted on the CPU: default, max-autotune-no-cudagraphs"
        if s.accumulation > 1:
            return (
                f"{mode} with gradient accumulation replays over the accumulated gradients (CUDA graphs own their "
                "outputs); accepted: a split Mx1, or default, max-autotune-no-cudagraphs"
            )
        if t.padding in (Padding.PADDING_FREE, Padding.PACKING):
            return (
                f"{mode} records one CUDA graph per batch shape, and a padding-free row has as many as it has token "
                "counts; accepted with it: train.padding=longest or buckets (padded to a quarter of max_length: four "
                "shapes), or max_length"
            )
        if compiled is Compile.REGIONAL and t.gradient_checkpointing:
            return (
                f"{mode} graphs of checkpointed layers fail when the layer is recomputed (pytorch/pytorch#154306); "
                "accepted with train.gradient_checkpointing=true and regional: default, max-autotune-no-cudagraphs"
            )
        return None

    def sft_kwargs(self, train: Any, dtype: str, device: str) -> dict[str, Any]:
        mode = train.compile_mode
        whole = Compile.of(train.torch_compile) is Compile.WHOLE
        return {
            "torch_compile_mode": mode if whole and mode != CompileMode.DEFAULT else None,
            "dataloader_drop_last": mode in CUDA_GRAPH_MODES,  # CUDA graphs: every micro-batch full, one shape
        }


KNOB = CompileModeKnob()
