"""`optimize=fastest`: every speed knob the setting can run, in a space checked fast enough to hold thousands of
combinations. The README's study over it (its answer and what each knob bought) runs in tests/test_docs.py."""

from __future__ import annotations

import pytest

from pipeline.config.compose import compose_job
from pipeline.search import _space as space
from pipeline.search._left_out import candidates, droppable

KNOBS = (
    "train.gradient_checkpointing:[true,false],train.torch_compile:[off,regional,true],"
    "train.compile_mode:[default,max-autotune-no-cudagraphs,reduce-overhead],train.loss:[trl,model,compiled],"
    "train.optimizer_step:[eager,compiled]"
)


@pytest.mark.parametrize(
    ("setting", "dtypes"),
    [
        pytest.param(["batch.effective=4"], "", marks=pytest.mark.slow),  # the space but the dtype, half the time
        pytest.param(["batch.effective=6", "train.max_length=64"], ",train.dtype:[fp32,fp16]", marks=pytest.mark.slow),
    ],
    ids=["but-dtype", "every-knob"],
)
def test_the_fast_check_of_a_knob_space_is_the_whole_validation(monkeypatch, setting, dtypes):
    """Each point of a space of knobs, checked by the knobs' rules and the split's alone, is valid exactly when the
    whole validation of its config says so, with the same reason, and has the same identity; also from a base whose
    own split does not make its effective batch."""
    cfg = compose_job("optimize", [f"++optimize.space={{{KNOBS}{dtypes}}}", *setting, "mem_cap=1GiB"])
    fast, fast_invalid = space.combinations(cfg)
    points = space.Points(cfg)
    monkeypatch.setattr(points, "covers", lambda keys: False)
    monkeypatch.setattr(space, "Points", lambda _: points)
    whole, whole_invalid = space.combinations(cfg)
    assert len(fast) > 20 and len(fast_invalid) > 20
    assert [(c.config_id, c.label) for c in fast] == [(c.config_id, c.label) for c in whole]
    assert fast_invalid == whole_invalid
    assert fast[7].job.config_id == fast[7].config_id  # the job its trial runs is the point's


def _fastest(*overrides: str):
    return compose_job("optimize", ["optimize=fastest", "mem_cap=1GiB", *overrides])


def test_the_fastest_preset_holds_every_knob_this_setting_can_run_and_names_what_it_cannot():
    cfg = _fastest()
    keys = space.knob_space(cfg)
    valid, left_out = candidates(cfg)
    on_cpu = {f"{x.key}={x.value}" for x in left_out}
    assert {"train.dtype=fp16", "train.compile_mode=reduce-overhead", "train.optimizer_step=graph"} <= on_cpu
    assert all(droppable(x) for x in left_out)
    for key in ("train.gradient_checkpointing", "train.torch_compile", "train.loss", "train.optimizer"):
        assert len({dict(c.values)[key] for c in valid}) > 1, key
    assert "train.padding" not in keys  # every record one length: each layout is the same batch
    assert "train.padding" in space.knob_space(_fastest("data.distribution=uniform", "data.min_length=16"))
    narrowed = space.knob_space(_fastest("++optimize.space={train.loss:[trl]}"))
    assert narrowed["train.loss"] == ["trl"]  # optimize.space names a knob's values
    splits = candidates(_fastest("++optimize.space={batch.split:[2x2,4x1]}"))[0]
    assert {dict(c.values)["batch.split"] for c in splits} == {"2x2", "4x1"}  # and the splits'
    label = valid[0].label
    assert "attn=" not in label and "mode=" not in label  # one value on this setting: it names no config


def test_on_the_cpu_every_value_the_fastest_preset_leaves_out_is_named_on_its_own_line():
    """Every value a knob offers a study over everything is tried by some valid config or named with why: the
    attention kernels the CPU does not search (flash attention needs a CUDA device, flex attention compiles a slower
    kernel there) as much as fp16; the study says them one a line under one heading, never run together."""
    from pipeline import knobs

    valid, left_out = candidates(_fastest())
    tried = {(key, space.override_text(value)) for c in valid for key, value in c.values}
    named = {(x.key, space.override_text(x.value)): x.text() for x in left_out}
    offered = {
        (k.key, space.override_text(v.value if hasattr(v, "value") else v))
        for k in knobs.registry()
        for v in k.searched
    }
    assert not offered - tried - set(named), sorted(offered - tried - set(named))
    assert named[("model.attn_implementation", "flash_attention_2")] == (
        "model.attn_implementation=flash_attention_2: needs a CUDA device"
    )
    assert named[("model.attn_implementation", "flex_attention")].startswith(
        "model.attn_implementation=flex_attention: "
    )
    assert named[("train.dtype", "fp16")].startswith("train.dtype=fp16: fp16 needs a CUDA device")  # said once
    lines = space.left_out_lines(left_out)
    assert lines == ["left out of the space, each with why:", *(f"  {x.text()}" for x in left_out)]
    assert len(lines) == len(left_out) + 1 and not any("; model." in line or "; train." in line for line in lines)
    assert space.left_out_lines([]) == []


def test_a_space_tries_one_config_per_job_and_names_the_twin_it_left_out():
    """Adapters in the compute dtype run the job of fp32 adapters when the dtype is fp32: the study tries that job
    once, and a value that only ever makes such a twin is left out with the value it stands for."""
    both = "++optimize.space={train.dtype:[fp32,bf16],train.adapter_dtype:[fp32,compute]}"
    valid, left_out = candidates(compose_job("optimize", [both, "batch.effective=2", "mem_cap=1GiB"]))
    pairs = {(dict(c.values)["train.dtype"], dict(c.values)["train.adapter_dtype"]) for c in valid}
    assert pairs == {("fp32", "fp32"), ("bf16", "fp32"), ("bf16", "compute")}
    assert len(valid) == 2 * 3 and not left_out  # 1x2 and 2x1 each

    fp32 = "++optimize.space={train.dtype:[fp32],train.adapter_dtype:[fp32,compute]}"
    valid, left_out = candidates(compose_job("optimize", [fp32, "batch.effective=2", "mem_cap=1GiB"]))
    assert {dict(c.values)["train.adapter_dtype"] for c in valid} == {"fp32"}
    assert [x.text() for x in left_out] == [
        "train.adapter_dtype=compute: the same job as fp32 here: in fp32 the adapters are fp32 either way"
    ]
    assert all(droppable(x) for x in left_out)
    lists = (
        "++optimize.space={train.dtype:[fp32,bf16],train.adapter_dtype:[fp32,compute],lora.target_modules:[[q_proj]]}"
    )
    assert len(candidates(compose_job("optimize", [lists, "batch.effective=2", "mem_cap=1GiB"]))[0]) == 6
    alone = "++optimize.space={train.dtype:[fp32],train.adapter_dtype:[compute]}"  # no twin in the space: it runs
    valid, _ = candidates(compose_job("optimize", [alone, "batch.effective=2", "mem_cap=1GiB"]))
    assert {dict(c.values)["train.adapter_dtype"] for c in valid} == {"compute"}
