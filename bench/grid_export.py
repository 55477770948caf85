"""A recorded grid (the JSON `bench.grid` reads and `bench.replay` replays) from a study that measured every config
of its space once: a bruteforce study with no pruning and no skipping (bench/grid_h200.sh), read back from its Optuna
storage.

    python -m bench.grid_export sqlite:///mlruns/optuna.db grid-seed --setting "..." > bench/results/grid.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys

import optuna

from pipeline.records import Status
from pipeline.search import _trials as trials

STATUS = {Status.OK: "ok", Status.OVER_CAP: "oom", Status.OOM: "oom", Status.FAILED: "failed"}


def step_sd(times: list[float]) -> float:
    """The spread of a process's steady steps as a standard deviation of their logs (0.015: 1.5% step to step), from
    their median absolute deviation: a step that recompiles for a new shape (seconds, where the others take a tenth)
    moves a median little, and would read as 0.7 here through the standard deviation itself."""
    logs = [math.log(t) for t in times]
    centre = statistics.median(logs)
    return round(1.4826 * statistics.median(abs(x - centre) for x in logs), 4)


def grid(study: optuna.Study, cap_gib: float, steps: int, warmup: int, setting: str) -> dict:
    """Every decided config of `study` once (the first trial that measured it), with its figures."""
    space: dict[str, list] = {}
    configs, baseline, seen = [], None, set()
    for trial in study.get_trials(deepcopy=False):
        record = trials.TrialRecord.of(trial)
        for name, dist in trial.distributions.items():
            space.setdefault(name, list(dist.choices))
        if record.status not in STATUS or record.config_id in seen or trial.user_attrs.get(trials.REPEAT_OF):
            continue
        seen.add(record.config_id)
        if record.role is trials.Role.BASELINE:
            baseline = dict(trial.params)
        ran = sum(record.step_times) + sum(record.warmup_times)
        configs.append(
            {
                "params": dict(trial.params),
                "status": STATUS[record.status],
                "step_s": trials.measured_seconds(record),
                "peak_gib": record.peak_gib,
                "fixed_s": max(0.0, record.gpu_seconds - ran),
                **({"step_sd": step_sd(record.step_times)} if len(record.step_times) > 1 else {}),
                **({"compile_s": record.compile_s} if trials.COMPILE_S in trial.user_attrs else {}),
            }
        )
    return {
        "setting": setting,
        "space": space,
        "baseline": baseline,
        "cap_gib": cap_gib,
        "steps": steps,
        "warmup": warmup,
        "configs": configs,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("storage")
    parser.add_argument("study")
    parser.add_argument("--cap-gib", type=float, required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--warmup", type=int, required=True)
    parser.add_argument("--setting", default="")
    args = parser.parse_args(argv)
    study = optuna.load_study(study_name=args.study, storage=args.storage)
    json.dump(grid(study, args.cap_gib, args.steps, args.warmup, args.setting), sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
