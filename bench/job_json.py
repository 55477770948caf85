"""One job of the pipeline, as `python -m pipeline.train OVERRIDES` runs it (a fresh child process, its meter, its
MLflow records), with its step times, losses and peak written to one JSON: the command `bench.side_by_side` pairs in
rotated rounds, so a study's answer and the configs around it are compared as the study compares them.

    python -m bench.job_json --out FILE OVERRIDES...

FILE gets `step_times_s` (every step, the warm-up included: the side by side drops its own), `steady` (each step's
flag: False where it compiled, ran under the profiler, trained the run's longest micro-batch beside its own or
stalled, the steps a study's figure leaves out wherever they fall), `losses`,
`peak_reserved_bytes`, `peak_allocated_bytes`, each step's running peaks (`step_peaks_bytes`: the cap's figure,
reserved and context; `step_peaks_allocated_bytes`), each step's `tokens` and `padded_tokens`, the `error` of a job
that failed, `host` (the CPUs and memory nodes its training thread ran on, the host's load), `status` and the
`command`; the exit code is 0 where the job ended ok, 1 otherwise, 2 for a config the command line refuses (its one
line on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pipeline.config.compose import compose_job
from pipeline.config.errors import ConfigError
from pipeline.config.validate import validate
from pipeline.jobs import runner, task
from pipeline.records import Status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args(argv)
    overrides = [*args.overrides, "train.progress_bar=false"]
    try:
        job = validate(compose_job("config", overrides))  # checked as the command line checks it
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    runner.warm_up("forkserver")
    outcome = task.run(job)
    memory = outcome.result.memory
    record = {
        "status": str(outcome.status),
        "command": "python -m pipeline.train " + " ".join(args.overrides),
        "step_times_s": [s.step_time_s for s in outcome.result.steps],
        "steady": [s.steady_candidate and s.step not in outcome.result.stalled_steps for s in outcome.result.steps],
        "losses": [s.loss for s in outcome.result.steps],
        "peak_reserved_bytes": memory.peak_reserved_bytes if memory else None,
        "peak_allocated_bytes": memory.peak_allocated_bytes if memory else None,
        "step_peaks_bytes": [s.peak_bytes for s in outcome.result.steps],
        "step_peaks_allocated_bytes": [s.peak_allocated_bytes for s in outcome.result.steps],
        "tokens": [s.tokens for s in outcome.result.steps],
        "padded_tokens": [s.padded_tokens for s in outcome.result.steps],
        "error": outcome.result.error,
        "host": outcome.result.host,  # where its training thread ran: the process spread's candidate cause
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record), encoding="utf-8")
    return 0 if outcome.status == Status.OK else 1


if __name__ == "__main__":
    sys.exit(main())
