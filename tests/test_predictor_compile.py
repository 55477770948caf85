"""The memory predictor and the compile choice, on peaks measured on an H200 (Qwen3-1.7B shape, 512 tokens, GiB,
peak reserved + CUDA context): compiled layers keep fewer activations, so a compiled config's peak grows more slowly
with the micro-batch than the eager line the probes measure."""

from __future__ import annotations

import dataclasses

import pytest

from pipeline.measure.flops import Shape
from pipeline.records import GIB
from pipeline.search._calibration import knobs_of
from pipeline.search._formula import Knobs, per_token_bytes
from pipeline.search._predictor import Predictor

SHAPE = Shape(hidden=2048, intermediate=6144, layers=28, heads=16, kv_heads=8, head_dim=128, vocab=151936, tied=True)
# the knob study of 2026-11-30: eager (fp16 / bf16 take the same bytes), with and without checkpointing
EAGER = [
    (Knobs(1, 512, "fp16", True), 4.326),
    (Knobs(4, 512, "fp16", True), 4.771),
    (Knobs(1, 512, "fp16", False), 5.756),
    (Knobs(2, 512, "fp16", False), 7.379),
]


def _predictor() -> Predictor:
    predictor = Predictor(SHAPE, 16, ["all-linear"])
    predictor.calibrate([(k, peak * GIB) for k, peak in EAGER[:2]])
    predictor.measured = [(k, peak * GIB) for k, peak in EAGER]
    return predictor


def test_compiled_layers_keep_fewer_activations_only_without_checkpointing():
    eager, regional, whole = (Knobs(4, 512, "bf16", False, compile=c) for c in ("off", "regional", "whole"))
    assert per_token_bytes(SHAPE, regional) < per_token_bytes(SHAPE, whole) < per_token_bytes(SHAPE, eager)
    checkpointed = [Knobs(4, 512, "bf16", True, compile=c) for c in ("off", "regional", "whole")]
    assert len({per_token_bytes(SHAPE, k) for k in checkpointed}) == 1  # only the layers' inputs are kept


def test_a_compiled_config_is_predicted_from_the_eager_line_scaled():
    """Measured: whole-model compilation 5.38 GiB at 1x4 and 6.51 at 2x2 (bf16/fp16 without checkpointing), 4.97 at
    4x1 with checkpointing; regional at 4x1 without checkpointing 7.9 GiB reserved in plain TRL, 8.5 with the
    context. The eager line alone (10.6 GiB at 4x1) would be off by 20-30%; scaled, each is within 6%."""
    predictor = _predictor()
    cases = [
        (Knobs(1, 512, "bf16", False, compile="whole"), 5.38),
        (Knobs(2, 512, "fp16", False, compile="whole"), 6.51),
        (Knobs(4, 512, "fp16", True, compile="whole"), 4.97),
        (Knobs(4, 512, "bf16", False, compile="regional"), 7.9 + 0.6),
    ]
    for knobs, measured in cases:
        assert predictor.predict(knobs) / GIB == pytest.approx(measured, rel=0.06), knobs
    eager_at_4 = predictor.predict(Knobs(4, 512, "bf16", False)) / GIB
    assert eager_at_4 == pytest.approx(10.62, rel=0.01) and eager_at_4 > 1.2 * (7.9 + 0.6)


def test_measured_compiled_peaks_take_over_from_the_scaled_line():
    predictor = _predictor()
    whole = [
        (Knobs(1, 512, "bf16", False, compile="whole"), 5.38),
        (Knobs(2, 512, "fp16", False, compile="whole"), 6.51),
    ]
    predictor.measured += [(k, peak * GIB) for k, peak in whole]
    # its own line now: 5.38 + 3 x 1.13
    assert predictor.predict(Knobs(4, 512, "bf16", False, compile="whole")) / GIB == pytest.approx(8.77, rel=1e-3)
    # and regional, never measured, takes the nearest line of a compiled setting (whole's, its growth with what the
    # whole model's graph keeps beyond the layers' taken off), not eager's: within 6% of the 8.5 GiB plain TRL measured
    regional = predictor.predict(Knobs(4, 512, "bf16", False, compile="regional")) / GIB
    assert regional == pytest.approx(7.9 + 0.6, rel=0.06) and regional < 8.77


def test_knobs_of_a_config_carry_its_compile_choice(cfg, compose):
    compiled = compose("train.torch_compile=true", "++optimize.space={train.compile_mode:[default]}")
    knobs = knobs_of(compiled, ["batch.split", "train.torch_compile", "train.compile_mode"])
    assert knobs.compile == "regional"
    assert knobs.other == (("train.compile_mode", "default"),)  # the compile choice is the formula's, not a line's
    assert knobs_of(cfg, ["batch.split"]).compile == "off"


def test_a_loss_never_measured_adds_the_logits_it_keeps_to_the_nearest_line():
    """The H200 grid of the seed's setting: with checkpointing, TRL's loss measured at 1x1 and 4x1 (4.33, 4.77 GiB);
    the compiled loss at 4x1, never measured, is that line plus its fp32 logits (9.4 bytes a token and vocabulary
    entry, 2,048 tokens): 7.50 GiB, measured 7.43-7.49 there. The optimizer, with no memory term, is not what sets
    the nearest line apart."""
    predictor = _predictor()
    trl = [("train.loss", "trl"), ("train.optimizer", "adamw_torch_fused")]
    compiled = [("train.loss", "compiled"), ("train.optimizer", "adamw_torch")]
    predictor.measured = [(dataclasses.replace(k, other=tuple(trl)), peak * GIB) for k, peak in EAGER]
    found = predictor.predict(Knobs(4, 512, "fp16", True, tuple(compiled))) / GIB
    assert found == pytest.approx(4.771 + 9.4 * SHAPE.vocab * 4 * 512 / GIB, rel=1e-3)
    assert found == pytest.approx(7.46, rel=0.01)
