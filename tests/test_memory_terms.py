"""The memory predictor's terms where one knob's memory depends on another's value, each on peaks the recorded H200
stores measured (GiB, peak reserved + CUDA context; bench/results/, BENCHMARKS.md): the Qwen3-1.7B shape at 512 tokens
(the seed's setting: fastest-h200-fixed/optuna.db, grid-h200-seed.json) and Qwen3-0.6B on chats of up to 1,024 tokens
(record-h200/grid-chats-optuna.db)."""

from __future__ import annotations

import pytest

from pipeline import knobs as registry
from pipeline.measure.flops import Shape
from pipeline.records import GIB, MicroBatch
from pipeline.search._formula import Knobs, activation_token_bytes, memory_term
from pipeline.search._predictor import Predictor

QWEN3_1_7B = Shape(2048, 6144, 28, 16, 8, 128, 151936, True)
QWEN3_0_6B = Shape(1024, 3072, 28, 16, 8, 128, 151936, True)
# fastest-h200-fixed's probes: the seed's setting (fp16, adapters in fp32, TRL's loss) with and without checkpointing
PROBES = [(1, True, 4.326), (4, True, 4.771), (1, False, 5.727), (4, False, 10.676)]
LOGITS = QWEN3_1_7B.vocab * 2048 / GIB  # GiB per byte a token and vocabulary entry, 4 x 512 tokens


def seed(micro: int = 4, compile: str = "regional", attention: str = "sdpa", held=(), **values: str) -> Knobs:
    """A config of the seed's setting, its searched values (`train.` keys) as the study keeps them."""
    other = tuple(sorted((f"train.{k}", v) for k, v in values.items()))
    return Knobs(micro, 512, "bf16", False, other, compile, attention, held=held)


def seed_predictor(held=()) -> Predictor:
    """Calibrated on the checkpointed probes, as the study is; every probe measured."""
    predictor = Predictor(QWEN3_1_7B, 16, ["all-linear"])
    knobs = [
        (Knobs(m, 512, "fp16", c, tuple(sorted({"train.adapter_dtype": "fp32"}.items())), held=held), peak * GIB)
        for m, c, peak in PROBES
    ]
    predictor.calibrate(knobs[:2])
    predictor.measured = list(knobs)
    return predictor


def test_liger_kernels_save_on_eager_layers_only():
    """Compiled layers replace Liger's kernels with Inductor's: with regional compilation and CUDA graphs, 4x1
    measured 8.43 GiB with Liger and 8.27 without (seeds 1 and 3), where the eager share would say 7.45."""
    predictor = seed_predictor()
    graphs = {"adapter_dtype": "compute", "compile_mode": "reduce-overhead", "loss": "trl"}
    predictor.measured.append((seed(liger_kernel="False", **graphs), 8.266 * GIB))
    assert predictor.predict(seed(liger_kernel="True", **graphs)) / GIB == pytest.approx(8.428, rel=0.02)
    compute = {"adapter_dtype": "compute"}  # the formula's own count: Liger's term alone
    assert memory_term(seed(liger_kernel="True", compile="off", **compute)).unkept == (1.8, 1.8)
    assert memory_term(seed(liger_kernel="True", **compute)).unkept == (0.0, 0.0)


@pytest.mark.parametrize(("shape", "kept"), [(QWEN3_1_7B, 0.70), (QWEN3_0_6B, 0.76)])
def test_liger_kernels_save_the_norms_and_swiglu_intermediates_whatever_the_models_shape(shape, kept):
    """What eager layers keep with Liger's kernels, against without: 0.70 on the Qwen3-1.7B shape, as its studies
    measured (9.11 against 10.68 GiB at 4x1), and 0.76 on Qwen3-0.6B's, whose norms and MLP are a smaller part of a
    layer. A fixed share of 0.70 there read the chats' peak with Liger 7.5-7.6% low in three H100 studies (15.52 and
    15.57 GiB measured, 14.34 and 14.40 predicted; with this term 15.29 and 15.33: BENCHMARKS.md)."""
    compute = {"adapter_dtype": "compute"}

    def layers(liger: str) -> float:
        return activation_token_bytes(shape, seed(liger_kernel=liger, compile="off", **compute)) - 8  # loss buffers

    assert layers("True") / layers("False") == pytest.approx(kept, abs=0.003)


