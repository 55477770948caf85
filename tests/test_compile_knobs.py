"""The compile knob: what `train.torch_compile` compiles (off, regional, whole; `true`/`false` are aliases), the
compile mode's rules for CUDA graphs, the identity and the reproduce line, and what a job records of compilation.
Fast: nothing here compiles (the compiled jobs are in test_compile.py, slow)."""

from __future__ import annotations

import dataclasses
import shlex

import pytest
from optuna.trial import TrialState

from pipeline.answer.study import reproduce
from pipeline.builders.sft_args import sft_kwargs
from pipeline.config.devices import cuda_device_count
from pipeline.config.errors import ConfigError
from pipeline.config.identity import config_id
from pipeline.config.knobs import check_knobs, check_values
from pipeline.config.schema import typed
from pipeline.config.validate import validate
from pipeline.jobs.task import job_spec
from pipeline.knobs.torch_compile import Compile, compile_layers, decoder_layers
from pipeline.measure.compiled import CompileWatch
from pipeline.records import StopRule
from pipeline.search._left_out import candidates
from pipeline.search._space import combinations, splits
from pipeline.search._trials import TrialRecord
from tests.helpers.configs import composed
from tests.helpers.spaces import assert_every_value_runs, runnable_combinations

SEED = ["experiment=seed-t4", "gpu=auto", "mem_cap=14GiB", "batch.split=4x1", "measure.warmup_steps=5"]


def test_true_is_regional_and_false_is_off_in_every_record(cfg, compose):
    assert [Compile.of(v) for v in (True, "true", "True", "regional")] == [Compile.REGIONAL] * 4
    assert [Compile.of(v) for v in (False, "false", "off")] == [Compile.OFF] * 3
    with pytest.raises(ValueError):
        Compile.of("layers")
    ids = {v: config_id(compose(f"train.torch_compile={v}")) for v in ("true", "regional", "whole")}
    assert ids["true"] == ids["regional"] != ids["whole"]
    # the spec the job gets, its MLflow params and config.yaml carry one spelling
    spec = job_spec(validate(compose("train.torch_compile=true")))
    assert spec.config.train.torch_compile == "regional" and spec.config_id == ids["regional"]
    assert job_spec(validate(cfg)).config.train.torch_compile == "off"


def test_a_study_judges_a_compiling_config_for_slowness_after_its_warm_up(compose):
    """The study's stop rule reaches the job with its prune window moved past the warm-up when the config compiles
    anything (layers, the loss, the optimizer step); an eager config keeps the window after its first step."""
    rule = StopRule(cap_bytes=None, prune_after=3, prune_threshold_s=0.2)
    warm = "measure.warmup_steps=6"
    for knob in ("train.torch_compile=regional", "train.loss=compiled", "train.optimizer_step=compiled"):
        assert job_spec(validate(compose(warm, knob)), stop=rule).stop.prune_from == 6, knob
    assert job_spec(validate(compose(warm)), stop=rule).stop.prune_from == 1
    assert job_spec(validate(compose(warm, "train.loss=compiled")), stop=StopRule()).stop == StopRule()


def _train(*overrides: str):
    return composed(*SEED, *overrides).train


def check_compile(train, accumulation: int, cuda: bool) -> Compile:
    """The compile knobs' values and rules (`train.torch_compile`, `train.compile_mode`); the compile choice."""
    check_values("train", train)
    check_knobs(train, None, None, accumulation, cuda, keys=("train.torch_compile", "train.compile_mode"))
    return Compile.of(train.torch_compile)


