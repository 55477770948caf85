"""bench/captured_step.py: the whole step captured by hand. The capture itself needs a GPU; here, the schedule it
fills into the captured learning rate, and the same loop run op by op as the side by side reads it."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import get_linear_schedule_with_warmup

from bench import side_by_side

BENCH = Path(__file__).resolve().parents[1] / "bench"
TINY = (
    '{"hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,'
    '"num_key_value_heads":2,"head_dim":16,"vocab_size":512}'
)


@pytest.fixture
def captured_step(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))  # the script imports its sibling random_qwen3, as run from bench/
    import captured_step

    return captured_step


def test_the_captured_learning_rate_follows_the_trainers_schedule_and_is_never_zero(captured_step):
    """The value filled into the captured step's learning rate is transformers' linear schedule with 5 warm-up
    steps (plain_trl.py's), step by step, except the first step's 0, which runs at 1e-30: a capturable AdamW turns
    a weight whose gradient is 0 into NaN at learning rate 0."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=2e-4)
    schedule = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=5, num_training_steps=30)
    expected = []
    for _ in range(30):
        expected.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    got = [captured_step.learning_rate(k, 30) for k in range(30)]
    assert expected[0] == 0.0 and got[0] == 1e-30
    assert got[1:] == pytest.approx(expected[1:], rel=1e-12)


@pytest.mark.slow
def test_the_loop_op_by_op_writes_the_record_the_side_by_side_reads(tmp_path):
    """A real run of the script on the CPU (a tiny shape): every step's loss and time, read as one figure."""
    out = tmp_path / "eager-0.json"
    subprocess.run(
        [
            sys.executable,
            str(BENCH / "captured_step.py"),
            "--device",
            "cpu",
            "--compile",
            "off",
            "--loss",
            "model",
            "--adapter-dtype",
            "fp32",
            "--split",
            "2x2",
            "--steps",
            "8",
            "--length",
            "32",
            "--shape",
            TINY,
            "--out",
            str(out),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    record = json.loads(out.read_text(encoding="utf-8"))
    assert len(record["losses"]) == 8 and len(record["step_times_s"]) == 7
    assert all(5.0 < loss < 7.0 for loss in record["losses"])  # ln(512) = 6.24: random tokens, a random model
    assert record["captured_from_step"] is None and record["model_flops_per_token"] > 0
    assert side_by_side.recorded(tmp_path, warmup=2)["eager"][0]["figure"] > 0


class Reads(TorchDispatchMode):
    """The operators that read a value back from a tensor (on a GPU each waits for the device, and none may run
    while a CUDA graph is captured)."""

    OPS = ("aten._local_scalar_dense.default", "aten.nonzero.default", "aten.masked_select.default")

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if str(func) in self.OPS:
            self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


def test_the_captured_forward_loss_and_backward_read_nothing_back(captured_step):
    """What the graph records of a micro-batch (the model's forward on full rows with its causal masks given as made,
    its loss, the backward through the adapters) reads no value back: a read there would stop the capture on a GPU.
    The CPU runs the same operators; a library that started checking a mask or a label count would show here (the
    model making its own mask checks the positions for packed rows: one read). The loss is the one the model's own
    causal mask gives."""
    args = argparse.Namespace(shape=TINY, adapter_dtype="fp32", compile="off", loss="model")
    model, params, loss_of, shape = captured_step.build(args, "cpu", torch.float32)
    ids = torch.randint(4, shape["vocab_size"], (2, 32))
    loss_of(ids).backward()  # a first call: anything done once (a lazy init) is no part of a replayed step
    reads = Reads()
    with reads:
        loss = loss_of(ids)
        loss.backward()
    assert reads.seen == []
    assert all(p.grad is not None for p in params) and 5.0 < float(loss) < 7.0
    made = model(input_ids=ids, labels=ids, use_cache=False).loss  # the causal mask made by the model itself
    assert float(loss) == pytest.approx(float(made), rel=1e-6)