def test_a_loss_the_command_line_holds_keeps_its_logits_beside_liger_kernels():
    """A study that searches Liger's kernels with `train.loss=model` on its command line: the loss is no searched key,
    but its logits count (TRL applies Liger's layer kernels only), and Liger's share takes nothing off them. Eager,
    adapters in bf16, 4x1: TRL's loss 9.60 GiB without Liger and 8.04 with it (seed 2); the model's loss keeps 17.4
    bytes a token and vocabulary entry (an eager 4x1 ran out of memory at 13.38 GiB asking for 1.16 more)."""
    model = (("train.loss", "model"),)
    predictor = seed_predictor(held=model)
    with_logits = [(k, peak + 17.4 * LOGITS * GIB * k.micro / 4) for k, peak in predictor.measured]
    predictor.measured = with_logits + [
        (seed(compile="off", held=model, adapter_dtype="compute", liger_kernel="False"), (9.602 + 17.4 * LOGITS) * GIB)
    ]
    liger = seed(compile="off", held=model, adapter_dtype="compute", liger_kernel="True")
    assert memory_term(liger).logit_bytes == 17.4
    assert predictor.predict(liger) / GIB == pytest.approx(8.035 + 17.4 * LOGITS, rel=0.03)  # 13.08
    assert predictor.predict(liger) / GIB > 13.0  # over a 13 GiB cap, where the 9.60 GiB of TRL's loss fits


def test_cuda_graphs_keep_a_copy_of_each_layers_input_beside_compiled_layers_only():
    """Regional compilation at 4x1 on the 1.7B shape: 8.43 GiB, 8.65 with CUDA graphs (grid-h200-seed.json); on the
    0.6B shape at 8x1 and 1,024 tokens, 12.92 and 13.49 (h200-2026-12-01b). The graphs' copies: 2 bytes x hidden x
    layers a token (112 KiB on the 1.7B shape, 56 on the 0.6B)."""
    predictor = seed_predictor()
    default = {"compile_mode": "default", "loss": "trl", "optimizer": "adamw_torch"}
    predictor.measured += [(seed(1, **default), 5.225 * GIB), (seed(4, **default), 8.426 * GIB)]
    graphs = {**default, "compile_mode": "reduce-overhead"}
    assert predictor.predict(seed(4, **graphs)) / GIB == pytest.approx(8.645, rel=0.01)
    assert memory_term(seed(compile="off", **graphs)).inputs == 0  # nothing compiled: no graphs of layers

    small = Predictor(QWEN3_0_6B, 16, ["all-linear"])
    at = {"micro": 8, "max_length": 1024, "dtype": "fp16", "checkpointing": False, "compile": "regional"}
    small.measured = [(Knobs(other=(("train.compile_mode", "default"),), **at), 12.924 * GIB)]
    found = small.predict(Knobs(other=(("train.compile_mode", "reduce-overhead"),), **at)) / GIB
    assert found == pytest.approx(13.486, rel=0.015)


def test_the_models_loss_keeps_about_twice_the_compiled_ones_logits_beside_cuda_graphs():
    """4x1, adapters in bf16, regional compilation with CUDA graphs (seed 1): TRL's loss 8.27 GiB, the model's own
    13.33, the compiled one 11.01 (which the predictor gave both before)."""
    predictor = seed_predictor()
    graphs = {"adapter_dtype": "compute", "compile_mode": "reduce-overhead"}
    predictor.measured.append((seed(loss="trl", **graphs), 8.266 * GIB))
    assert predictor.predict(seed(loss="model", **graphs)) / GIB == pytest.approx(13.326, rel=0.02)
    assert predictor.predict(seed(loss="compiled", **graphs)) / GIB == pytest.approx(11.006, rel=0.02)


def test_flex_attention_under_cuda_graphs_keeps_one_fp32_copy_of_the_logits_less():
    """Beside compiled layers with CUDA graphs and a loss that keeps the logits, flex attention measured one fp32 copy
    of them (1.16 GiB at 4x1) less than sdpa: 9.84 against 11.01 GiB with the compiled loss, 12.17 against 13.33 with
    the model's (seed 1's stores); beside TRL's loss the two measured alike (8.26, 8.27), and in eager layers (9.60
    both). Predicted from sdpa's TRL-loss point and from flex attention's own compiled-loss point alike."""
    predictor = seed_predictor()
    graphs = {"adapter_dtype": "compute", "compile_mode": "reduce-overhead"}
    predictor.measured.append((seed(loss="trl", **graphs), 8.266 * GIB))
    flex = {"attention": "flex_attention", **graphs}
    assert predictor.predict(seed(loss="compiled", **flex)) / GIB == pytest.approx(9.84, rel=0.02)
    assert predictor.predict(seed(loss="model", **flex)) / GIB == pytest.approx(12.17, rel=0.02)
    assert predictor.predict(seed(loss="trl", **flex)) / GIB == pytest.approx(8.27, rel=0.02)
    predictor.measured = predictor.measured[:-1] + [(seed(loss="compiled", **flex), 9.84 * GIB)]
    assert predictor.predict(seed(loss="compiled", **graphs)) / GIB == pytest.approx(11.006, rel=0.02)
    assert memory_term(seed(loss="model", **flex)).logit_bytes == pytest.approx(17.4 - 4.0)
    assert memory_term(seed(loss="model", **{**flex, "compile_mode": "default"})).logit_bytes == 17.4
    assert memory_term(seed(loss="model", compile="off", **flex)).logit_bytes == 17.4
    values = [("model.attn_implementation", "flex_attention"), *graphs_values(graphs), ("train.loss", "model")]
    assert registry.unmodelled(values) == ()  # a term now, not a change the predictor carries across last


