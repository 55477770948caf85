"""The speed knobs' registry (`pipeline.knobs`): every knob is a field of its section with its choices, what a study
over everything tries is among them and holds the presets' values, a knob's memory term, and the parent reads them
without torch."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from pipeline import knobs
from pipeline.config.schema import GROUPS, choices_of
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
    assert knobs.memory([("train.torch_compile", "true"), ("train.gradient_checkpointing", "False")]) == Memory(0.67)
    assert knobs.memory([("train.gradient_checkpointing", True), ("lora.r", 8)]) == Memory(checkpointed=True)
    assert knobs.memory([("train.liger_kernel", "True"), ("train.loss", "compiled")]) == Memory()


def test_the_parent_reads_the_knobs_without_importing_torch(tmp_path):
    code = (
        "import sys; from pipeline import knobs; from pipeline.config import validate; "
        "from pipeline.builders import script, sft_args; import pipeline.search.predictor; "
        "assert len(knobs.registry()) >= 11; print('torch' in sys.modules)"
    )
    proc = run_python("-c", code, cwd=tmp_path)
    assert (proc.returncode, proc.stdout.strip()) == (0, "False"), proc.stderr[-2000:]


@pytest.mark.parametrize("knob", knobs.registry(), ids=lambda k: k.key)
def test_a_knobs_module_says_what_it_is(knob):
    """Each module opens with its key, so the folder reads as the list of knobs."""
    doc = Path(knob.path).read_text(encoding="utf-8").lstrip('"')
    assert doc.startswith(f"{knob.key}: "), doc[:80]
