"""A study's answer against its plain-TRL twin, in one run: the pipeline's job of the answer (the command the study
printed) and bench/plain_trl.py with the same knobs, written the way a person would (regional compilation with
`layer.compile()` on each decoder layer), alternating which goes first, so both see the machine in the same state.

    python bench/twin_answer.py ROOT [--rounds 2] [--steps 20] [--warmup 5]

ROOT is the study's paths.root. The pipeline's jobs run with the study's own store and compile cache (their runs are
`job` runs there); the twin's step times come from its per-step log. Prints each round's step medians (steady steps:
after the warm-up, none that compiled), the paired ratio pipeline / plain TRL, both peaks, and writes ROOT/twin.json.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

from mlflow.tracking import MlflowClient

from pipeline.knobs import (
    adapter_dtype,
    attn_implementation,
    compile_mode,
    dtype,
    gradient_checkpointing,
    liger_kernel,
    optimizer,
    padding,
    torch_compile,
)

GIB = 2**30
# what plain_trl.py writes as it is: an answer that sets any of these otherwise has no twin there
AS_PLAIN = {
    adapter_dtype.KNOB.key: "fp32",
    liger_kernel.KNOB.key: "False",
    padding.KNOB.key: "max_length",
    optimizer.KNOB.key: "adamw_torch",
    attn_implementation.KNOB.key: "sdpa",
    "lora.r": "16",
    "lora.alpha": "32",
}
SHAPE = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads")
SHAPE_MORE = ("head_dim", "vocab_size")


def answer_of(client: MlflowClient, experiment: str) -> tuple[list[str], dict[str, str]]:
    """The answer's command-line overrides and its trial's params (the flattened config it trained)."""
    (study,) = client.search_runs([experiment], "tags.kind = 'study'")
    if "best_config_id" not in study.data.tags:
        sys.exit("[twin] the study has no answer (nothing measured fits, or it was stopped before its first trial)")
    best = study.data.tags["best_config_id"]
    (trial, *_) = client.search_runs([experiment], f"tags.config_id = '{best}' and tags.kind = 'trial'")
    return shlex.split(study.data.tags["answer"])[3:], trial.data.params


def plain_flags(params: dict[str, str]) -> list[str]:
    """plain_trl.py's arguments for the answer's knobs; exits where plain_trl.py writes no twin of one."""
    for key, value in AS_PLAIN.items():
        if params.get(key) != value:
            sys.exit(f"[twin] plain_trl.py writes no twin of {key}={params.get(key)} (it writes {value})")
    shape = {k: int(params[f"model.{k}"]) for k in (*SHAPE, *SHAPE_MORE)}
    resolved = params.get("dtype_resolved", params[dtype.KNOB.key])
    return [
        f"--split={params['batch.split']}",
        f"--length={params['train.max_length']}",
        f"--dtype={resolved if resolved in ('fp16', 'bf16') else 'fp16'}",
        f"--checkpointing={params[gradient_checkpointing.KNOB.key].lower()}",
        f"--compile={params[torch_compile.KNOB.key]}",
        f"--compile-mode={params[compile_mode.KNOB.key]}",
        f"--device={params.get('device', 'cuda')}",
        f"--shape={json.dumps(shape)}",
    ]


def run_pipeline(command: list[str], client: MlflowClient, experiment: str, warmup: int) -> dict:
    subprocess.run([sys.executable, "-m", "pipeline.train", *command], check=False)
    (run,) = client.search_runs(
        [experiment], "tags.kind = 'job'", order_by=["attributes.start_time DESC"], max_results=1
    )
    result = json.loads(Path(client.download_artifacts(run.info.run_id, "result.json")).read_text())
    steady = [s["step_time_s"] for s in result["steps"] if s["step"] > warmup and s["compile_s"] == 0]
    memory = result.get("memory") or {}
    return {
        "status": result["status"],
        "median": statistics.median(steady) if steady else None,
        "peak_reserved_gib": (memory.get("peak_reserved_bytes") or 0) / GIB,
        "compile_s": result["timings"].get("compile_s"),
        "compile_note": result.get("compile_note"),
    }


def run_plain(flags: list[str], steps: int, warmup: int, out: Path) -> dict:
    script = Path(__file__).with_name("plain_trl.py")
    subprocess.run([sys.executable, str(script), *flags, f"--steps={steps}", f"--out={out}"], check=False)
    if not out.exists():
        return {"status": "failed", "median": None, "peak_reserved_gib": 0.0}
    record = json.loads(out.read_text())
    steady = record["step_times_s"][warmup - 1 :]  # element k is step k + 2's time
    return {
        "status": "ok",
        "median": statistics.median(steady) if steady else None,
        "peak_reserved_gib": (record["peak_reserved_bytes"] or 0) / GIB,
        "setup_s": record["setup_s"],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("root", type=Path)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()
    root = args.root.resolve()
    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("batch-split").experiment_id
    answer, params = answer_of(client, experiment)
    flags = plain_flags(params)
    command = [*answer, f"train.steps={args.steps}", f"measure.warmup_steps={args.warmup}", "train.progress_bar=false"]
    print(f"[twin] pipeline: python -m pipeline.train {shlex.join(command)}", flush=True)
    print(f"[twin] plain TRL: python bench/plain_trl.py {shlex.join(flags)} --steps={args.steps}", flush=True)
    rounds = []
    for r in range(args.rounds):
        first = "pipeline" if r % 2 == 0 else "plain"
        done: dict[str, dict] = {}
        for side in ("pipeline", "plain") if first == "pipeline" else ("plain", "pipeline"):
            if side == "pipeline":
                done[side] = run_pipeline(command, client, experiment, args.warmup)
            else:
                done[side] = run_plain(flags, args.steps, args.warmup, root / f"twin-plain-{r}-{time.time_ns()}.json")
        mine, theirs = done["pipeline"]["median"], done["plain"]["median"]
        ratio = mine / theirs if mine and theirs else None
        rounds.append({**done, "first": first, "ratio": ratio})
        shown = f"{ratio:.3f}" if ratio else "-"
        print(
            f"[twin] round {r + 1} ({first} first): pipeline {mine or float('nan'):.4f} s/step, plain TRL "
            f"{theirs or float('nan'):.4f} s/step, ratio {shown}",
            flush=True,
        )
    ratios = [r["ratio"] for r in rounds if r["ratio"]]
    peaks = [(r["pipeline"]["peak_reserved_gib"], r["plain"]["peak_reserved_gib"]) for r in rounds]
    if ratios:
        print(
            f"[twin] pipeline / plain TRL step time: median {statistics.median(ratios):.3f} over {len(ratios)} paired "
            f"rounds ({', '.join(f'{x:.3f}' for x in ratios)}); peak reserved GiB pipeline / plain: "
            + ", ".join(f"{a:.2f} / {b:.2f}" for a, b in peaks),
            flush=True,
        )
    (root / "twin.json").write_text(json.dumps({"answer": answer, "flags": flags, "rounds": rounds}, indent=1))


if __name__ == "__main__":
    main()
