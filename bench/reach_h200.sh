#!/usr/bin/env bash
# Issue 20 ("Reach") on one H200, in one device call of under 10 minutes, on the seed's setting (experiment=seed-t4
# gpu=auto mem_cap=14GiB batch.split=4x1 measure.warmup_steps=5: Qwen3-1.7B shape, 512 tokens padded, LoRA r16
# all-linear, effective batch 4, 14 GiB cap):
#   1. study    the knob study of compilation (optimize=compile: split x checkpointing x dtype x off/regional x
#               default/reduce-overhead), the seed's 4x1 fp16 checkpointed eager config as its baseline, its
#               confirmation round; the answer's tokens/s against the baseline's, the predictor's error per trial
#   2. twin     the answer's job against its plain-TRL twin (bench/twin_answer.py: alternating, paired ratio)
#   3. profile  the baseline and the answer re-run under the profiler (bench/profile_answer.py: kernel launches and
#               GPU busy share per step)
# Each stage gets at most its share and what is left of BUDGET_S (default 520 s from the script's start); one that
# runs past is interrupted with SIGINT (an interrupted study still prints and records its answer). Logs and stores go
# to RES (/tmp/reach); reach.log (every stage's summary lines, every job's figures) and reach.tgz (logs, stores,
# twin.json; not the profiler traces, which could pass the 16 MiB a returned file may have) to OUT.
#
# Here, once:  bash bench/fetch_wheels.sh          (the wheels the GPU machine lacks, into .whl/)
# There (a device run of the branch's checkout, carry [".whl"], timeout_s 600):
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
#     .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit; bash bench/reach_h200.sh
# Rehearsal on a CPU (the tiny model compiled regionally, its splits only; a few minutes): REHEARSAL=1 bash bench/reach_h200.sh
set -uo pipefail
out=${OUT:-bench-out}
res=${RES:-/tmp/reach}
py=${PYTHON:-python3}
start=$(date +%s)
budget=${BUDGET_S:-520}
mkdir -p "$out" "$res"
: > "$res/reach.log"
export PYTHONUNBUFFERED=1

if [ "${REHEARSAL:-0}" = 1 ]; then
  base=(model=tiny gpu=cpu batch.split=4x1 train.padding=max_length data.length=128 mem_cap=2GiB
        measure.warmup_steps=2 train.torch_compile=regional)
  study=("${base[@]}" optimize.trials=2 train.steps=8 optimize.confirm=never)
  twin=(--rounds 1 --steps 8 --warmup 2)
  shares=(240 120 120)
else
  base=(experiment=seed-t4 gpu=auto mem_cap=14GiB batch.split=4x1 measure.warmup_steps=5)
  study=("${base[@]}" optimize=compile optimize.trials=9 train.steps=16 optimize.confirm_k=2 optimize.confirm_budget_s=90)
  twin=(--rounds 2 --steps 16 --warmup 5)
  shares=(300 120 100)
fi

NAME=reach RES=$res START=${start:-} BUDGET=$budget
source "$(dirname "$0")/stages.sh"

machine

stage study "${shares[0]}" $py -m pipeline.optimize "${study[@]}" paths.root="$res/study"
stage twin "${shares[1]}" $py bench/twin_answer.py "$res/study" "${twin[@]}"
stage profile "${shares[2]}" $py bench/profile_answer.py "$res/study" "${base[@]}"

# every job of the study (probes, trials, confirmation runs, the twin's), as recorded: the raw figures
$py - "$res/study" > "$res/runs.txt" 2>&1 <<'PY'
import sys
from mlflow.tracking import MlflowClient
client = MlflowClient(f"sqlite:///{sys.argv[1]}/mlflow.db")
experiment = client.get_experiment_by_name("batch-split").experiment_id
for r in client.search_runs([experiment], order_by=["attributes.start_time ASC"]):
    m, t = r.data.metrics, r.data.tags
    if t.get("kind") == "study":
        continue
    print(f"{t.get('kind', '-'):7s} {r.info.run_name:64.64s} {t.get('status', '-'):8s} step "
          f"{m.get('step_time_median_s', float('nan')):.4f} s  tokens/s {m.get('tokens_per_s', float('nan')):7.0f}  "
          f"peak {m.get('peak_gib', float('nan')):6.2f} GiB  predicted {t.get('predicted_gib', '-'):>6s}  compile "
          f"{m.get('compile_s', float('nan')):5.1f} s  wall {m.get('wall_s', float('nan')):5.1f} s  "
          f"{t.get('compile_note', '')}")
PY
# the lines that say what happened, in one place
{ echo "== runs"; cat "$res/runs.txt"
  echo "== study"; grep -E '^\[study\]|^\[job\]|^\||best feasible|python -m pipeline.train|x the baseline|predictor|device time|confirmation' "$res/study.log"
  echo "== twin"; grep -E '^\[twin\]|^\[job\]|Error' "$res/twin.log"
  echo "== profile"; grep -E '^\[profile\]|^\[job\]|Error' "$res/profile.log"
} >> "$res/reach.log" 2>/dev/null
say "done in $(( $(date +%s) - start )) s; $out/reach.log, $out/reach.tgz"
tar czf "$out/reach.tgz" --exclude='compile-cache' --exclude='*.db-journal' --exclude='trace.json*' -C "$(dirname "$res")" "$(basename "$res")"
cp "$res/reach.log" "$out/reach.log"
cat "$res/reach.log"
