"""The knobs that capture more of the step: the LM head and loss (`train.loss`) and the optimizer step
(`train.optimizer_step`): their rules, their identity and reproduce line, and what they change in a real job."""

from __future__ import annotations

import collections
import dataclasses
import importlib.util
import shlex
import traceback

import pytest
import torch
from optuna.trial import TrialState
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import TrainerCallback

from pipeline.answer.study import reproduce
from pipeline.builders.sft_args import sft_kwargs
from pipeline.config.errors import ConfigError
from pipeline.config.identity import config_id
from pipeline.config.knobs import check_knobs
from pipeline.config.schema import typed
from pipeline.config.validate import validate
from pipeline.knobs.optimizer_step import compile_optimizer_step
from pipeline.records import Status
from pipeline.search._left_out import candidates
from pipeline.search._trials import TrialRecord
from tests.helpers.spaces import assert_every_value_runs, runnable_combinations
from tests.test_training import make_job

GRAPHS = ["experiment=seed-t4-graphs", "gpu=auto", "batch.split=4x1"]


def check_capture(train, cuda: bool) -> None:
    """The rules of the LM head and loss and of the optimizer step, on a device with CUDA or without."""
    check_knobs(train, None, None, 1, cuda, keys=("train.loss", "train.optimizer_step"))


# (overrides on the graphs answer, the device has CUDA, the start of the refusal; None: accepted)
RULES = [
    (["train.loss=model"], False, None),
    (["train.loss=compiled", "train.optimizer_step=compiled"], False, None),
    (["train.loss=liger"], True, None),
    (["train.optimizer_step=graph", "train.compile_mode=default"], True, None),
    (["train.optimizer=sgd", "train.optimizer_step=graph", "train.compile_mode=default"], True, None),
    (
        ["train.optimizer_step=graph"],
        True,
        "train.optimizer_step: graph beside CUDA-graph layers (train.compile_mode=reduce-overhead) is overwritten by "
        "their next replay; accepted with it: eager, compiled (or train.compile_mode=default)",
    ),
    (["train.loss=liger"], False, "train.loss: liger runs Triton kernels on a CUDA device; accepted on the CPU: "),
    (
        ["train.loss=compiled", "train.torch_compile=whole", "train.compile_mode=default"],
        True,
        "train.loss: compiled is part of the model that train.torch_compile=whole compiles already; accepted with "
        "whole: trl, model, liger",
    ),
    (
        ["train.optimizer_step=graph"],
        False,
        "train.optimizer_step: graph records a CUDA graph; accepted on the CPU: eager, compiled",
    ),
    (
        ["train.optimizer=adamw_torch_fused", "train.optimizer_step=compiled"],
        True,
        "train.optimizer_step: compiled compiles torch.optim's own step, not adamw_torch_fused's (the fused step is "
        "one kernel already); accepted with train.optimizer=adamw_torch_fused: eager (or train.optimizer=adamw_torch "
        "or sgd)",
    ),
    (
        ["train.optimizer=adafactor", "train.optimizer_step=graph"],
        True,
        "train.optimizer_step: graph compiles torch.optim's own step, not adafactor's; accepted with "
        "train.optimizer=adafactor: eager",
    ),
]


@pytest.mark.parametrize(
    ("override", "refused"),
    [
        ("train.loss=fused", "train.loss: got 'fused'; accepted: trl, model, compiled, liger"),
        ("train.optimizer_step=cuda", "train.optimizer_step: got 'cuda'; accepted: eager, compiled, graph"),
    ],
)
def test_a_capture_knob_outside_the_schemas_choices_is_refused_with_them(override, refused, compose):
    with pytest.raises(ConfigError) as err:
        validate(compose(override))
    assert str(err.value) == refused


