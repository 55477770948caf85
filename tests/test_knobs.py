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
from pipeline.knobs.base import Knob, Memory
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


def test_each_presets_knob_lines_are_what_the_registry_searches_but_what_the_file_says_it_leaves_out():
    """A preset of conf/optimize/ lists for each knob it searches exactly the values a study over everything tries
    (`Knob.searched`), but those its comment names as left out (`# Left out: key=value (why)`); a value a knob
    gains, or drops, shows here until each preset says what it does with it."""
    searched = {key: {str(v).lower() for v in values} for key, values in knobs.searched().items()}
    checked = []
    for path in sorted((REPO / "conf" / "optimize").glob("*.yaml")):
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.startswith("# Left out:")]
        left_out: dict[str, set[str]] = {}
        for key, value in re.findall(r"(\w+\.\w+)=([\w-]+)", " ".join(lines)):
            left_out.setdefault(key, set()).add(value.lower())
        space = {k: {str(v).lower() for v in vs} for k, vs in (OmegaConf.load(path).get("space") or {}).items()}
        assert set(left_out) <= set(space), (path.name, left_out)  # it leaves out values of a line it has
        for key, values in space.items():
            if key in knobs.by_key():
                out = left_out.get(key, set())
                assert not values & out and values | out == searched[key], (path.name, key, values, out)
                checked.append((path.stem, key))
    assert {("all-knobs", "train.liger_kernel"), ("capture", "train.loss"), ("knobs", "train.padding")} <= set(checked)


SDPA = Memory(repeated_kv=2.0)  # the default attention's term: its key and value heads repeated under a mask


def test_a_knobs_memory_term_is_what_the_predictor_adds():
    compute = [("train.adapter_dtype", "compute")]  # the formula's own count: no adapters' share beside the others
    compiled = [*compute, ("train.torch_compile", "true"), ("train.gradient_checkpointing", "False")]
    assert knobs.memory(compiled, "bf16") == SDPA + Memory(fused=True)
    assert knobs.memory([*compute, ("train.torch_compile", "whole")], "bf16") == SDPA + Memory(1.02, fused=True)
    assert knobs.memory([*compute, ("train.gradient_checkpointing", True), ("lora.r", 8)], "bf16") == SDPA + Memory(
        checkpointed=True
    )
    liger = [*compute, ("train.liger_kernel", "True"), ("train.loss", "trl")]
    assert knobs.memory(liger, "bf16") == SDPA + Memory(unkept=(1.8, 1.8))
    assert knobs.memory([*compute, ("train.loss", "compiled")], "bf16") == SDPA + Memory(logit_bytes=9.4)  # fp32 logits
    assert knobs.memory([*compute, ("train.loss", "model")], "bf16") == SDPA + Memory(
        logit_bytes=17.4
    )  # and log-softmax


def test_peft_fp32_adapters_keep_their_casts_a_share_on_top_and_a_knob_not_given_is_at_its_default():
    fp32 = [("train.adapter_dtype", "fp32")]
    assert knobs.memory(fp32, "bf16") == SDPA + Memory(1.16)  # eager layers: PEFT's fp32 casts kept
    assert knobs.memory([*fp32, ("train.torch_compile", "regional")], "bf16") == SDPA + Memory(1.07, fused=True)
    assert knobs.memory([("train.torch_compile", "regional")], "bf16") == SDPA + Memory(1.07, fused=True)  # the default
    assert knobs.memory(fp32, "fp32") == SDPA + Memory()  # in fp32 both adapters are one
    assert knobs.memory([("train.adapter_dtype", "compute")], "fp16") == SDPA + Memory()


def test_the_docs_table_of_memory_terms_has_a_row_for_each_knob_with_a_term():
    """docs/studies.md's table is written at build time (docs/hooks.py) from each knob's `term_text`; a knob that
    has a term (it overrides `memory` or `memory_in`) says it there."""
    from docs.hooks import TERMS, terms_table

    with_term = [
        k.key for k in knobs.registry() if type(k).memory is not Knob.memory or type(k).memory_in is not Knob.memory_in
    ]
    assert len(with_term) >= 7 and all(knobs.by_key()[key].term_text for key in with_term), with_term
    rows = [line.split(" | ")[0].strip("| `") for line in terms_table().splitlines()[2:]]
    assert rows == [k.key for k in knobs.registry() if k.term_text]
    assert TERMS in (REPO / "docs" / "studies.md").read_text(encoding="utf-8")


def test_the_parent_reads_the_knobs_without_importing_torch(tmp_path):
    code = (
        "import sys; from pipeline import knobs; from pipeline.config import validate; "
        "from pipeline.builders import sft_args; from pipeline.answer import script; import pipeline.search._predictor; "
        "assert len(knobs.registry()) >= 11; print('torch' in sys.modules)"
    )
    proc = run_python("-c", code, cwd=tmp_path)
    assert (proc.returncode, proc.stdout.strip()) == (0, "False"), proc.stderr[-2000:]


