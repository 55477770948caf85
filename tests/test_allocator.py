"""train.allocator: the CUDA allocator's expandable segments on or off, or its large blocks unsplit, set in the job's
process (and in its exported script) before anything touches the device, the environment's other allocator settings kept; what the job
set is recorded; refused on the CPU, which has no such allocator."""

from __future__ import annotations

import pytest
from mlflow.tracking import MlflowClient

from pipeline import knobs
from pipeline.answer.script import script_text
from pipeline.builders.sft_args import sft_kwargs
from pipeline.config.schema import typed
from pipeline.knobs.allocator import allocator_settings
from tests.helpers.cli import run_cli, run_python
from tests.helpers.configs import composed

FAST = ["train.steps=2", "measure.warmup_steps=1", "train.progress_bar=false"]
USERS = "max_split_size_mb:256,garbage_collection_threshold:0.6"
KEPT = "garbage_collection_threshold:0.6"  # of USERS, what the knob does not set
CUDA, GENERIC = "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"


def test_the_environments_settings_are_kept_and_the_two_the_knob_sets_replaced():
    assert allocator_settings({}, True) == "expandable_segments:True"
    assert allocator_settings({CUDA: USERS}, False) == f"{KEPT},expandable_segments:False"
    assert allocator_settings({CUDA: " expandable_segments:False , max_split_size_mb:256"}, True) == (
        "expandable_segments:True"
    )
    assert allocator_settings({CUDA: USERS}, False, 512) == f"{KEPT},max_split_size_mb:512,expandable_segments:False"
    # torch reads PYTORCH_CUDA_ALLOC_CONF where both are set, else the generic name
    assert allocator_settings({GENERIC: USERS}, True) == f"{KEPT},expandable_segments:True"
    assert allocator_settings({GENERIC: "roundup_power2_divisions:4", CUDA: USERS}, True) == (
        f"{KEPT},expandable_segments:True"
    )


def test_the_job_sets_what_the_config_says_whatever_the_environment_said():
    given = "expandable_segments:True,max_split_size_mb:64,garbage_collection_threshold:0.6"
    for value, said in (
        ("cached", "expandable_segments:False"),  # the environment's split size would run unsplit's way: dropped
        ("expandable", "expandable_segments:True"),
        ("unsplit", "max_split_size_mb:512,expandable_segments:False"),
    ):
        environ = {GENERIC: given}
        knobs.prepare_process(composed(f"train.allocator={value}").train, environ)
        assert environ[CUDA] == f"garbage_collection_threshold:0.6,{said}", value


@pytest.mark.parametrize("value", ["expandable", "unsplit"])
def test_a_cuda_allocator_setting_is_refused_on_the_cpu_in_one_line_and_nothing_is_written(tmp_path, value):
    proc = run_cli(f"train.allocator={value}", *FAST, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip() == (
        f"error: train.allocator: {value} sets up the CUDA allocator, which the CPU does not have; accepted on the CPU: cached"
    )
    assert not (tmp_path / "mlruns").exists()


@pytest.mark.slow
def test_a_job_records_the_settings_it_gave_its_allocator(tmp_path):
    """A real job process: the environment's settings, kept, with the config's expandable segments."""
    proc = run_cli(*FAST, cwd=tmp_path, env={CUDA: USERS})
    assert proc.returncode == 0, proc.stderr[-3000:]
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("batch-split")
    (job,) = [r for r in client.search_runs([experiment.experiment_id]) if r.data.tags.get("kind") != "sweep"]
    assert job.data.params["version.cuda_alloc_conf"] == f"{KEPT},expandable_segments:False"
    assert "version.cuda_expandable_segments" not in job.data.params  # no CUDA allocator on the CPU


@pytest.mark.slow
def test_the_scripts_allocator_is_set_before_torchrun_picks_the_device(tmp_path):
    """Choosing a torchrun rank's device starts CUDA, whose allocator reads its settings then: the line comes before
    it; the script, run, leaves them in its environment."""
    config = typed(composed(*FAST, "train.allocator=expandable"))
    text = script_text(config, sft_kwargs(4, 1, config.train, "fp32", "cpu"), "tiny 4x1", "x", "python -m ...")
    assert text.index("allocator_settings(os.environ, expandable=True)") < text.index("torch.cuda.set_device(")
    assert "allocator_settings" not in script_text(
        typed(composed(*FAST)), sft_kwargs(4, 1, config.train, "fp32", "cpu"), "tiny 4x1", "x", "python -m ..."
    )
    path = tmp_path / "train.py"
    path.write_text(text, encoding="utf-8")
    reads = "import os, runpy, sys; sys.modules['pipeline'] = None; sys.argv = sys.argv[1:]; "
    reads += "runpy.run_path(sys.argv[0], run_name='__main__'); print(os.environ['PYTORCH_CUDA_ALLOC_CONF'])"
    proc = run_python("-c", reads, str(path), cwd=tmp_path, env={CUDA: USERS})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines()[-1] == f"{KEPT},expandable_segments:True"
    unsplit = typed(composed(*FAST, "train.allocator=unsplit"))
    text = script_text(unsplit, sft_kwargs(4, 1, unsplit.train, "fp32", "cpu"), "tiny 4x1", "x", "python -m ...")
    path.write_text(text, encoding="utf-8")
    proc = run_python("-c", reads, str(path), cwd=tmp_path, env={CUDA: USERS})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (
        proc.stdout.splitlines()[-1]
        == "garbage_collection_threshold:0.6,max_split_size_mb:512,expandable_segments:False"
    )
