"""Profile a study's answer and its baseline: each rerun once with measure.profile=true (a torch.profiler window of
a few steady steps), and their step, GPU busy share and kernel launches per step printed side by side.

    python bench/profile_answer.py ROOT OVERRIDES...    # ROOT: the study's paths.root; OVERRIDES: its base config

The answer's command is the one the study printed (the `answer` tag of its MLflow run); the baseline is the base
config, OVERRIDES as given.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

from mlflow.tracking import MlflowClient

PROFILE = ["measure.profile=true", "measure.profile_steps=3", "train.steps=20", "train.progress_bar=false"]


def main() -> None:
    root, base = Path(sys.argv[1]).resolve(), sys.argv[2:]
    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("batch-split")
    (study,) = client.search_runs([experiment.experiment_id], "tags.kind = 'study'")
    answer = shlex.split(study.data.tags["answer"])[3:]
    for name, overrides in (("baseline", base), ("answer", answer)):
        # the study's folder (its compile cache: a compiled answer need not compile again), a store of their own
        store = [f"paths.root={root}", f"tracking.uri=sqlite:///{root / 'profiled' / 'mlflow.db'}"]
        command = [sys.executable, "-m", "pipeline.train", *overrides, *PROFILE, *store]
        print(f"[profile] {name}: {shlex.join(command[3:])}", flush=True)
        subprocess.run(command, check=False)
    profiled = MlflowClient(f"sqlite:///{root / 'profiled' / 'mlflow.db'}")
    experiment = profiled.get_experiment_by_name("batch-split")
    ordered = profiled.search_runs([experiment.experiment_id], order_by=["attributes.start_time ASC"])
    for role, run in zip(("baseline", "answer"), ordered, strict=False):
        m = run.data.metrics
        print(
            f"[profile] {role} ({run.info.run_name}): step {m.get('step_time_median_s', float('nan')):.4f} s, GPU busy "
            f"(NVML) {m.get('gpu_busy', float('nan')):.2f}, busy (profiler) "
            f"{m.get('profile.device_busy_fraction', float('nan')):.2f}, launches/step "
            f"{m.get('profile.launches_per_step', float('nan')):.0f}, kernels/step "
            f"{m.get('profile.kernels_per_step', float('nan')):.0f}, device ms/step "
            f"{m.get('profile.device_ms', float('nan')):.1f}, host ms/step {m.get('profile.host_ms', float('nan')):.1f}, "
            f"casts/step {m.get('profile.casts_per_step', float('nan')):.0f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
