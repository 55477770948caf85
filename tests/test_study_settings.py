"""A study on settings nobody tuned for: a base config outside the space, a baseline over the cap, a round of one
finalist, a knob that fails at run time, a preset space with values this setting cannot run, a study name of another
config. Each answer states its speed-up over the baseline from pairs, or one line saying why none."""

from __future__ import annotations

import fcntl
import re
import shlex
import subprocess
from pathlib import Path
from subprocess import PIPE

import optuna
import pytest
import sqlalchemy
from optuna.trial import TrialState

from pipeline.answer import speedup
from pipeline.answer.code import sft_of
from pipeline.config.errors import ConfigError
from pipeline.config.validate import validate
from pipeline.records import Status
from pipeline.search._confirmation import ConfirmationRecord
from pipeline.search._confirmation.plan import ConfirmationRound
from pipeline.search._left_out import candidates, check_values
from pipeline.search._opening import StudyContext, check_binding
from pipeline.search._trials import Role, TrialRecord
from tests.helpers.cli import REPO, run_cli, start_cli
from tests.helpers.runs import mlflow_runs, the_study
from tests.helpers.wait import wait_until

# A short study of the tiny model: jobs of a few steps, probes of two.
# Its confirmation round as the share buys it (no floor in seconds): these tests check what a round holds, and a
# floor of half a minute a study would double the file's time.
SHORT = [
    "train.steps=6",
    "measure.warmup_steps=1",
    "optimize.probe_steps=2",
    "optimize.confirm_steps=3",
    "optimize.confirm_floor_s=0",
]
CLAIM = re.compile(
    r"^  (?P<figure>\d+\.\d\dx the baseline's tokens/s \[\d+\.\d+, \d+\.\d+\] \(95%, paired over (?P<rounds>\d+) "
    r"rounds with the baseline; .*)$|^  no speed-up over the baseline is claimed: (?P<why>.+)$",
    re.M,
)


def _claim(out: str) -> re.Match:
    """The answer's one line of its speed-up over the baseline (there must be exactly one)."""
    found = list(CLAIM.finditer(out))
    assert len(found) == 1, out[-4000:]
    return found[0]


def _optimize(tmp_path, *args: str, timeout: float = 900):
    return run_cli(*args, cwd=tmp_path, module="pipeline.optimize", timeout=timeout)


