"""Each adapter of a library's private API (pipeline/adapters) against the library installed here: an upgrade that
moves one fails here, by name. And where a public equivalent replaced one (Hydra's sweep of a multirun, Liger's
loss kernels, optuna-dashboard's app), that the public way does what the private one did."""

from __future__ import annotations

import inspect
import os
import signal
from multiprocessing import forkserver
from wsgiref.util import setup_testing_defaults

import optuna
import psutil
import pytest
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import TrialState

from pipeline.adapters import dynamo, optuna_storage
from pipeline.adapters.dashboard import serialize_trial
from pipeline.adapters.forkserver import forget_server, server_pid
from pipeline.adapters.hydra_args import args_parser
from pipeline.config.plan import expand_jobs


def test_the_trainers_private_steps_take_what_the_step_one_pass_gives():
    """`SFTTrainer._prepare_dataset` and `Trainer._get_num_items_in_batch` (pipeline/adapters/trainer.py), by the
    parameters the adapter passes, in order: a TRL or transformers that renames or reorders them fails here."""
    from transformers import Trainer
    from trl import SFTTrainer

    prepare = list(inspect.signature(SFTTrainer._prepare_dataset).parameters)
    assert prepare == ["self", "dataset", "processing_class", "args", "packing", "formatting_func", "dataset_name"]
    assert list(inspect.signature(Trainer._get_num_items_in_batch).parameters) == ["self", "batch_samples", "device"]


def test_hydras_parser_reads_the_command_line_as_hydra_main_does():
    args, rest = args_parser().parse_known_args(["-m", "--cfg", "job", "batch.split=1x4,4x1", "repeats=2"])
    assert (args.multirun, args.cfg, args.help, args.overrides, rest) == (
        True,
        "job",
        False,
        ["batch.split=1x4,4x1", "repeats=2"],
        [],
    )
    assert args_parser().parse_known_args(["--help"])[0].help is True


def test_the_fork_servers_pid_and_its_stop():
    forkserver.ensure_running()  # spawns it (or finds it running); its imports go on without us
    pid = server_pid()
    assert isinstance(pid, int) and psutil.pid_exists(pid)
    os.kill(pid, signal.SIGKILL)
    forget_server()  # reaps it
    assert server_pid() is None and not psutil.pid_exists(pid)


def test_dynamos_counters_and_timers_see_a_compilation():
    import torch

    assert dynamo.counters is not None and dynamo.calculate_time_spent is not None, "torch moved them"
    graphs, seconds = dynamo.count("stats", "unique_graphs"), dynamo.seconds_spent().get("total_wall_time", 0.0)
    compiled = torch.compile(lambda x: x * 2 + 1, backend="eager")  # Dynamo's tracing, no compiler needed
    compiled(torch.ones(3))
    assert dynamo.count("stats", "unique_graphs") == graphs + 1
    assert dynamo.seconds_spent()["total_wall_time"] > seconds


def test_a_trial_serialises_as_the_dashboards_api_answers_it():
    study = optuna.create_study()
    study.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=1)
    trial = study.trials[0]
    data = serialize_trial(study._study_id, trial, {})
    assert (data["number"], data["state"], data["values"]) == (0, "Complete", [trial.value])
    assert data["params"][0]["name"] == "x"


@pytest.mark.parametrize(
    "overrides",
    [
        ["batch.split=1x4,2x2,4x1"],
        ["repeat=0,1,2", "batch.split=1x4,4x1", "train.steps=5"],
        ["train.dtype=fp16,bf16", "batch.split=range(1,3)", "train.dtype=fp32", "+x=[1,2]"],
        ["model=tiny", "data.path='a b,c'", "world_size=1,2"],
    ],
)
def test_a_multirun_expands_as_hydras_basic_sweeper_runs_it(overrides):
    """Hydra's own sweeper (private, imported by this test only) and the public override grammar agree."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    hydras = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(overrides), max_batch_size=None)
    assert expand_jobs(overrides, multirun=True) == hydras[0]


def test_liger_loss_kernels_are_set_through_its_public_functions():
    transformers = pytest.importorskip("liger_kernel.transformers")
    apply = transformers.apply_liger_kernel_to_qwen3
    assert {"fused_linear_cross_entropy", "model"} <= set(inspect.signature(apply).parameters)


def test_the_dashboards_app_is_its_public_wsgi_app(tmp_path):
    import optuna_dashboard

    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'optuna.db'}")
    optuna.create_study(storage=storage, study_name="one")
    environ = {"PATH_INFO": "/api/studies"}
    setup_testing_defaults(environ)
    statuses = []
    body = b"".join(optuna_dashboard.wsgi(storage)(environ, lambda status, *rest: statuses.append(status)))
    assert statuses == ["200 OK"] and b'"study_name": "one"' in body


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    """A real sqlite storage, as the study's workers open one, with a study `s` in it."""
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    optuna.create_study(study_name="s", storage=url)
    return url


def _worker(url: str) -> optuna.Study:
    """The study as one worker sees it: loaded from its URL, its own storage object."""
    return optuna.load_study(study_name="s", storage=url)


def test_a_trials_state_is_read_from_the_storage_as_another_worker_left_it(sqlite_url):
    study = _worker(sqlite_url)
    trial = study.ask()
    assert optuna_storage.stored_state(study, trial) is TrialState.RUNNING
    _worker(sqlite_url).tell(trial.number, state=TrialState.FAIL)
    assert optuna_storage.stored_state(study, trial) is TrialState.FAIL


def test_another_workers_running_trial_is_failed_once(sqlite_url):
    study = _worker(sqlite_url)
    _worker(sqlite_url).ask()  # RUNNING, held by another worker: this one sees a FrozenTrial
    (frozen,) = study.get_trials(states=(TrialState.RUNNING,))
    optuna_storage.fail_trial(study, frozen)
    assert _worker(sqlite_url).trials[0].state is TrialState.FAIL
    with pytest.raises(UpdateFinishedTrialError):  # another worker got there first: the callers suppress it
        optuna_storage.fail_trial(study, frozen)


def test_a_constraint_is_the_system_attribute_optunas_samplers_read(sqlite_url):
    study = _worker(sqlite_url)
    trial = study.ask()
    optuna_storage.set_system_attr(study, trial, "constraints", [1.5])
    study.tell(trial, 2.0)
    assert _worker(sqlite_url).trials[0].system_attrs == {"constraints": [1.5]}
    from optuna.samplers._base import _CONSTRAINTS_KEY  # where Optuna's samplers read a trial's constraints

    assert _CONSTRAINTS_KEY == "constraints"


def test_a_heartbeat_is_written_from_a_thread_through_the_storage(sqlite_url):
    import threading

    study = _worker(sqlite_url)
    trial = study.ask()
    thread = threading.Thread(target=optuna_storage.user_attr_writer(study, trial), args=("heartbeat", 12.5))
    thread.start()
    thread.join()
    assert _worker(sqlite_url).trials[0].user_attrs == {"heartbeat": 12.5}


def test_a_lock_study_made_in_the_studys_storage_is_seen_by_every_worker(sqlite_url):
    study = _worker(sqlite_url)
    storage = optuna_storage.storage_of(study)
    assert isinstance(storage, optuna.storages.BaseStorage)
    lock = optuna.create_study(study_name="s:calibration", storage=storage)
    lock.set_user_attr("owner", "me")
    assert optuna.load_study(study_name="s:calibration", storage=sqlite_url).user_attrs == {"owner": "me"}
    optuna.delete_study(study_name="s:calibration", storage=storage)
    assert [s.study_name for s in optuna.get_all_study_summaries(storage=sqlite_url)] == ["s"]