# (overrides on the seed's setting, the start of the refusal's message or the accepted choice), with a CUDA device
RULES = [
    ([], Compile.OFF),
    (["train.torch_compile=true"], Compile.REGIONAL),
    (["train.torch_compile=whole", "train.compile_mode=max-autotune-no-cudagraphs"], Compile.WHOLE),
    (
        ["train.torch_compile=regional", "train.gradient_checkpointing=false", "train.compile_mode=reduce-overhead"],
        Compile.REGIONAL,
    ),
    (["train.torch_compile=whole", "train.compile_mode=reduce-overhead"], Compile.WHOLE),  # checkpoint in the graph
    (["train.torch_compile=layers"], "train.torch_compile: got 'layers'; accepted: off, regional, whole (true is"),
    (["train.torch_compile=1"], "train.torch_compile: got '1'; accepted: off, regional, whole"),
    (
        ["train.compile_mode=reduce-overhead"],
        "train.compile_mode: reduce-overhead applies to compiled code and "
        "train.torch_compile is off; accepted with it: default (or train.torch_compile=regional or whole)",
    ),
    (
        ["train.torch_compile=regional", "train.compile_mode=reduce-overhead"],
        "train.compile_mode: reduce-overhead "
        "graphs of checkpointed layers fail when the layer is recomputed (pytorch/pytorch#154306); accepted with "
        "train.gradient_checkpointing=true and regional: default, max-autotune-no-cudagraphs",
    ),
    (
        [
            "train.torch_compile=regional",
            "train.gradient_checkpointing=false",
            "train.compile_mode=max-autotune",
            "train.padding=padding_free",
        ],
        "train.compile_mode: max-autotune records one CUDA graph per batch shape, and a padding-free row has as many "
        "as it has token counts; accepted with it: train.padding=longest or buckets (padded to a quarter of "
        "max_length: four shapes), or max_length",
    ),
]


@pytest.mark.parametrize(("overrides", "expected"), RULES, ids=[" ".join(o) or "seed" for o, _ in RULES])
def test_compile_rules_on_a_cuda_device(overrides, expected):
    """The rules as a CUDA device sees them (`cuda=True`: the device only decides whether CUDA graphs can exist)."""
    train = _train(*overrides)
    if isinstance(expected, Compile):
        assert check_compile(train, 1, cuda=True) is expected
        return
    with pytest.raises(ConfigError) as refused:
        check_compile(train, 1, cuda=True)
    assert str(refused.value).startswith(expected)


def test_a_compile_mode_outside_the_schemas_choices_is_refused_with_them(compose):
    cfg = compose("train.compile_mode=fast")
    with pytest.raises(ConfigError) as refused:
        validate(cfg)
    assert str(refused.value) == (
        "train.compile_mode: got 'fast'; accepted: default, reduce-overhead, max-autotune-no-cudagraphs, max-autotune"
    )


def test_cuda_graphs_refuse_accumulation_and_the_cpu():
    train = _train(
        "train.torch_compile=regional", "train.gradient_checkpointing=false", "train.compile_mode=reduce-overhead"
    )
    with pytest.raises(ConfigError, match=r"^train.compile_mode: reduce-overhead with gradient accumulation replays "):
        check_compile(train, 2, cuda=True)
    with pytest.raises(ConfigError, match=r"^train.compile_mode: reduce-overhead records CUDA graphs; accepted on the"):
        check_compile(train, 1, cuda=False)


def test_every_value_of_the_compile_study_runs_on_a_cuda_device(compose):
    """conf/optimize/compile.yaml on the seed's setting: the combinations no job could run are left out by the same
    rules (CUDA graphs only at 4x1 without checkpointing, a mode only with something compiled), and every value of
    the space is in a combination that runs."""
    cfg = compose(*SEED, "optimize=compile")
    space = {"batch.split": splits(cfg.batch.effective, cfg.world_size), **cfg.optimize.space}
    valid = runnable_combinations(
        space,
        cfg.train,
        lambda train, values: check_compile(train, int(values["batch.split"].split("x")[1]), cuda=True),
    )
    # 3 splits x checkpointing x dtype, eager or regional (24), and CUDA graphs at 4x1 without checkpointing (2)
    assert len(valid) == 26
    assert_every_value_runs(space, valid)
    graphs = [c for c in valid if c["train.compile_mode"] == "reduce-overhead"]
    assert {(c["batch.split"], c["train.gradient_checkpointing"]) for c in graphs} == {("4x1", False)}


@pytest.mark.skipif(cuda_device_count() > 0, reason="the CPU's refusals")
def test_the_compile_study_on_the_cpu_keeps_what_the_cpu_runs(compose):
    """Through the real candidate code: on a CPU, bf16 with and without regional compilation remains."""
    cfg = compose(*SEED, "optimize=compile")
    valid, invalid = combinations(cfg)
    assert len(valid) == 12
    assert {c.params["train.torch_compile"] for c in valid} == {"off", "regional"}
    reasons = {why.split(":")[0] + ":" + why.split(":")[1].split(";")[0] for why in invalid.values()}
    assert reasons == {
        "train.dtype: fp16 needs a CUDA device",
        "train.compile_mode: reduce-overhead records CUDA graphs",
        "train.compile_mode: reduce-overhead applies to compiled code and train.torch_compile is off",
    }


