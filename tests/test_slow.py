"""Why a config is slow (`answer.slow`): the step's growth per micro-batch at the same tokens, said host-bound only
where the device was measured idle."""

from __future__ import annotations

import re

from optuna.trial import TrialState

from pipeline.answer import slow
from pipeline.answer.table import format_trials
from pipeline.records import Status
from pipeline.search._trials import Profile, TrialRecord
from pipeline.summaries import Interval

# Qwen3-0.6B on variable-length chats, one H200, padding-free (the figures of the issue that asked for this): a
# micro-batch costs about 0.33 s whatever its size
STEPS = {"1x8": 2.78, "2x4": 1.45, "4x2": 0.80, "8x1": 0.49}
BUSY = {"1x8": 0.12, "2x4": 0.2, "4x2": 0.35, "8x1": 0.6}


def _record(number: int, split: str, step: float, busy: float | None = None, **more) -> TrialRecord:
    return TrialRecord(
        number=number,
        state=TrialState.COMPLETE,
        label=f"qwen3-0.6b {split} padding=padding_free",
        config_id=split,
        overrides=(f"batch.split={split}", "train.padding=padding_free"),
        status=Status.OK,
        median=step,
        ci=Interval(step * 0.97, step * 1.03, 0.95),
        feasible=True,
        gpu_busy=busy,
        **more,
    )


def _study(busy: bool) -> list[TrialRecord]:
    return [_record(i, s, t, BUSY[s] if busy else None) for i, (s, t) in enumerate(STEPS.items())]


def test_a_step_that_grows_with_its_micro_batches_is_bound_by_their_cost():
    records = _study(busy=True)
    costs = slow.micro_costs(records)
    (cost,) = costs.values()
    assert 0.30 < cost.seconds < 0.35 and cost.splits == 4
    notes = {r.label.split()[1]: slow.note(r, costs, 0.5) for r in records}
    assert notes["1x8"] == f"host-bound: {cost.seconds:.2f} s per micro-batch"
    # 8x1 pays it once, and that is still most of its 0.49 s, but its GPU was busy 60%: not said host-bound
    assert notes["8x1"] == f"{cost.seconds:.2f} s per micro-batch whatever its size"
    table = format_trials(records, 0.95, records[0], 0.5)
    assert f"host-bound: {cost.seconds:.2f} s per micro-batch" in table.splitlines()[-1]  # 1x8, the slowest, last
    lines = slow.lines(records[3], records[0], records, 0.5)
    assert lines[0] == "where the step goes:"
    assert lines[1].startswith(
        f"  baseline qwen3-0.6b 1x8 padding=padding_free: 2.780 s a step = 8 micro-batches x {cost.seconds:.3f} s"
    )
    assert "GPU busy 12%" in lines[1] and "host-bound" in lines[1]
    assert lines[2].startswith("  answer qwen3-0.6b 8x1 padding=padding_free: 0.490 s a step = 1 micro-batch x")
    assert "GPU busy 60%" in lines[2] and "host-bound" not in lines[2] and "whatever its size" in lines[2]


def test_without_a_device_measured_idle_no_host_bound_is_said():
    """On the CPU (no NVML), the cost per micro-batch is measured, what waits on what is not."""
    records = _study(busy=False)
    costs = slow.micro_costs(records)
    (cost,) = costs.values()
    assert slow.note(records[0], costs, 0.5) == f"{cost.seconds:.2f} s per micro-batch whatever its size"
    profiled = _record(9, "1x8", 2.78, profile=Profile(host_ms=2780.0, device_ms=210.0, launches_per_step=45000))
    assert slow.note(profiled, costs, 0.5).startswith("host-bound")
    assert "profile: device 0.210 s, host 2.780 s, 45,000 launches a step" in slow.step_line("b", profiled, costs, 0.5)


def test_a_step_that_does_not_grow_with_its_micro_batches_has_no_such_cost():
    """Step times within the runs' own noise of each other: no cost per micro-batch, no note, no line."""
    records = [_record(i, s, 1.0 + 0.01 * i) for i, s in enumerate(STEPS)]
    assert slow.micro_costs(records) == {}
    assert slow.lines(records[3], records[0], records, 0.5) == []


def test_the_parts_of_a_step_add_up_to_it_as_printed_where_a_micro_batch_costs_milliseconds():
    """Seen on the tiny model: `0.082 s a step = 8 micro-batches x 0.003 s + 0.060 s`, which reads 0.084. A
    micro-batch's cost is shown to three significant digits, and the step and the rest to the same places."""
    steps = {"1x8": 0.0822, "2x4": 0.0711, "4x2": 0.0652, "8x1": 0.0619}  # 2.7 ms a micro-batch, about
    records = [_record(i, s, t) for i, (s, t) in enumerate(steps.items())]
    costs = slow.micro_costs(records)
    for record in records:
        line = slow.step_line("config", record, costs, 0.5, named=False)
        found = re.match(r"config: ([\d.]+) s a step = (\d+) micro-batch(?:es)? x ([\d.]+) s \+ ([\d.]+) s", line)
        step, count, cost, rest = found.groups()
        assert len(cost.split(".")[1]) == 5 and len(step.split(".")[1]) == 5, line
        unit = 10**-5
        assert abs(int(count) * float(cost) + float(rest) - float(step)) <= (int(count) + 1) * unit / 2, line


def test_a_cost_of_milliseconds_a_micro_batch_is_not_noted_as_zero():
    """The note beside a config bound by its micro-batches read `0.00 s per micro-batch` at 4 ms."""
    steps = {"1x8": 0.050, "2x4": 0.036, "4x2": 0.029, "8x1": 0.0255}  # 3.5 ms a micro-batch, most of 1x8's step
    records = [_record(i, s, t) for i, (s, t) in enumerate(steps.items())]
    costs = slow.micro_costs(records)
    said = slow.note(records[0], costs, 0.5)
    assert re.fullmatch(r"0\.00[34]\d s per micro-batch whatever its size", said), said