def _study_to_its_end(tmp_path, *args: str) -> tuple[subprocess.CompletedProcess, optuna.Study]:
    """A short study (SHORT) of `args` run to its end, exit code 0; its output and the study its storage holds."""
    proc = _optimize(tmp_path, *args, *SHORT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return proc, the_study(_storage(tmp_path))


def _storage(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'mlruns' / 'optuna.db'}"


@pytest.mark.slow
def test_a_base_config_outside_the_space_is_measured_beside_it_and_the_answer_states_its_claim(tmp_path):
    """The space searches checkpointing on only; the command line's config has it off: the baseline is measured
    anyway, labelled so, counts against no budget, and is paired with the answer in the round."""
    space = "++optimize.space={train.gradient_checkpointing:[true]}"
    proc, study = _study_to_its_end(tmp_path, "mem_cap=4GiB", "batch.effective=2", "optimize.trials=2", space)
    row = re.search(r"^\| (\d+) +\| tiny 1x2 ckpt=off +\| ok +\|", proc.stdout, re.M)  # its note under the table
    assert row and f"  #{row[1]}: baseline, outside the space" in proc.stdout.splitlines(), proc.stdout
    (base,) = [t for t in study.trials if t.user_attrs.get("role") == Role.BASELINE]
    assert base.state is TrialState.COMPLETE and base.user_attrs["status"] == "ok" and base.params == {}
    decided = {
        t.user_attrs["label"]
        for t in study.trials
        if t.state in (TrialState.COMPLETE, TrialState.PRUNED) and "label" in t.user_attrs
    }
    assert decided == {"tiny 1x2 ckpt=off", "tiny 1x2 ckpt=on", "tiny 2x1 ckpt=on"}  # both configs of the space too
    assert "decided 2 of the space's 2 configs" in proc.stdout
    claim = _claim(proc.stdout)
    if "best feasible: tiny 1x2 ckpt=off " in proc.stdout:
        assert claim["why"] == "the baseline itself (the command line's config) is the fastest that fits"
    else:  # the round paired the answer with the baseline, at least three times
        rounds = re.search(r"^confirmation round: (\d+) rounds .*tiny 1x2 ckpt=off \(baseline\)", proc.stdout, re.M)
        assert rounds and int(rounds[1]) >= 3, proc.stdout[-3000:]
        assert claim["figure"] or "paired rounds could not tell them apart" in claim["why"]


def test_a_wide_interval_is_said_in_words_and_one_round_is_no_figure():
    best = TrialRecord(1, TrialState.COMPLETE, label="tiny 4x1", status=Status.OK, median=0.1, feasible=True)
    base = TrialRecord(
        0, TrialState.COMPLETE, label="tiny 1x4", status=Status.OK, median=0.2, role=Role.BASELINE, feasible=True
    )
    times = {"tiny 4x1": {0: 0.1, 1: 0.3}, "tiny 1x4": {0: 0.5, 1: 0.05}}
    wide = ConfirmationRecord(ConfirmationRound(["tiny 4x1", "tiny 1x4"], 0.95, 0.05, times), 1, 3, 10.0, "tiny 1x4")
    said = speedup.claim(best, base, [base], wide, enabled=True, confirm_off=False)
    assert said.speedup is None
    assert re.fullmatch(r"2 paired rounds could not tell them apart \(within [\d.]+x either way\)", said.why)
    once = ConfirmationRecord(
        ConfirmationRound(["tiny 4x1", "tiny 1x4"], 0.95, 0.05, {"tiny 4x1": {0: 0.1}, "tiny 1x4": {0: 0.2}}),
        1,
        3,
        10.0,
        "tiny 1x4",
    )
    assert speedup.claim(best, base, [base], once, enabled=True, confirm_off=False).why == (
        "the confirmation round paired them in 1 round only"
    )
    assert speedup.claim(best, None, [], None, enabled=False, confirm_off=False).line() == (
        "no speed-up over the baseline is claimed: optimize.baseline=false: no baseline was measured"
    )
    oom = TrialRecord(0, TrialState.COMPLETE, label="tiny 8x1", status=Status.OOM, role=Role.BASELINE)
    assert speedup.claim(best, None, [oom], None, enabled=True, confirm_off=False).why == (
        "the baseline (tiny 8x1) ran out of memory on this device, even without the cap"
    )


def test_a_preset_space_leaves_out_what_this_setting_cannot_run_and_names_it(compose):
    """optimize=ckpt-dtype on the CPU: fp16 needs a CUDA device, so it is left out (not the study refused)."""
    cfg = compose("mem_cap=4GiB", "optimize=ckpt-dtype", "gpu=cpu")
    check_values(cfg)
    valid, left_out = candidates(cfg)
    assert {c.params["train.dtype"] for c in valid} == {"bf16"}
    assert [x.text() for x in left_out] == [
        "train.dtype=fp16: fp16 needs a CUDA device; accepted with gpu=cpu here: auto, fp32, bf16"
    ]


def test_cuda_graphs_in_a_preset_space_name_the_padding_they_need(monkeypatch, compose):
    """optimize=compile on a CUDA device: padded to the longest, reduce-overhead runs on length buckets (it is left
    out of no space of variable-length data); padding-free, it is left out for the padding (the real blocker), not
    for compilation being off in some other combination."""
    import pipeline.config.knobs
    import pipeline.config.validate

    monkeypatch.setattr(pipeline.config.knobs, "cuda_device_count", lambda: 1)
    monkeypatch.setattr(pipeline.config.validate, "cuda_device_count", lambda: 1)
    longest = compose("mem_cap=4GiB", "optimize=compile", "gpu=h200", "train.padding=longest", "train.max_length=1024")
    valid, left_out = candidates(longest)
    assert not [x for x in left_out if x.key == "train.compile_mode"], left_out
    graphs = [c for c in valid if c.config.train.compile_mode == "reduce-overhead"]
    assert graphs and {c.job.split.accumulation for c in graphs} == {1}
    assert {sft_of(c.job, ("cuda", "bf16"))["pad_to_multiple_of"] for c in graphs} == {256}  # four buckets of 1,024
    cfg = compose("mem_cap=4GiB", "optimize=compile", "gpu=h200", "train.padding=padding_free")
    check_values(cfg)
    _, left_out = candidates(cfg)
    (graphs,) = [x for x in left_out if x.key == "train.compile_mode"]
    assert graphs.value == "reduce-overhead"
    assert graphs.reason.startswith(
        "train.compile_mode: reduce-overhead records one CUDA graph per batch shape, and a padding-free row has as "
        "many as it has token counts; accepted with it: train.padding=longest or buckets"
    )


@pytest.mark.slow
def test_a_study_name_of_another_config_is_refused_and_nothing_is_written(tmp_path, monkeypatch, compose):
    monkeypatch.chdir(tmp_path)
    mine = compose("mem_cap=1GiB", "optimize.study_name=shared")
    StudyContext.open(mine, [], validate(mine).cap_bytes)  # the study of one config, under the name `shared`
    storage = _storage(tmp_path)
    before = optuna.load_study(study_name="shared", storage=storage).user_attrs
    proc = _optimize(tmp_path, "mem_cap=1GiB", "batch.effective=8", "optimize.study_name=shared")
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert re.fullmatch(
        r"error: optimize.study_name: 'shared' is the study of another config \(tiny-e4-cap1GiB-\w{8}; this "
        r"command's is tiny-e8-cap1GiB-\w{8}\); accepted: a name no study has yet, the command that started that "
        r"study, or null \(named after the config\)\n",
        proc.stderr,
    ), proc.stderr
    study = optuna.load_study(study_name="shared", storage=storage)
    assert study.trials == [] and study.user_attrs == before
    # the same config with another budget for its round is the same study (a round stopped short goes on with more)
    longer = compose(
        "mem_cap=1GiB", "optimize.study_name=shared", "optimize.confirm_rounds=3", "optimize.confirm_share=0.85"
    )
    check_binding(longer, validate(longer).cap_bytes)
    with pytest.raises(ConfigError, match="is the study of another config"):
        other = compose("mem_cap=1GiB", "optimize.study_name=shared", "optimize.confirm_k=1")  # pairs other configs
        check_binding(other, validate(other).cap_bytes)
    assert mlflow_runs(tmp_path) == []


def test_the_check_of_a_store_another_command_is_creating_writes_nothing_there(tmp_path, monkeypatch, compose):
    """A command that has made a fresh store's tables but not yet stamped their schema version: the check of a named
    study (and any reader opening the store without creating it) takes it for no study yet and writes nothing. A
    reader that stamped it made the command's own stamp fail (`UNIQUE constraint failed: alembic_version`)."""
    from optuna.storages._rdb import models

    monkeypatch.chdir(tmp_path)
    (tmp_path / "mlruns").mkdir()
    engine = sqlalchemy.create_engine(_storage(tmp_path))
    models.BaseModel.metadata.create_all(engine)  # the command's first step; its stamp comes next
    mine = compose("mem_cap=1GiB", "optimize.study_name=shared")
    check_binding(mine, validate(mine).cap_bytes)
    with engine.connect() as connection:
        assert not sqlalchemy.inspect(connection).has_table("alembic_version")
        assert connection.execute(sqlalchemy.text("SELECT * FROM version_info")).all() == []
    engine.dispose()
    StudyContext.open(mine, [], validate(mine).cap_bytes)  # the command goes on: it stamps, and opens its study
    assert optuna.get_all_study_names(_storage(tmp_path)) == ["shared"]


def test_a_study_bound_to_another_config_since_the_check_is_refused_where_it_opens(tmp_path, monkeypatch, compose):
    """Another command made the study under this name after this one's check passed: opening it refuses this
    config (ConfigError), and writes nothing, to the study or to MLflow."""
    monkeypatch.chdir(tmp_path)
    other = compose("mem_cap=1GiB", "optimize.study_name=shared")
    mine = compose("mem_cap=1GiB", "batch.effective=8", "batch.split=1x8", "optimize.study_name=shared")
    check_binding(mine, validate(mine).cap_bytes)  # no such study yet: passes
    StudyContext.open(other, [], validate(other).cap_bytes)
    (tmp_path / "mlruns" / "mlflow.db").unlink()
    before = optuna.load_study(study_name="shared", storage=_storage(tmp_path)).user_attrs
    with pytest.raises(ConfigError, match=r"^optimize.study_name: 'shared' is the study of another config \(tiny-e4-"):
        StudyContext.open(mine, [], validate(mine).cap_bytes)
    assert optuna.load_study(study_name="shared", storage=_storage(tmp_path)).user_attrs == before
    assert not (tmp_path / "mlruns" / "mlflow.db").exists()


def _waiting_for(lock) -> int:
    """How many processes wait for the flock of the file `lock` (a waiter's line in /proc/locks has `->`)."""
    inode = lock.stat().st_ino
    return len(re.findall(rf"^\d+:\s+-> FLOCK .* [0-9a-f]+:[0-9a-f]+:{inode} ", Path("/proc/locks").read_text(), re.M))


@pytest.mark.slow
def test_two_configs_given_one_study_name_at_once_one_is_refused_and_the_other_study_untouched(tmp_path):
    """Two commands, two configs, one `optimize.study_name`, both past their check before either made the study
    (the storage's lock held until both wait for it, then let go): exactly one is refused with exit code 2 and its
    one line, and the study is the other's alone (both used to pass, and one then died in a traceback, `'4x1' not in
    (...)`, leaving a FAIL trial in the other's study)."""
    (tmp_path / "mlruns").mkdir()
    lock = tmp_path / "mlruns" / "optuna.db.lock"
    args = [*SHORT, "mem_cap=4GiB", "optimize.trials=1", "optimize.confirm=never", "optimize.study_name=shared"]
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        procs = {
            e: start_cli(*args, f"batch.effective={e}", cwd=tmp_path, module="pipeline.optimize", stderr=PIPE)
            for e in (2, 4)
        }
        alive = lambda: all(p.poll() is None for p in procs.values())  # noqa: E731
        wait_until(lambda: _waiting_for(lock) == 2, 300, "both commands waiting to open the study", alive=alive)
    outputs = {e: p.communicate(timeout=600) for e, p in procs.items()}
    codes = {e: p.returncode for e, p in procs.items()}
    assert sorted(codes.values()) == [0, 2], outputs
    (refused,) = [e for e, code in codes.items() if code == 2]
    (kept,) = [e for e, code in codes.items() if code == 0]
    assert re.fullmatch(
        rf"error: optimize.study_name: 'shared' is the study of another config \(tiny-e{kept}-cap4GiB-\w{{8}}; this "
        rf"command's is tiny-e{refused}-cap4GiB-\w{{8}}\); accepted: .*\n",
        outputs[refused][1],
    ), outputs[refused]
    study = the_study(_storage(tmp_path))
    assert study.user_attrs["identity"].startswith(f"tiny-e{kept}-")
    labelled = [t for t in study.trials if "label" in t.user_attrs]
    assert labelled and all(t.state is not TrialState.FAIL for t in study.trials)
    assert {t.user_attrs["label"].split()[1] for t in labelled} <= {f"{m}x{kept // m}" for m in (1, 2, 4) if m <= kept}
    owners = {r.data.tags["owner"].split(":")[1] for r in mlflow_runs(tmp_path)}
    assert owners == {str(procs[kept].pid)}


@pytest.mark.slow
def test_a_baseline_over_the_cap_is_measured_for_its_speed_and_paired_with_the_answer(tmp_path):
    """The README's CPU study with the command line's split at 8x1, which needs more than the cap: it is measured
    uncapped in full (infeasible, no answer), and the answer's claim comes from pairs with it."""
    workload = ["batch.effective=8", "batch.split=8x1", "model.vocab_size=2048", "train.max_length=256"]
    # 8x1 peaks at 0.60-0.62 GiB, 1x8 at 0.46 (the README's cap, 0.6, is too near 8x1's need to be over it always)
    proc, study = _study_to_its_end(tmp_path, "mem_cap=0.56GiB", "optimize.trials=4", *workload)
    (base,) = [t for t in study.trials if t.user_attrs.get("role") == Role.BASELINE]
    assert base.user_attrs["status"] == "ok" and base.user_attrs["feasible"] is False, base.user_attrs
    assert len(base.user_attrs["step_times"]) == 5  # every steady step: measured in full, not stopped at the cap
    assert "best feasible: tiny 8x1" not in proc.stdout
    rounds = re.search(r"^confirmation round: (\d+) rounds .*tiny 8x1 \(baseline\)", proc.stdout, re.M)
    assert rounds and int(rounds[1]) >= 3, proc.stdout[-3000:]
    claim = _claim(proc.stdout)
    assert claim["figure"] or "paired rounds could not tell them apart" in claim["why"] or "equal within" in claim[0]
    # said: the baseline cannot run under the cap; and the answer against what can, from the same pairs
    assert "; the baseline (tiny 8x1) does not fit under the cap (0." in claim[0], claim[0]
    fitting = re.search(r"^  against what fits: (.+)$", proc.stdout, re.M)
    assert fitting, proc.stdout[-3000:]
    figure = re.match(r"\d+\.\d\dx the tokens/s of (tiny \S+) \[(\d+\.\d+), (\d+\.\d+)\]", fitting[1])
    if figure:  # a figure only where its interval excludes 1
        assert float(figure[2]) > 1 or float(figure[3]) < 1, fitting[1]
    else:
        assert fitting[1].startswith(("no speed-up over tiny ", "no other config that fits")), fitting[1]


@pytest.mark.slow
def test_one_finalist_besides_the_baseline_still_buys_three_rounds_and_never_prints_an_empty_interval(tmp_path):
    proc, _ = _study_to_its_end(
        tmp_path, "mem_cap=4GiB", "optimize.trials=3", "optimize.confirm_k=1", "optimize.confirm_share=0.01"
    )
    claim = _claim(proc.stdout)
    if claim["figure"]:
        assert int(claim["rounds"]) >= 3
        low, high = (float(x) for x in re.search(r"\[(\d+\.\d+), (\d+\.\d+)\]", claim["figure"]).groups())
        assert low > 1 or high < 1  # a figure only where its interval excludes 1
    else:
        said = re.fullmatch(
            r"(\d+) paired rounds (could not tell them apart \(within (±\d+%|[\d.]+x) either way\)|found them equal "
            r"within ±\d+%)",
            claim["why"],
        )
        assert claim["why"].startswith("the baseline itself") or (said and int(said[1]) >= 3), claim["why"]


@pytest.mark.slow
def test_a_knob_that_fails_at_run_time_is_decided_once_and_kept_out_of_the_predictor(tmp_path):
    """Adapters on a module the model does not have: PEFT refuses it inside the trainer, for every split. Each such
    config fails once, counts against the budget, is never run again, and its peak is no predictor error."""
    space = "++optimize.space={lora.target_modules:[[q_proj],[no_such_module]]}"
    proc, study = _study_to_its_end(tmp_path, "mem_cap=4GiB", "batch.effective=2", "optimize.trials=4", space)
    labelled = [t for t in study.trials if "label" in t.user_attrs]
    failed = [t for t in labelled if t.user_attrs.get("status") == "failed"]
    assert sorted(t.user_attrs["label"].split()[1] for t in failed) == ["1x2", "2x1"]
    assert all("no_such_module" in t.user_attrs["label"] and t.state is TrialState.FAIL for t in failed)
    assert len({t.user_attrs["config_id"] for t in labelled}) == len(labelled)  # none measured twice
    assert len(set(re.findall(r"^\[job\] trial (\d+):", proc.stdout, re.M))) == len(labelled)
    errors = re.search(r"memory predictor error: .* over (\d+) trials", proc.stdout)
    assert errors and int(errors[1]) == len(labelled) - len(failed)
    assert "failed as jobs (each decided once, not run again): tiny " in proc.stdout
    assert len(re.findall(r"^\[job\] trial \d+: .*: failed: .*; its output in \S+job.log$", proc.stdout, re.M)) == 2
    assert "Traceback" not in proc.stdout + proc.stderr  # the trial's line names its log; the console stays short
    _claim(proc.stdout)


RUN_AS_PAGES = ("README.md", "docs/getting-started.md")  # every command of these runs in tests/test_docs.py


def _study_commands(pages: list[Path]) -> set[str]:
    text = "\n".join(p.read_text(encoding="utf-8") for p in pages)
    found = set()
    for lang, block in re.findall(r"^```(\w*)\n(.*?)^```", text, re.S | re.M):
        if lang not in ("", "console"):
            continue
        for line in block.splitlines():
            command = line.removeprefix("$ ").split("#")[0].strip()
            if not command.startswith("python -m pipeline.optimize ") or command.endswith("\\"):
                continue
            if re.search(r"gpu=|experiment=|model=qwen|torchrun|postgresql|nonexistent", command) or "(GPU)" in line:
                continue
            found.add(command)
    return found


def readme_studies() -> list[str]:
    """Every `python -m pipeline.optimize` example of the docs that the CPU runs as written: not one of a GPU (a card
    profile, a hub-size model, the seed's experiment, several ranks), of a shared store, or of bad input; nor one
    that the README or Getting started shows, which tests/test_docs.py runs with those pages."""
    docs = _study_commands(sorted((REPO / "docs").glob("*.md")))
    return sorted(docs - _study_commands([REPO / page for page in RUN_AS_PAGES]))


def test_the_docs_have_cpu_sized_study_examples_beside_those_the_pages_test_runs():
    assert readme_studies() == ["python -m pipeline.optimize mem_cap=14GiB"]
    assert (
        "python -m pipeline.optimize mem_cap=0.57GiB optimize.trials=4 batch.effective=8 model.vocab_size=2048 "
        "train.max_length=256" in _study_commands([REPO / "docs" / "getting-started.md"])
    )


@pytest.mark.slow
@pytest.mark.parametrize("command", readme_studies())
def test_every_cpu_sized_study_of_the_readme_runs_as_written_and_states_its_claim(tmp_path, command):
    args = shlex.split(command)[3:]
    proc = _optimize(tmp_path, *args, timeout=1800)
    assert proc.returncode in (0, 3), proc.stdout[-3000:] + proc.stderr[-2000:]
    if proc.returncode == 0:
        _claim(proc.stdout)
    else:
        assert "nothing fits under" in proc.stdout
