"""The world size as a searched key: the candidates of a space over world sizes, the sweep that keeps the splits
whose product is the effective batch, world sizes the machine cannot give refused up front, what the ranks agree on
at a step's end (real gloo processes), the finalists and the answer over world sizes."""

from __future__ import annotations

import json

import pytest
from optuna.trial import TrialState

from pipeline.answer.scaling import world_lines
from pipeline.config.devices import cpu_cores
from pipeline.config.errors import ConfigError
from pipeline.config.plan import plan_sweep
from pipeline.jobs import ranks
from pipeline.records import Status
from pipeline.search import _confirmation as confirmation
from pipeline.search._confirmation import ConfirmationRecord
from pipeline.search._confirmation.plan import ConfirmationRound
from pipeline.search._left_out import check_values
from pipeline.search._space import combinations, knob_space
from pipeline.search._trials import Role, TrialRecord
from tests.helpers.cli import run_cli
from tests.helpers.gloo import on_ranks
from tests.helpers.settings import confirm_settings

TWO_RANKS = pytest.mark.skipif(cpu_cores() < 2, reason="two ranks on the CPU need two cores")
WORLD = ["launcher.kind=torchrun", "gpu=cpu", "++optimize.space={world_size:[1,2]}"]


@TWO_RANKS
def test_candidates_are_every_split_and_world_size_whose_product_is_the_effective_batch(compose):
    cfg = compose(*WORLD, "batch.effective=4")
    space = knob_space(cfg)
    assert space["batch.split"] == ["1x2", "1x4", "2x1", "2x2", "4x1"]  # both world sizes' splits, by micro-batch
    valid, invalid = combinations(cfg)
    pairs = sorted((c.split, c.config.world_size) for c in valid)
    assert pairs == [("1x2", 2), ("1x4", 1), ("2x1", 2), ("2x2", 1), ("4x1", 1)]
    assert all(c.config.batch.effective == 4 for c in valid)
    assert {c.label for c in valid} >= {"tiny 2x1 ws=2", "tiny 4x1 ws=1"}
    assert len({c.config_id for c in valid}) == 5  # the world size is part of the identity
    assert "gives 8, not batch.effective 4" in invalid["batch.split=4x1 world_size=2"]
    check_values(cfg)  # every value runs in some combination


def test_a_world_size_beyond_the_devices_present_is_refused_with_the_accepted_form(tmp_path, compose):
    cores = cpu_cores()
    space = f"++optimize.space={{world_size:[1,{cores + 1}]}}"
    cfg = compose("launcher.kind=torchrun", "gpu=cpu", f"batch.effective={cores + 1}", space)
    with pytest.raises(ConfigError) as err:
        check_values(cfg)
    assert str(err.value).startswith(f"optimize.space.world_size: value '{cores + 1}' cannot run: world_size: ")
    assert str(err.value).endswith(
        f"on the CPU need a core each, and this process may use {cores}; accepted here: 1 to {cores}"
    )
    # the same through the command line: exit code 2, one line, nothing written
    proc = run_cli(
        "launcher.kind=torchrun",
        "gpu=cpu",
        f"world_size={cores + 1}",
        f"batch.effective={cores + 1}",
        "batch.split=1x1",
        cwd=tmp_path,
    )
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert proc.stderr.splitlines() == [
        f"error: world_size: {cores + 1} ranks on the CPU need a core each, and this process may use {cores}; "
        f"accepted here: 1 to {cores}"
    ]
    assert list(tmp_path.iterdir()) == []


def test_a_space_of_world_sizes_that_are_no_whole_numbers_is_refused(tmp_path):
    proc = run_cli(
        "launcher.kind=torchrun",
        "++optimize.space={world_size:[1,two]}",
        "mem_cap=1GiB",
        cwd=tmp_path,
        module="pipeline.optimize",
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        "error: optimize.space.world_size: got [1, 'two']; accepted: a list of whole numbers >= 1 (ranks of one job, "
        "a device each), e.g. [1, 2]"
    ]
    assert list(tmp_path.iterdir()) == []


@TWO_RANKS
def test_a_sweep_over_world_sizes_keeps_the_splits_that_make_the_effective_batch():
    overrides = ["launcher.kind=torchrun", "gpu=cpu", "world_size=1,2", "batch.split=1x4,2x2,4x1,1x2,2x1"]
    plan = plan_sweep("config", overrides, multirun=True)
    assert sorted((c.batch.split, c.world_size) for c in plan.configs) == [
        ("1x2", 2),
        ("1x4", 1),
        ("2x1", 2),
        ("2x2", 1),
        ("4x1", 1),
    ]
    assert plan.left_out == [
        "1x2 x world_size 1",
        "2x1 x world_size 1",
        "1x4 x world_size 2",
        "2x2 x world_size 2",
        "4x1 x world_size 2",
    ]
    # without a world-size sweep a split that does not make the effective batch is still bad input
    with pytest.raises(ConfigError, match=r"^batch.split: '1x2' x world_size 1 gives 2"):
        plan_sweep("config", ["batch.split=1x4,1x2"], multirun=True)
    # and a world size that keeps no job is refused, not silently dropped
    with pytest.raises(ConfigError, match=r"^world_size: 2 has no split in this sweep: '1x4' x world_size 2 gives 8"):
        plan_sweep("config", ["launcher.kind=torchrun", "gpu=cpu", "world_size=1,2", "batch.split=1x4,2x2"], True)


