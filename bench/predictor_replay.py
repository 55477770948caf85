"""Replay a study's memory predictions in the order its trials ran, each knowing only the peaks measured before it
(the probes and the earlier trials), with the predictor as it is now; print every error and the mean and max.

    python bench/predictor_replay.py bench/results/h200-2026-11-30/knobs-optuna.db model=qwen3-1.7b train.max_length=512

`train.torch_compile=True` in that study (2026-11-30) compiled the whole model: set BATCH_SPLIT_TRUE_IS=whole to
replay it so (today `true` means regional).
"""

from __future__ import annotations

import os
import sys

import optuna

from pipeline.config.compose import compose_job
from pipeline.knobs.base import Compile
from pipeline.measure.flops import Shape
from pipeline.records import GIB
from pipeline.search.calibration import FORMULA_KNOBS, Calibration
from pipeline.search.predictor import Knobs, Predictor
from pipeline.search.trials import TrialRecord


def knobs(params: dict, max_length: int) -> Knobs:
    other = tuple((k, str(v)) for k, v in params.items() if k not in FORMULA_KNOBS)
    compiled = params.get("train.torch_compile", "off")
    if str(compiled).lower() == "true":
        compiled = os.environ.get("BATCH_SPLIT_TRUE_IS", Compile.REGIONAL.value)
    return Knobs(
        int(params["batch.split"].split("x")[0]),
        max_length,
        params.get("train.dtype", "fp16"),
        bool(params.get("train.gradient_checkpointing", True)),
        other,
        Compile.of(compiled).value,
    )


def main() -> None:
    storage, overrides = f"sqlite:///{sys.argv[1]}", sys.argv[2:]
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    (name,) = [s.study_name for s in optuna.get_all_study_summaries(storage) if ":" not in s.study_name]
    study = optuna.load_study(study_name=name, storage=storage)
    cfg = compose_job("config", overrides)
    calibration = study.user_attrs["calibration"]
    predictor = Predictor(Shape.from_model(cfg.model), cfg.lora.r, list(cfg.lora.target_modules))
    predictor.scale, predictor.offset = calibration["scale"], calibration["offset"]
    measured = list(Calibration.of(calibration).probes)
    errors = []
    for trial in sorted(study.trials, key=lambda t: t.datetime_start or t.datetime_complete):
        record = TrialRecord.of(trial)
        if record.label is None or not record.peak_gib:
            continue
        k = knobs(trial.params, cfg.train.max_length)
        predictor.measured = list(measured)
        predicted = predictor.predict(k) / GIB
        error = (predicted - record.peak_gib) / record.peak_gib
        errors.append(abs(error))
        stored = record.predicted_gib
        print(
            f"{record.label:70s} measured {record.peak_gib:6.2f}  now {predicted:6.2f} ({100 * error:+5.1f}%)"
            f"  as run {stored:6.2f} ({100 * (stored - record.peak_gib) / record.peak_gib:+5.1f}%)"
        )
        measured.append((k, record.peak_gib * GIB))
    print(f"{len(errors)} trials: mean {100 * sum(errors) / len(errors):.1f}%, max {100 * max(errors):.1f}%")


if __name__ == "__main__":
    main()
