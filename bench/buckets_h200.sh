#!/usr/bin/env bash
# Variable-length chats on one H200: the run a study's answer must fit, the memory predictor per token, and what the
# length buckets buy compiled layers and CUDA graphs, on made-up chat records of 30 to 1,000 tokens with a heavy tail
# (bench/chats.py: 2,000 records, median about 150 tokens), Qwen3-0.6B's shape, max_length 1,024, effective batch 8.
# Two device calls of under 10 minutes each (STAGES picks; both by default, in one call if its budget allows):
#   study   the study over every split x padding (longest, padding-free, buckets) that must fit one pass over the
#           file under 20 GiB (optimize.fit_over=epoch): its table, predictor error and answer, whose fit names the
#           run's longest micro-batch; then the answer's whole pass (250 steps) under the cap, its peak against it
#   gains   8x1 padding-free eager (the base) against bucketed configs, paired and rotated over rounds of fresh
#           processes (bench/knob_gains.py): buckets eager, buckets with regional compilation, buckets with regional
#           CUDA graphs (reduce-overhead), and padding-free with regional compilation; their real tokens/s ratios
#           (the same records every step: a step-time ratio is the tokens/s ratio)
# Logs and stores go to RES (/tmp/buckets); buckets.log (every stage's summary lines) and every stage's log to OUT.
#
# Here, once:  bash bench/fetch_wheels.sh          (the wheels the GPU machine lacks, into .whl/)
# There (a device run of the branch's checkout, carry [".whl"], timeout_s 600), one call per stage:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
#     .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit; STAGES=study bash bench/buckets_h200.sh
#   ... STAGES=gains bash bench/buckets_h200.sh
# Rehearsal on a CPU (the tiny model, 160 records of up to 512 tokens; no compilation, no graphs):
#   REHEARSAL=1 bash bench/buckets_h200.sh
set -uo pipefail
out=${OUT:-bench-out}
res=${RES:-/tmp/buckets}
py=${PYTHON:-python3}
stages=${STAGES:-study gains}
start=$(date +%s)
budget=${BUDGET_S:-540}
mkdir -p "$out" "$res"
export PYTHONUNBUFFERED=1

if [ "${REHEARSAL:-0}" = 1 ]; then
  data=(--records 160 --shortest 30 --longest 512)
  base=(model=tiny gpu=cpu model.vocab_size=2048 train.max_length=512 batch.effective=8 mem_cap=2GiB
        measure.warmup_steps=1)
  study=(optimize.trials=6 train.steps=4 optimize.confirm=never)
  records=160
  variants=("train.padding=buckets")
  gains=(--rounds 2 --steps 6 --warmup 2)
  shares=(300 200 200)
else
  data=(--records 2000 --shortest 30 --longest 1000)
  base=(model=qwen3-0.6b gpu=auto train.max_length=1024 batch.effective=8 mem_cap=20GiB measure.warmup_steps=5)
  study=(optimize.trials=9 train.steps=16 optimize.confirm_k=2 optimize.confirm_budget_s=60)
  records=2000
  variants=("train.padding=buckets"
            "train.padding=buckets train.torch_compile=regional"
            "train.padding=buckets train.torch_compile=regional train.compile_mode=reduce-overhead"
            "train.torch_compile=regional")
  gains=(--rounds 3 --steps 30 --warmup 5 --budget-s 480)
  shares=(330 200 540)
fi

NAME=buckets RES=$res START=$start BUDGET=$budget
source "$(dirname "$0")/stages.sh"

machine
$py -m bench.chats "$res/chats.jsonl" "${data[@]}" | tee -a "$res/buckets.log"
common=("${base[@]}" data=jsonl data.path="$res/chats.jsonl")

if [[ " $stages " == *" study "* ]]; then
  space='++optimize.space={train.padding:[longest,padding_free,buckets]}'
  stage study "${shares[0]}" $py -m pipeline.optimize "${common[@]}" "${study[@]}" "$space" optimize.fit_over=epoch \
    paths.root="$res/study"
  grep -E "^\| |^best feasible|^  fits:|^where the step goes|^  (baseline|answer) |memory predictor error" \
    "$res/study.log" | tee -a "$res/buckets.log"
  answer=$(grep -m1 -E "^  python -m pipeline.train " "$res/study.log" | sed 's/^  python -m pipeline.train //')
  if [ -n "$answer" ]; then  # the answer's whole pass over the file, under the cap: its peak is the run's
    eval "args=($answer)"
    stage full "${shares[1]}" $py -m pipeline.train "${args[@]}" "train.steps=$(( records / 8 ))" \
      paths.root="$res/full"
    grep -E "^\[job\].*(ok|over-cap|oom|failed)" "$res/full.log" | tail -1 | tee -a "$res/buckets.log"
    $py - "$res/full" <<'PY' | tee -a "$res/buckets.log"
import sys
from mlflow.tracking import MlflowClient
client = MlflowClient(f"sqlite:///{sys.argv[1]}/mlflow.db")
for run in client.search_runs([e.experiment_id for e in client.search_experiments()]):
    m, t = run.data.metrics, run.data.tags
    print(f"[buckets] full pass: {t.get('fit')}, peak {m.get('peak_gib', float('nan')):.2f} GiB of cap "
          f"{m.get('cap_gib', float('nan')):.2f} GiB, {m.get('tokens_per_s', float('nan')):,.0f} real tokens/s")
PY
  fi
fi

if [[ " $stages " == *" gains "* ]]; then
  flags=()
  for v in "${variants[@]}"; do flags+=(--variant "$v"); done
  stage gains "${shares[2]}" $py -m bench.knob_gains --base "${common[*]} batch.split=8x1 train.padding=padding_free" \
    "${flags[@]}" "${gains[@]}" --out "$res/gains"
  grep -E "^\| |^\[gains\].*(left out|not started)" "$res/gains.log" | tee -a "$res/buckets.log"
fi

cp "$res"/*.log "$res/versions.txt" "$out"/ 2>/dev/null
say "done in $(( $(date +%s) - start )) s"