def _exchange_on(rank: int) -> dict:
    """Rank 0 asks for nothing, rank 1 is over the cap: both must stop, with the step's peak the largest."""
    from pipeline.measure.collective import exchange

    seen = exchange(peak=1000 + rank, tokens=10, padded_tokens=12, samples=2, stop=Status.OVER_CAP if rank else None)
    return {
        "peaks": list(seen.peaks),
        "tokens": seen.tokens,
        "padded": seen.padded_tokens,
        "samples": seen.samples,
        "stop": seen.stop,
    }


@pytest.mark.slow
@TWO_RANKS
def test_the_ranks_agree_to_stop_when_any_asks_and_count_the_work_of_all(tmp_path):
    seen = on_ranks(_exchange_on, 2, tmp_path)
    assert (
        seen[0]
        == seen[1]
        == {
            "peaks": [1000, 1001],
            "tokens": 20,
            "padded": 24,
            "samples": 4,
            "stop": Status.OVER_CAP.value,
        }
    )


def test_the_rank_that_failed_first_names_the_jobs_status(tmp_path):
    """A rank out of memory makes the job `oom` (a result); a crash makes it `failed`."""
    ranks.report_error(tmp_path, 1, "out of memory at step 3: CUDA out of memory", Status.OOM)
    cause = ranks.first_failure(tmp_path, 2)
    assert (cause.rank, cause.status) == (1, Status.OOM)
    assert cause.text == "rank 1 of 2 failed first: out of memory at step 3: CUDA out of memory"
    (tmp_path / ranks.RANKS_FILE).write_text(json.dumps([{"rank": 0, "pid": 7, "exitcode": -9}]), encoding="utf-8")
    killed = ranks.first_failure(tmp_path, 2)
    assert (killed.rank, killed.status) == (0, Status.FAILED) and "killed by SIGKILL" in killed.text


def _record(number: int, label: str, median: float, world_size: int, **extra) -> TrialRecord:
    return TrialRecord(
        number,
        TrialState.COMPLETE,
        label=label,
        median=median,
        status=Status.OK,
        feasible=True,
        world_size=world_size,
        **extra,
    )


def test_the_finalists_include_the_best_of_every_other_world_size():
    best = _record(1, "4x1 ws=2", 0.10, 2)
    near = _record(2, "2x2 ws=2", 0.11, 2)
    single = _record(3, "4x1 ws=1", 0.30, 1)  # far slower: no challenger, but the answer's reference on one device
    base = _record(0, "1x4 ws=1", 0.50, 1, role=Role.BASELINE)
    chosen = confirmation.choose([near, single, best, base], base, confirm_settings(k=2))
    assert [r.label for r in chosen] == ["4x1 ws=2", "1x4 ws=1", "4x1 ws=1"]
    alone = [_record(1, "4x1", 0.1, 1), _record(2, "2x2", 0.5, 1)]
    assert [
        r.label for r in confirmation.choose(alone, None, confirm_settings())
    ] == []  # nothing within 30%: as before


def _round(medians: dict[str, list[float]]) -> ConfirmationRecord:
    state = ConfirmationRound(
        list(medians), 0.95, 0.05, {name: dict(enumerate(values)) for name, values in medians.items()}, 10.0, []
    )
    return ConfirmationRecord(state, warmup=1, steps=5, budget_s=60.0, baseline=None)


def test_the_answer_on_two_gpus_states_its_paired_speedup_and_scaling_against_one():
    two = _record(1, "4x1 ws=2", 0.20, 2)
    one = _record(2, "4x1 ws=1", 0.36, 1)
    paired = _round({"4x1 ws=2": [0.20, 0.21, 0.19, 0.20], "4x1 ws=1": [0.36, 0.38, 0.34, 0.37]})
    lines, scaling = world_lines(two, [two, one], paired, "cuda", [two, one])
    assert lines[0] == "  uses 2 GPUs (world_size=2)"
    assert 1.7 < scaling.comparison.speedup < 1.9 and scaling.comparison.rounds == 4
    value, low, high = scaling.efficiency
    assert value == pytest.approx(scaling.comparison.speedup / 2) and low < value < high
    assert lines[1].startswith("  1.8") and "the tokens/s of the best on 1 GPU, 4x1 ws=1 [" in lines[1]
    assert "paired over 4 rounds): scaling efficiency 9" in lines[1] and "(tokens/s on 2 GPUs over 2x" in lines[1]
    # a ratio of two runs measured apart is never claimed
    lines, scaling = world_lines(two, [two, one], None, "cuda", [two, one])
    assert scaling is None
    assert lines[1] == "  no speed-up over 1 GPU (4x1 ws=1) is claimed: the confirmation round is off"


def test_the_answer_on_one_device_says_how_the_other_world_sizes_fared():
    one = _record(1, "4x1 ws=1", 0.03, 1)
    two = _record(2, "2x1 ws=2", 0.05, 2)
    pruned = TrialRecord(3, TrialState.PRUNED, label="1x2 ws=2", status=Status.PRUNED, world_size=2)
    paired = _round({"4x1 ws=1": [0.03, 0.031, 0.029], "2x1 ws=2": [0.05, 0.052, 0.049]})
    lines, scaling = world_lines(one, [one, two], paired, "cpu", [one, two, pruned])
    assert scaling is None
    assert lines[0] == "  uses 1 process (world_size=1)"
    assert (
        lines[1].startswith("  the best on 2 processes, 2x1 ws=2: 4x1 ws=1 is 1.6")
        and "faster than 2x1 ws=2" in lines[1]
    )
    lines, _ = world_lines(one, [one], None, "cpu", [one, pruned])
    assert lines == ["  uses 1 process (world_size=1)", "  none on 2 processes is eligible (1 pruned)"]
    assert world_lines(one, [one], None, "cpu", [one]) == ([], None)  # one world size, one device: nothing to say