def readme_knob() -> str:
    """The module the docs' development page shows as a new knob."""
    text = (REPO / "docs" / "development.md").read_text(encoding="utf-8")
    return re.search(r"`pipeline/knobs/activation_offloading\.py`[^`]*:\n\n```python\n(.*?)```", text, re.S).group(1)


# Run in a fresh interpreter (the schema's dataclasses are made at its import): the docs' module put on the folder's
# path, then every reader of the registry asked about it.
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
from pipeline.measure.flops import Shape
from pipeline.search._formula import LOSS_BYTES_PER_TOKEN, Knobs
from pipeline.search._predictor import Predictor

KEY = "train.activation_offloading"
GRAPHS = ["train.torch_compile=regional", "train.compile_mode=reduce-overhead", "batch.split=4x1"]

def refusal(*overrides):
    try:
        validate(compose_job("config", list(overrides)))
    except ConfigError as err:
        return str(err)

on, off = compose_job("config", [f"{KEY}=true"]), compose_job("config", [])
train = typed(on).train
predictor = Predictor(Shape.from_model(off.model), 16, ["all-linear"])
held = [Knobs(4, 128, "fp32", False, held=((KEY, str(value)),)) for value in (True, False)]
searched = Knobs(4, 128, "fp32", False, other=((KEY, "true"),))
print(json.dumps({
    "default": TrainConfig().activation_offloading,
    "help": help_text("pipeline.train", "x\\n\\ny"),
    "refused": [
        refusal(f"{KEY}=true", *GRAPHS), refusal(f"{KEY}=maybe"), refusal(f"{KEY}=true"), refusal(f"{KEY}=false", *GRAPHS)
    ],
    "ids": [config_id(on), config_id(off), config_id(compose_job("config", [f"{KEY}=false"]))],
    "name": display_name("tiny", "4x1", [(KEY, "true")]),
    "sft": [sft_kwargs(4, 1, train, "fp32", "cpu")["activation_offloading"], sft_kwargs(4, 1, typed(off).train, "fp32", "cpu")["activation_offloading"]],
    "script": script_text(typed(on), sft_kwargs(4, 1, train, "bf16", "cuda"), "tiny 4x1", "x", "python -m ..."),
    "activations": [predictor.terms(k).activations for k in [*held, searched]],
    "predicted": [predictor.predict(k) for k in [*held, searched]],
    "loss_bytes": LOSS_BYTES_PER_TOKEN,
}))
"""


def test_a_new_knob_is_one_module_that_every_reader_of_the_registry_sees(tmp_path):
    """The docs' example knob, added as its module alone: the schema, --help, validation (its type, and its rule
    against another knob, in its own line), identity, the display name, the SFTConfig arguments, the script, and the
    memory predictor (its term, held at the config's value or searched) all read it."""
    folder = tmp_path / "more_knobs"
    folder.mkdir()
    (folder / "activation_offloading.py").write_text(readme_knob(), encoding="utf-8")
    proc = run_python("-c", READERS, str(folder), cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["default"] is False  # the schema's field, its default the module's
    assert "  train.activation_offloading true | false\n" in seen["help"]
    assert (
        "move the layers' activations to the CPU until the backward pass: less memory, more transfers" in seen["help"]
    )
    pair, typo, alone, graphs_alone = seen["refused"]
    # its rule against another knob, in its own line
    assert (
        pair
        == "train.activation_offloading: true beside CUDA graphs (train.compile_mode=reduce-overhead); accepted there: false"
    )
    assert typo == "train.activation_offloading: got 'maybe'; accepted: true or false"  # its type
    assert alone is None
    assert graphs_alone is None or graphs_alone.startswith("train.compile_mode: ")  # the pair is what it refuses
    on, off, written_off = seen["ids"]
    assert on != off == written_off  # part of the identity
    assert seen["name"] == "tiny 4x1 offload=on"
    assert seen["sft"] == [True, False]
    assert "        activation_offloading=True,\n" in seen["script"]
    # its memory term: the layers keep none of their activations, only the loss's buffers are left per token
    held_on, held_off, searched_on = seen["activations"]
    assert held_on == searched_on == seen["loss_bytes"] < held_off
    assert seen["predicted"][0] == seen["predicted"][2] < seen["predicted"][1]


@pytest.mark.parametrize("knob", knobs.registry(), ids=lambda k: k.key)
def test_a_knobs_module_says_what_it_is(knob):
    """Each module opens with its key, so the folder reads as the list of knobs."""
    doc = Path(knob.path).read_text(encoding="utf-8").lstrip('"')
    assert doc.startswith(f"{knob.key}: "), doc[:80]
