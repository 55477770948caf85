"""train.allocator: the CUDA allocator's expandable segments, set in the job's process (and in its exported script)
before the first allocation reads them, the environment's other settings kept; what the allocator read is recorded."""

from __future__ import annotations

from mlflow.tracking import MlflowClient

from pipeline import knobs
from pipeline.answer.code import export
from pipeline.knobs.allocator import ALLOC_CONF, with_expandable_segments
from tests.helpers.cli import run_cli, run_python
from tests.helpers.configs import composed

FAST = ["train.steps=2", "measure.warmup_steps=1", "train.progress_bar=false"]
USERS = "max_split_size_mb:256,garbage_collection_threshold:0.6"


def test_expandable_segments_join_the_environments_settings_and_replace_its_own():
    assert with_expandable_segments("") == "expandable_segments:True"
    assert with_expandable_segments(USERS) == f"{USERS},expandable_segments:True"
    assert with_expandable_segments(" expandable_segments:False , max_split_size_mb:256") == (
        "max_split_size_mb:256,expandable_segments:True"
    )


def test_the_job_sets_them_only_where_the_config_asks():
    for value, expected in (("cached", USERS), ("expandable", f"{USERS},expandable_segments:True")):
        environ = {ALLOC_CONF: USERS}
        knobs.prepare_process(composed(f"train.allocator={value}").train, environ)
        assert environ == {ALLOC_CONF: expected}, value
    untouched: dict = {}
    knobs.prepare_process(composed().train, untouched)
    assert untouched == {}


def test_each_job_records_the_settings_its_allocator_read(tmp_path):
    """Real jobs of a sweep, each in its own process: the allocator reads what the knob set (the fork server that
    started them read none)."""
    proc = run_cli("-m", "train.allocator=cached,expandable", *FAST, cwd=tmp_path, env={ALLOC_CONF: USERS})
    assert proc.returncode == 0, proc.stderr[-3000:]
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("batch-split")
    jobs = [r for r in client.search_runs([experiment.experiment_id]) if r.data.tags.get("kind") != "sweep"]
    read = {r.data.params["train.allocator"]: r.data.params["version.cuda_alloc_conf"] for r in jobs}
    assert read == {"cached": USERS, "expandable": f"{USERS},expandable_segments:True"}


def test_the_exported_script_sets_them_before_its_first_allocation(tmp_path):
    path = export([*FAST, "train.allocator=expandable"]).path
    assert "os.environ[ALLOC_CONF] = with_expandable_segments(" in path.read_text(encoding="utf-8")
    assert "with_expandable_segments" not in export(FAST).text
    reads = "import runpy, sys, torch; sys.modules['pipeline'] = None; sys.argv = sys.argv[1:]; "
    reads += "runpy.run_path(sys.argv[0], run_name='__main__'); print(torch._C._accelerator_getAllocatorSettings())"
    proc = run_python("-c", reads, str(path), cwd=tmp_path, env={ALLOC_CONF: USERS})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines()[-1] == f"{USERS},expandable_segments:True"