@pytest.mark.parametrize(("overrides", "cuda", "refused"), RULES, ids=[" ".join(o) + f" cuda={c}" for o, c, _ in RULES])
def test_capture_rules(monkeypatch, overrides, cuda, refused, compose):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())  # every package installed
    train = compose(*GRAPHS, *overrides).train
    if refused is None:
        check_capture(train, cuda)
        return
    with pytest.raises(ConfigError) as error:
        check_capture(train, cuda)
    assert str(error.value).startswith(refused), str(error.value)
    assert "\n" not in str(error.value)


def test_liger_needs_its_package(monkeypatch, compose):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "liger_kernel" else object())
    with pytest.raises(ConfigError, match=r"^train.loss: liger needs the liger-kernel package \(pip install"):
        check_capture(compose("train.loss=liger").train, True)


def test_each_knob_is_part_of_the_identity_the_name_and_the_reproduce_line(cfg, compose):
    base = config_id(cfg)
    ids = {
        value: config_id(compose(value))
        for value in ("train.loss=model", "train.loss=compiled", "train.optimizer_step=compiled")
    }
    assert len({base, *ids.values()}) == 4
    command = ["mem_cap=1GiB", "++optimize.space={train.loss:[trl,model],train.optimizer_step:[eager,compiled]}"]
    valid, _ = candidates(compose(*command))
    chosen = next(
        c
        for c in valid
        if c.split == "4x1" and c.params["train.loss"] == "model" and c.params["train.optimizer_step"] == "compiled"
    )
    assert chosen.label == "tiny 4x1 loss=model optim_step=compiled"
    line = reproduce(command, TrialRecord(number=0, state=TrialState.COMPLETE, overrides=tuple(chosen.overrides)))
    assert line == (
        "python -m pipeline.train mem_cap=1GiB batch.split=4x1 train.loss=model train.optimizer_step=compiled"
    )
    assert config_id(compose(*shlex.split(line)[3:])) == chosen.config_id


def test_only_trl_keeps_the_nan_filter(cfg):
    train = typed(cfg).train
    assert sft_kwargs(4, 1, train, "fp32", "cpu")["logging_nan_inf_filter"] is True
    for loss in ("model", "compiled", "liger"):
        assert (
            sft_kwargs(4, 1, dataclasses.replace(train, loss=loss), "bf16", "cuda")["logging_nan_inf_filter"] is False
        )


class Reads(TorchDispatchMode):
    """Counts the values read back from tensors (`.item()`, `bool()`, a boolean index) while `on`, by the library
    asking (the innermost caller outside torch)."""

    OPS = ("aten._local_scalar_dense.default", "aten.nonzero.default", "aten.masked_select.default")

    def __init__(self) -> None:
        super().__init__()
        self.by_file: collections.Counter = collections.Counter()
        self.on = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.on and str(func) in self.OPS:
            library = [
                f.filename.split("site-packages/")[1]
                for f in traceback.extract_stack()
                if "site-packages/" in f.filename
            ]
            self.by_file[next(name for name in reversed(library) if not name.startswith("torch/")).split("/")[0]] += 1
        return func(*args, **(kwargs or {}))


class Window(TrainerCallback):
    """Turns the counter on for one optimizer step (the third: past the first step's one-off costs)."""

    def __init__(self, reads: Reads) -> None:
        self.reads = reads

    def on_step_begin(self, args, state, control, **kwargs):
        self.reads.on = state.global_step == 2

    def on_step_end(self, args, state, control, **kwargs):
        self.reads.on = False


def losses_and_reads(tmp_path, loss: str) -> tuple[list[float], collections.Counter]:
    """A real job's losses, and what its third step read back (forward, loss, backward, the Trainer's loop)."""
    job = make_job(tmp_path / loss, "batch.split=2x2", f"train.loss={loss}")
    job._setup_device()
    job._setup_model()
    job._setup_data()
    job._setup_trainer()
    job._setup_compile()
    reads = Reads()
    job.trainer.add_callback(Window(reads))
    with reads:
        assert job._train() is None
    return [s.loss for s in job.meter.steps], reads.by_file


