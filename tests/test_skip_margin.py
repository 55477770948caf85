"""A config predicted within the memory predictor's own error of the cap is measured, not skipped: the study's skip
margin is the largest error the predictor made over the trials measured so far, never below `optimize.skip_margin`."""

from __future__ import annotations

import dataclasses

import optuna
import pytest

from pipeline.records import GIB, Status
from pipeline.search import _trials as trials


def _study(tmp_path) -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(study_name="s", storage=f"sqlite:///{tmp_path / 'optuna.db'}")


def _measured(study: optuna.Study, predicted: float | None, peak: float | None, status: Status) -> None:
    trial = study.ask()
    trials.write(trial, {trials.PREDICTED: predicted, trials.PEAK: peak, trials.STATUS: status})
    study.tell(trial, 1.0)


def test_the_skip_margin_is_the_predictors_largest_error_so_far(tmp_path):
    """fastest-h200-fixed, seed 1: `loss=model` beside CUDA graphs predicted 11.23 GiB, measured 13.33 (15.7%)."""
    study = _study(tmp_path)
    assert trials.skip_margin(study, 0.1) == 0.1  # nothing measured: the configured margin
    _measured(study, 9.62, 9.602, Status.OK)  # 0.2%: under the configured margin, which stays
    assert trials.skip_margin(study, 0.1) == 0.1
    _measured(study, 11.227, 13.326, Status.OK)
    _measured(study, 12.0, 14.5, Status.OOM)  # ran out of memory: its peak is a lower bound, no error
    _measured(study, None, None, Status.SKIPPED)  # skipped: nothing measured
    assert trials.skip_margin(study, 0.1) == pytest.approx((13.326 - 11.227) / 13.326)
    assert trials.skip_margin(study, 0.5) == 0.5  # never below the configured one


def test_a_config_predicted_within_the_predictors_error_of_the_cap_is_measured(tmp_path):
    study = _study(tmp_path)
    cap = 14 * GIB
    _measured(study, 11.227, 13.326, Status.OK)  # the predictor was 15.7% off in this study
    margin = trials.skip_margin(study, 0.1)
    assert not trials.skipped(15.9 * GIB, cap, margin)  # 13.6% over the cap, within the predictor's error: measured
    assert trials.skipped(16.5 * GIB, cap, margin)  # 17.9% over: skipped
    assert trials.skipped(15.9 * GIB, cap, 0.1)  # what the configured margin alone would have skipped


def test_a_config_over_the_cap_only_by_what_a_process_may_keep_unused_is_measured():
    """grid-small on an H100 (BENCHMARKS.md): the compiled loss under CUDA graphs at 8x1 (8,192 tokens of a
    151,936-entry vocabulary) was predicted 23.41 GiB from peaks that held one fp32 copy of the logits unused, and ran
    at 19.02 GiB under a 20 GiB cap in every process: taken off, the prediction is under the cap, so it is measured."""
    cap, slack = 20 * GIB, 8 * 1024 * 151_936 * 4.0
    assert trials.skipped(23.41 * GIB, cap, 0.1)  # 17% over: skipped on the prediction alone
    assert not trials.skipped(23.41 * GIB, cap, 0.1, slack)  # 18.77 GiB without the slack: measured
    assert trials.skipped(27.5 * GIB, cap, 0.1, slack)  # still over without it (the model's loss at 8x1): skipped


def test_the_study_takes_a_configs_slack_off_its_prediction_under_cuda_graphs_on_a_gpu_only(
    tmp_path, monkeypatch, compose
):
    """The slack a study takes off (`StudyContext.slack_bytes`): one fp32 copy of the longest micro-batch's logits
    (its tokens times the vocabulary times 4 bytes) beside a loss that builds them under the cached allocator, where
    processes kept none under a cap: under CUDA graphs (3 of 3 fit). Without them it is still what a process may keep
    (the answer's line names it), but 2 of 3 capped processes, and the chats study's Liger kernels beside the compiled
    loss, ran out of memory asking for it, so it is not taken off. None beside TRL's loss, or on the CPU."""
    from types import SimpleNamespace

    from pipeline import knobs
    from pipeline.config.validate import validate
    from pipeline.search import _opening
    from pipeline.search._opening import StudyContext

    monkeypatch.chdir(tmp_path)
    cfg = compose(
        "mem_cap=1GiB", "batch.effective=4", "++optimize.space={batch.split:[2x2,4x1],train.loss:[trl,compiled]}"
    )
    ctx = StudyContext.open(cfg, [], validate(cfg).cap_bytes)
    assert all(ctx.slack(c) is None and ctx.slack_bytes(c) == 0.0 for c in ctx.valid)  # the CPU
    monkeypatch.setattr(_opening, "setting_of", lambda *a: SimpleNamespace(cuda=True))
    ctx = StudyContext.open(cfg, [], validate(cfg).cap_bytes)  # the same study, on a machine with a CUDA device
    by = {(c.params["batch.split"], c.params["train.loss"]): c for c in ctx.valid}
    tokens, vocab = 4 * cfg.train.max_length, cfg.model.vocab_size  # 4x1: four rows of max_length
    assert ctx.slack(by[("4x1", "compiled")])[1] == tokens and ctx.slack(by[("2x2", "compiled")])[1] == tokens / 2
    assert ctx.slack_bytes(by[("4x1", "compiled")]) == 0.0  # eager layers: not taken off
    assert ctx.slack(by[("4x1", "trl")]) is None and ctx.slack_bytes(by[("4x1", "trl")]) == 0.0
    graphed = [
        ("train.loss", "compiled"),
        ("train.torch_compile", "regional"),
        ("train.compile_mode", "reduce-overhead"),
    ]
    assert knobs.slack(graphed).capped_fit and knobs.slack(graphed).bytes_on(tokens, vocab) == tokens * vocab * 4.0
    assert not knobs.slack(graphed[:2]).capped_fit  # compiled layers without CUDA graphs
    assert not knobs.slack([("train.loss", "compiled"), ("train.liger_kernel", True)]).capped_fit  # the chats' trial 11
    # the same configs with compiled layers under CUDA graphs, as the predictor's knobs hold them (the CPU refuses
    # the mode, so the study's own candidates cannot hold it here): the compile choice is one of the formula's fields
    knobs_of = ctx.knobs
    graphs = ("train.compile_mode", "reduce-overhead")
    monkeypatch.setattr(
        ctx, "knobs", lambda c: dataclasses.replace(knobs_of(c), compile="regional", other=(*knobs_of(c).other, graphs))
    )
    assert ctx.slack_bytes(by[("4x1", "compiled")]) == tokens * vocab * 4.0
    assert ctx.slack_bytes(by[("2x2", "compiled")]) == tokens / 2 * vocab * 4.0
    assert ctx.slack_bytes(by[("4x1", "trl")]) == 0.0