def graphs_values(values: dict) -> list[tuple[str, str]]:
    return [("train.torch_compile", "regional"), *((f"train.{k}", v) for k, v in values.items())]


def chats(micro: int, tokens: int, padding: str, loss: str, compile: str = "off") -> Knobs:
    """A config of the chats grid, whose adapters were in the compute dtype."""
    other = (
        ("train.adapter_dtype", "compute"),
        ("train.compile_mode", "default"),
        ("train.loss", loss),
        ("train.padding", padding),
    )
    return Knobs(micro, 1024, "bf16", False, other, compile, tokens=tokens)


def test_a_compiled_loss_is_carried_from_its_own_padding_first():
    """The chats grid at 4x2: padding-free, the compiled loss kept 6.2 bytes a token and vocabulary entry over TRL's,
    padded to the longest 11.6: the padding lays the micro-batches out, and what the allocator keeps of those trained
    before the longest differs beyond any term. Padding-free with the compiled loss (8.92 GiB) comes from padding-free
    configs (its compiled layers' 8.15), not from the longest's line (11.70 before)."""
    predictor = Predictor(QWEN3_0_6B, 16, ["all-linear"])
    probes = [(chats(4, 4000, "longest", "trl"), 10.346), (chats(8, 8000, "longest", "trl"), 21.219)]
    predictor.calibrate([(k, peak * GIB) for k, peak in probes])
    measured = probes + [
        (chats(4, 2311, "padding_free", "trl"), 6.686),
        (chats(8, 3307, "padding_free", "trl"), 10.043),
        (chats(4, 4000, "longest", "compiled"), 17.994),
        (chats(8, 8000, "longest", "compiled"), 32.889),
        (chats(4, 2311, "padding_free", "compiled", "regional"), 8.152),
    ]
    predictor.measured = [(k, peak * GIB) for k, peak in measured]
    assert predictor.predict(chats(4, 2311, "padding_free", "compiled")) / GIB == pytest.approx(8.918, rel=0.06)
    bucketed = registry.unmodelled([("train.padding", "longest"), ("train.compile_mode", "reduce-overhead")])
    assert bucketed == (("train.padding", "buckets"),)  # padded to the longest is bucketed under CUDA graphs


def test_compiled_layers_keep_what_their_products_and_attention_need():
    """What compiled layers keep over eager's with the adapters in the compute dtype: 0.729 on the 1.7B shape and
    0.733 on the 0.6B one (`bench.saved_bytes` counted 0.730 and 0.735), and with PEFT's fp32 adapters 0.673 and
    0.676 (counted 0.662 and 0.687; the 1.7B shape's grid measured 0.62-0.65). The chats grid padded to max_length:
    eager 9.48 GiB at 4x2 (and 17.13 at 8x1), regional 7.91 (9% under with the 0.67 share of old)."""
    for adapters, expected in (("compute", [0.729, 0.733]), ("fp32", [0.673, 0.676])):
        other = (("train.adapter_dtype", adapters),)
        ratios = [
            activation_token_bytes(shape, Knobs(4, 512, "bf16", False, other, compile="regional"))
            / activation_token_bytes(shape, Knobs(4, 512, "bf16", False, other))
            for shape in (QWEN3_1_7B, QWEN3_0_6B)
        ]
        assert ratios == pytest.approx(expected, abs=0.003), adapters
    predictor = Predictor(QWEN3_0_6B, 16, ["all-linear"])
    eager = [(chats(4, 4096, "max_length", "trl"), 9.484), (chats(8, 8192, "max_length", "trl"), 17.129)]
    predictor.calibrate([(k, peak * GIB) for k, peak in eager])
    predictor.measured = [(k, peak * GIB) for k, peak in eager]
    regional = chats(4, 4096, "max_length", "trl", "regional")
    assert predictor.predict(regional) / GIB == pytest.approx(7.914, rel=0.06)