def test_the_reproduce_line_names_the_compile_choice(compose):
    command = ["mem_cap=1GiB", "++optimize.space={train.torch_compile:[off,regional]}"]
    valid, _ = candidates(compose(*command))
    regional = next(c for c in valid if c.split == "4x1" and c.params["train.torch_compile"] == "regional")
    assert regional.label == "tiny 4x1 compile=regional"
    record = TrialRecord(number=0, state=TrialState.COMPLETE, overrides=tuple(regional.overrides))
    line = reproduce(command, record)
    assert line == "python -m pipeline.train mem_cap=1GiB batch.split=4x1 train.torch_compile=regional"
    # pasted, it is the same config: the identity of the trial the answer names
    assert config_id(compose(*shlex.split(line)[3:])) == regional.config_id


def test_sft_config_compiles_only_the_whole_model(compose):
    train = typed(compose("train.torch_compile=whole", "train.compile_mode=reduce-overhead")).train
    whole = sft_kwargs(4, 1, train, "bf16", "cuda")
    assert whole["torch_compile"] is True and whole["torch_compile_mode"] == "reduce-overhead"
    assert whole["dataloader_drop_last"] is True  # CUDA graphs: every micro-batch of one shape
    regional = sft_kwargs(
        4, 1, dataclasses.replace(train, torch_compile="regional", compile_mode="default"), "bf16", "cuda"
    )
    assert regional["torch_compile"] is False and regional["torch_compile_mode"] is None
    assert regional["dataloader_drop_last"] is False


def test_regional_compilation_marks_every_decoder_layer():
    import torch
    from peft import get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    from pipeline.builders.lora import build_lora_config
    from pipeline.config.schema import LoraConfig

    config = AutoConfig.for_model(
        "qwen3",
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        vocab_size=64,
    )
    model = get_peft_model(AutoModelForCausalLM.from_config(config), build_lora_config(LoraConfig(r=4, alpha=8)))
    layers = decoder_layers(model)
    assert [type(layer).__name__ for layer in layers] == ["Qwen3DecoderLayer"] * 3  # through the PeftModel
    assert compile_layers(model, "default") == 3
    assert all(layer._compiled_call_impl is not None for layer in layers)  # compiled lazily, at the first forward
    assert model.base_model.model.lm_head._compiled_call_impl is None  # nothing else
    with pytest.raises(ValueError, match="no decoder layers to compile"):
        compile_layers(torch.nn.Sequential(torch.nn.Linear(2, 2)), "default")


def test_a_cuda_graph_fallback_is_recorded_with_its_reason():
    """Inductor's own skip path (counter and log line) as it runs where a graph cannot be recorded."""
    from torch._inductor.cudagraph_utils import log_cudagraph_skip_and_bump_counter

    with CompileWatch() as watch:
        log_cudagraph_skip_and_bump_counter("skipping cudagraphs due to mutated inputs (2 instances)")
        log_cudagraph_skip_and_bump_counter("skipping cudagraphs due to mutated inputs (2 instances)")
    log_cudagraph_skip_and_bump_counter("skipping cudagraphs due to something after the job")
    assert watch.cudagraph_skips == 2  # counted while watched only, each reason once
    assert watch.note("regional (28 layers)") == (
        "regional (28 layers): 0 graphs compiled; CUDA graphs skipped 2 times: skipping cudagraphs due to mutated "
        "inputs (2 instances)"
    )


def test_recording_cuda_graphs_counts_as_compiling():
    """Under reduce-overhead the step after the first records the graphs: Inductor times each recording with the
    timer it keeps for them, and the meter counts it with compilation (not steady, not slow to the pruning clock)."""
    import time

    from torch._inductor.cudagraph_trees import dynamo_timed_cudagraph

    from pipeline.measure.callback import compile_seconds

    before = compile_seconds()
    with dynamo_timed_cudagraph("CUDAGraphNode.record", None, None):
        started = time.perf_counter()
        sum(i * i for i in range(200_000))
        inside = time.perf_counter() - started
    assert compile_seconds() - before >= inside > 0


@pytest.mark.gpu
def test_the_compile_study_validates_on_a_cuda_device(compose):
    """The same space through the real candidate code where CUDA is: 26 configs, every value in one that runs."""
    from pipeline.search._left_out import check_values

    cfg = compose(*SEED, "optimize=compile")
    check_values(cfg)
    valid, _ = candidates(cfg)
    assert len(valid) == 26
