"""The speed knobs' registry (`pipeline.knobs`): every knob is a field of its section with its choices, what a study
over everything tries is among them and holds the presets' values, the parent reads them without torch, and a new
knob is one module that the schema, validation, --help, identity, the SFTConfig arguments and the script all read."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from pipeline import knobs
from pipeline.config.accepted import choices_of
from pipeline.config.schema import GROUPS
from pipeline.knobs.base import Memory
from tests.helpers.cli import REPO, run_python


def test_every_knob_is_a_field_of_its_section_with_its_default_and_help():
    for knob in knobs.registry():
        spec = {f.name: f for f in dataclasses.fields(GROUPS[knob.section])}[knob.name]
        assert spec.default == knob.default and spec.metadata["help"] == knob.help, knob.key
        assert choices_of(knob.key)[: len(list(knob.choices or ()))] == tuple(m.value for m in knob.choices or ())
    names = list(knobs.short_names().values())
    assert len(names) == len(set(names))  # a display name never reads two knobs alike


def test_what_a_study_over_everything_tries_is_among_the_choices_and_holds_every_presets_values():
    """The presets of conf/optimize/ stay YAML; each searched knob value of theirs is one the knob's `searched`
    names, and every searched value is an accepted one."""
    searched = knobs.searched()
    for key, values in searched.items():
        assert {str(v).lower() for v in values} <= set(choices_of(key)), key
    presets = sorted((REPO / "conf" / "optimize").glob("*.yaml"))
    seen = 0
    for path in presets:
        space = OmegaConf.load(path).get("space") or {}
        for key, values in space.items():
            if key in knobs.by_key():
                assert {str(v).lower() for v in values} <= {str(v).lower() for v in searched[key]}, (path.name, key)
                seen += 1
    assert seen >= 10


def test_a_knobs_memory_term_is_what_the_predictor_adds():
    compiled = [("train.torch_compile", "true"), ("train.gradient_checkpointing", "False")]
    assert knobs.memory(compiled) == Memory(fused=True)
    assert knobs.memory([("train.torch_compile", "whole")]) == Memory(1.12, fused=True)
    assert knobs.memory([("train.gradient_checkpointing", True), ("lora.r", 8)]) == Memory(checkpointed=True)
    assert knobs.memory([("train.liger_kernel", "True"), ("train.loss", "trl")]) == Memory(0.70)
    eager_compute = [("train.adapter_dtype", "compute"), ("train.torch_compile", "off")]
    assert knobs.memory(eager_compute, "bf16") == Memory(0.81)  # PEFT's fp32 casts no longer kept
    assert knobs.memory(eager_compute, "fp32") == Memory()  # in fp32 both adapters are one
    assert knobs.memory([("train.adapter_dtype", "compute"), ("train.torch_compile", "regional")], "bf16") == Memory(
        fused=True
    )  # compiled layers fuse the casts: the compiled layers' keep alone
    assert knobs.memory([("train.loss", "compiled")]) == Memory(logit_bytes=9.4)  # the logits, upcast to fp32
    assert knobs.memory([("train.loss", "model")]) == Memory(logit_bytes=17.4)  # and their log-softmax, gradients


def test_the_parent_reads_the_knobs_without_importing_torch(tmp_path):
    code = (
        "import sys; from pipeline import knobs; from pipeline.config import validate; "
        "from pipeline.builders import sft_args; from pipeline.answer import script; import pipeline.search.predictor; "
        "assert len(knobs.registry()) >= 11; print('torch' in sys.modules)"
    )
    proc = run_python("-c", code, cwd=tmp_path)
    assert (proc.returncode, proc.stdout.strip()) == (0, "False"), proc.stderr[-2000:]


def readme_knob() -> str:
    """The module the docs' development page shows as a new knob."""
    text = (REPO / "docs" / "development.md").read_text(encoding="utf-8")
    return re.search(r"`pipeline/knobs/tf32\.py`:\n\n```python\n(.*?)```", text, re.S).group(1)


# Run in a fresh interpreter (the schema's dataclasses are made at its import): the README's module put on the
# folder's path, then every reader of the registry asked about it.
READERS = """
import json, sys
import pipeline.knobs
pipeline.knobs.__path__.append(sys.argv[1])
from pipeline.answer.script import script_text
from pipeline.builders.sft_args import sft_kwargs
from pipeline.config.compose import compose_job
from pipeline.config.errors import ConfigError
from pipeline.config.help import help_text
from pipeline.config.identity import config_id, display_name
from pipeline.config.schema import TrainConfig, typed
from pipeline.config.validate import validate

def refusal(*overrides):
    try:
        validate(compose_job("config", list(overrides)))
    except ConfigError as err:
        return str(err)

on, off = compose_job("config", ["train.tf32=true"]), compose_job("config", [])
train = typed(on).train
print(json.dumps({
    "default": TrainConfig().tf32,
    "help": help_text("pipeline.train", "x\\n\\ny"),
    "refused": [refusal("gpu=cpu", "train.tf32=true"), refusal("train.tf32=maybe"), refusal("gpu=cpu")],
    "ids": [config_id(on), config_id(off), config_id(compose_job("config", ["train.tf32=false"]))],
    "name": display_name("tiny", "4x1", [("train.tf32", "true")]),
    "sft": [sft_kwargs(4, 1, train, "fp32", "cpu")["tf32"], sft_kwargs(4, 1, typed(off).train, "fp32", "cpu")["tf32"]],
    "script": script_text(typed(on), sft_kwargs(4, 1, train, "bf16", "cuda"), "tiny 4x1", "x", "python -m ..."),
}))
"""


def test_a_new_knob_is_one_module_that_every_reader_of_the_registry_sees(tmp_path):
    folder = tmp_path / "more_knobs"
    folder.mkdir()
    (folder / "tf32.py").write_text(readme_knob(), encoding="utf-8")
    proc = run_python("-c", READERS, str(folder), cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["default"] is False  # the schema's field, its default the module's
    assert "  train.tf32                  true | false\n" in seen["help"]
    assert "fp32 matrix products on TF32 tensor cores (a GPU of Ampere or later)" in seen["help"]
    assert seen["refused"] == [
        "train.tf32: true needs a CUDA device; accepted on the CPU: false",  # its rule
        "train.tf32: got 'maybe'; accepted: true or false",  # its type
        None,
    ]
    on, off, written_off = seen["ids"]
    assert on != off == written_off  # part of the identity
    assert seen["name"] == "tiny 4x1 tf32=on"
    assert seen["sft"] == [True, False]
    assert "        tf32=True,\n" in seen["script"]


@pytest.mark.parametrize("knob", knobs.registry(), ids=lambda k: k.key)
def test_a_knobs_module_says_what_it_is(knob):
    """Each module opens with its key, so the folder reads as the list of knobs."""
    doc = Path(knob.path).read_text(encoding="utf-8").lstrip('"')
    assert doc.startswith(f"{knob.key}: "), doc[:80]