def test_a_line_is_not_carried_past_its_tokens_where_a_setting_without_a_term_apart_measured_there():
    """The seed's grid, regional compilation and the compiled loss: fused AdamW measured 5.89 GiB at 1x4 and 7.12 at
    2x2, AdamW 11.17 at 4x1; the compiled loss grows faster than a line at 4x1 (11.11 measured), where its own line
    through 1x4 and 2x2 says 9.57. The optimizer has no memory term: AdamW's peak at 4x1 answers."""
    predictor = seed_predictor()
    compiled = {"compile_mode": "default", "loss": "compiled"}
    fused = {**compiled, "optimizer": "adamw_torch_fused"}
    plain = {**compiled, "optimizer": "adamw_torch"}
    predictor.measured += [
        (seed(1, **fused), 5.891 * GIB),
        (seed(2, **fused), 7.119 * GIB),
        (seed(1, **plain), 5.658 * GIB),
        (seed(2, **plain), 7.662 * GIB),
        (seed(4, **plain), 11.17 * GIB),
    ]
    assert predictor.predict(seed(4, **fused)) / GIB == pytest.approx(11.107, rel=0.02)
    assert predictor.predict(seed(2, **fused)) / GIB == pytest.approx(7.119, rel=0.01)  # its own line, where measured


def chats_knobs(micro: int, tokens: int, attention: str, masked: bool) -> Knobs:
    """A config of the chats studies (Qwen3-0.6B, max_length 1,024, bf16, adapters in fp32, padded to the longest)."""
    return Knobs(
        micro, 1024, "bf16", False, (("train.adapter_dtype", "fp32"),), "off", attention, tokens, masked=masked
    )


def chats_predictor(masked: bool) -> Predictor:
    """Calibrated on accept-h100-1206b's probes: one record of 1,000 tokens (no mask), and the run's longest 8x1
    micro-batch, 8,000 tokens of 3,307 records' own (masked, where `masked`)."""
    predictor = Predictor(QWEN3_0_6B, 16, ["all-linear"])
    probes = [(chats_knobs(1, 1000, "sdpa", False), 4.207 * GIB), (chats_knobs(8, 8000, "sdpa", masked), 19.027 * GIB)]
    predictor.calibrate(probes)
    predictor.measured = probes
    return predictor


def test_sdpa_keeps_the_key_and_value_heads_repeated_where_the_micro_batch_takes_a_mask():
    """Flex attention at 8x1 on the chats measured 17.70 GiB in three studies on an H100 (accept-h100-1206b, -c, -d)
    where SDPA measured 19.03 beside it. transformers' SDPA path repeats the key and value heads to every query head
    under a mask (2 (q - k) elements a token and layer), flex attention keeps the grouped heads: with the term flex is
    predicted within 2%; without it (no micro-batch masked) it read SDPA's line, 7.5% over."""
    flex = chats_knobs(8, 8000, "flex_attention", True)
    assert chats_predictor(masked=True).predict(flex) / GIB == pytest.approx(17.70, rel=0.02)
    assert chats_predictor(masked=False).predict(flex) / GIB == pytest.approx(19.03, rel=0.01)
    # the same micro-batch without a mask (records of one length): SDPA keeps the grouped heads too
    sdpa = chats_predictor(masked=True)
    unmasked, masked = (sdpa.predict(chats_knobs(8, 8000, "sdpa", m)) for m in (False, True))
    repeated = 2 * 2 * (16 - 8) * 128 * 28 * 8000  # bf16, key and value, (q - k) elements, 28 layers, 8,000 tokens
    assert masked / GIB == pytest.approx(19.027, rel=1e-6)
    assert 1.0 <= (masked - unmasked) / repeated / sdpa.scale <= 1.2  # the bytes repeated, as the line grows them


@pytest.mark.parametrize(
    ("rows", "tokens", "real", "squares", "masked"),
    [
        (((0,), (1,)), 2000, 1400, 2 * 1000**2, True),  # padded to the longest of two records
        (((0,), (1,)), 2000, 2000, 2 * 1000**2, False),  # two records of one length: no padding, no mask
        (((0,),), 1000, 1000, 1000**2, False),  # one record alone
        (((0,),), 1024, 1000, 1024**2, True),  # one record padded (to max_length, a bucket, a multiple)
        (((0,), (1,)), 1400, 1400, 1400**2, True),  # padding-free: two records share the row
        (((0, 1),), 1400, 1400, 1400**2, True),  # packing: two records packed in a row
    ],
)
def test_a_micro_batch_takes_a_mask_where_it_is_padded_or_its_records_share_a_row(rows, tokens, real, squares, masked):
    assert MicroBatch(rows, tokens, real, squares, 1, 10).masked is masked


def test_sdpa_and_flex_attention_differ_in_memory_only_on_a_micro_batch_that_takes_a_mask():
    """The nearest measured line prefers settings apart in keys whose change changes no memory: SDPA's term counts
    only under a mask, so on whole rows SDPA and flex attention are apart in a key without a term."""
    from pipeline.search._predictor import keys_apart

    for masked, moved in ((False, 0), (True, 1)):
        sdpa, flex = (chats_knobs(8, 8000, a, masked) for a in ("sdpa", "flex_attention"))
        assert keys_apart(sdpa, flex) == (1, moved)
