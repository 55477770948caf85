"""Re-evaluate the memory predictor on a finished study's own measurements: calibrate on its probes, predict every
measured trial, print the errors. Used after a formula change, on the stored study of a GPU run.

    python bench/predictor_check.py bench/results/optimize-h200-e4.json model=qwen3-1.7b train.max_length=512
"""

from __future__ import annotations

import json
import sys

from pipeline.config.compose import compose_job
from pipeline.search.predictor import GIB, Knobs, Predictor, Shape
from pipeline.search.study import probe_points


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as handle:
        record = json.load(handle)
    cfg = compose_job("config", sys.argv[2:])
    calibration = record["user_attrs"]["calibration"]
    predictor = Predictor(Shape.from_model(cfg.model), cfg.lora.r, list(cfg.lora.target_modules))
    length = cfg.train.max_length
    # probes: [micro, peak GiB] (older studies: the base config had no checkpointing), or [micro, peak, dtype, ckpt]
    probes = [p if len(p) == 4 else [*p, calibration["dtype"], False] for p in calibration["probes"]]
    predictor.calibrate(probe_points({"probes": probes}, length))
    print(
        f"calibrated on {len(calibration['probes'])} probe(s): scale {predictor.scale:.3f}, offset {predictor.offset / GIB:.3f} GiB"
    )
    errors = []
    for trial in record["trials"]:
        attrs, params = trial["user_attrs"], trial["params"]
        if not attrs.get("peak_gib"):
            continue
        knobs = Knobs(
            int(params["batch.split"].split("x")[0]),
            length,
            params.get("train.dtype", calibration["dtype"]),
            bool(params.get("train.gradient_checkpointing", False)),
        )
        predicted = predictor.predict(knobs) / GIB
        error = (predicted - attrs["peak_gib"]) / attrs["peak_gib"]
        errors.append(abs(error))
        print(
            f"{attrs['label']:70s} measured {attrs['peak_gib']:6.3f}  predicted {predicted:6.3f} GiB "
            f"(at run time {attrs['predicted_gib']:6.3f})  error {100 * error:+5.1f}%"
        )
    print(f"error over {len(errors)} trials: mean {100 * sum(errors) / len(errors):.1f}%, max {100 * max(errors):.1f}%")


if __name__ == "__main__":
    main()
