"""The memory predictor's layer counts against what a decoder layer keeps for its backward, counted on the CPU
(`bench.saved_bytes`) on a shape the counts were not fitted on: eager and compiled layers, adapters in the compute
dtype and in fp32."""

from __future__ import annotations

import pytest

from bench.saved_bytes import LayerShape, layer_token_bytes
from pipeline.measure.flops import Shape
from pipeline.search._formula import LOSS_BYTES_PER_TOKEN, Knobs, activation_token_bytes

ODD = LayerShape(hidden=768, intermediate=2816, heads=12, kv_heads=4, head_dim=64)  # no Qwen3 shape


def formula_layer_bytes(adapters: str, compile: str) -> float:
    shape = Shape(ODD.hidden, ODD.intermediate, 1, ODD.heads, ODD.kv_heads, ODD.head_dim, 1024, True)
    knobs = Knobs(1, 256, "bf16", False, (("train.adapter_dtype", adapters),), compile)
    return activation_token_bytes(shape, knobs) - LOSS_BYTES_PER_TOKEN  # one layer's


@pytest.mark.parametrize("adapters", ["compute", "fp32"])
def test_the_formulas_eager_layer_is_what_an_eager_layer_keeps(adapters):
    counted = layer_token_bytes(ODD, adapters, compiled=False)
    assert formula_layer_bytes(adapters, "off") == pytest.approx(counted, rel=0.03)


@pytest.mark.slow
@pytest.mark.parametrize("adapters", ["compute", "fp32"])
def test_the_formulas_compiled_layer_is_what_a_compiled_layer_keeps(adapters):
    counted = layer_token_bytes(ODD, adapters, compiled=True)
    assert formula_layer_bytes(adapters, "regional") == pytest.approx(counted, rel=0.03)