def test_the_models_loss_trains_trls_losses_without_reading_the_device(tmp_path):
    """`train.loss=model`: the same losses as TRL's own; TRL's metrics read five values per micro-batch on the CPU
    (seven with a CUDA device's boolean-mask indexing), the model's loss none of TRL's, and without the NaN filter
    the Trainer's loop reads none either (the model's own check of the attention mask stays)."""
    trl_losses, trl_reads = losses_and_reads(tmp_path, "trl")
    model_losses, model_reads = losses_and_reads(tmp_path, "model")
    assert max(abs(a - b) / abs(b) for a, b in zip(model_losses, trl_losses, strict=True)) <= 1e-6
    assert trl_reads["trl"] == 2 * 5 and model_reads["trl"] == 0, (trl_reads, model_reads)  # 2 micro-batches
    assert trl_reads["transformers"] - model_reads["transformers"] == 2 * 2, (trl_reads, model_reads)


@pytest.mark.slow
def test_a_compiled_adamw_step_at_learning_rate_zero_keeps_weights_with_zero_gradients():
    """pytorch/pytorch#126514 as it is here: capturable AdamW divides by the learning rate, so a step at 0 turns a
    weight whose gradient is 0 into NaN; the job's compiled step runs such a step at 1e-30 and changes nothing."""

    class Holder:  # what compile_optimizer_step uses of a trainer
        def __init__(self, optimizer):
            self.optimizer = optimizer

        def create_optimizer(self):
            return self.optimizer

    def one_step(wrapped: bool) -> torch.Tensor:
        torch._dynamo.reset()
        weight = torch.nn.Parameter(torch.ones(4, 4))
        optimizer = torch.optim.AdamW([weight], lr=0.0, weight_decay=0.0)
        step = optimizer.step
        if wrapped:
            compile_optimizer_step(Holder(optimizer), "compiled")
            step = optimizer.step
        else:
            step = torch.compile(optimizer.step)
        weight.grad = torch.zeros_like(weight)
        step()
        return weight.detach()

    assert torch.isnan(one_step(wrapped=False)).all()  # the bug, unwrapped
    assert torch.equal(one_step(wrapped=True), torch.ones(4, 4))


@pytest.mark.slow
def test_a_compiled_step_and_loss_train_the_eager_losses(tmp_path):
    """Real jobs on the CPU: the optimizer step and the cross-entropy compiled give the eager job's losses, with one
    graph for the optimizer step whatever the learning rate does (a tensor: no recompilation per step)."""
    eager = make_job(tmp_path / "eager", "batch.split=4x1").run()
    compiled = make_job(
        tmp_path / "compiled", "batch.split=4x1", "train.loss=compiled", "train.optimizer_step=compiled"
    ).run()
    assert eager.status is Status.OK and compiled.status is Status.OK, compiled.traceback
    ours, theirs = [s.loss for s in compiled.steps], [s.loss for s in eager.steps]
    assert max(abs(a - b) / abs(b) for a, b in zip(ours, theirs, strict=True)) <= 1e-4, (ours, theirs)
    assert compiled.compile_note.startswith("loss compiled, optimizer step compiled: "), compiled.compile_note
    assert sum(s.compile_s > 0 for s in compiled.steps) <= 2  # the first step compiles; no step after the second


def test_every_value_of_the_capture_study_runs_on_a_cuda_device(monkeypatch, compose):
    """conf/optimize/capture.yaml on the graphs answer: the fused optimizer's compiled step is left out, and every
    value is in a combination that runs (3 losses x (AdamW eager or compiled, fused AdamW eager))."""
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())
    cfg = compose(*GRAPHS, "optimize=capture")
    space = dict(cfg.optimize.space)
    valid = runnable_combinations(space, cfg.train, lambda train, _: check_capture(train, True))
    assert len(valid) == 9
    assert_every_value_runs(space, valid)
