#!/usr/bin/env bash
# Toward the GPU's limit, on one H200, in two device calls of under 10 minutes each (the seed's setup: Qwen3-1.7B
# shape, 512 tokens padded, LoRA r16 all-linear, effective batch 4, split 4x1):
#   twin    the pipeline's job against the plain TRL script it exports for the same config (bench/twin.py: at least
#           six alternating rounds, paired ratio), on the seed's setting (experiment=seed-t4) and on the graphs
#           answer (experiment=seed-t4-graphs: no checkpointing, fp16, regional compilation with CUDA graphs)
#   knobs   each new knob's gain paired against the graphs answer, and every config's against the seed's setting
#           (bench/knob_gains.py: 4 rounds, rotated order), then the answer and the fastest variant profiled
#           (kernel launches, device time, syncs per step, GPU busy)
#   meter   the meter switched on and off in blocks of steps inside one job of the graphs answer
#           (bench/meter_overhead.py): what it costs with no process-to-process noise
# Name the stages to run (default: twin); each call's stages must fit 10 minutes: `twin` alone, or `knobs` alone,
# or `meter` with either when time is left. Each stage gets at most its share and what is left of BUDGET_S (default
# 530 s from the script's start); a run past it is interrupted with SIGINT, and the benches themselves start no
# round they cannot finish within their --budget-s. Logs go to RES (/tmp/limit); limit-<stages>.log (the summary
# lines and tables) and limit-<stages>.tgz (every log, raw JSON, exported script and store; no compile caches or
# profiler traces) to OUT.
#
# Here, once:  bash bench/fetch_wheels.sh          (the wheels the GPU machine lacks, into .whl/)
# There (a device run of the branch's checkout, carry [".whl"], timeout_s 600), call 1 then call 2:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
#     .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit; bash bench/gpu_limit_h200.sh twin
#   (the same install line); bash bench/gpu_limit_h200.sh knobs
# VARIANTS (one knob set a line) replaces the knob list. Rehearsal on a CPU (the tiny model; ratios only, a few
# minutes a stage): REHEARSAL=1 bash bench/gpu_limit_h200.sh twin knobs meter
set -uo pipefail
out=${OUT:-bench-out}
res=${RES:-/tmp/limit}
py=${PYTHON:-python3}
start=$(date +%s)
budget=${BUDGET_S:-530}
mkdir -p "$out" "$res"
export PYTHONUNBUFFERED=1
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(twin)

if [ "${REHEARSAL:-0}" = 1 ]; then
  seed=(batch.split=4x1 train.gradient_checkpointing=true)
  graphs=(batch.split=4x1 train.padding=max_length train.loss=model)  # compiling on a CPU takes minutes
  twin_seed=(--rounds 2 --steps 8 --warmup 2 --budget-s 150)
  twin_graphs=(--rounds 2 --steps 8 --warmup 2 --budget-s 200)
  gains=(--rounds 2 --steps 8 --warmup 2 --budget-s 300)
  variants=${VARIANTS:-$'train.loss=trl\ntrain.optimizer=adamw_torch_fused'}
  meter=(--steps 60 --block 5)
  shares=(170 220 330 200)
else
  seed=(experiment=seed-t4 gpu=auto batch.split=4x1)
  graphs=(experiment=seed-t4-graphs gpu=auto batch.split=4x1)
  twin_seed=(--rounds 6 --steps 14 --warmup 4 --budget-s 215)
  twin_graphs=(--rounds 6 --steps 30 --warmup 5 --budget-s 230)
  gains=(--rounds 4 --steps 24 --warmup 5 --budget-s 450 --profile)
  variants=${VARIANTS:-$'train.loss=model\ntrain.loss=compiled\ntrain.optimizer=adamw_torch_fused
train.optimizer_step=graph\ntrain.loss=compiled train.optimizer=adamw_torch_fused
train.loss=compiled train.optimizer_step=graph'}
  meter=(--steps 400 --block 10)
  shares=(240 260 500 150)
fi

NAME=limit RES=$res START=$start BUDGET=$budget
source "$(dirname "$0")/stages.sh"

machine

variant_args=()
while IFS= read -r line; do [ -n "$line" ] && variant_args+=(--variant "$line"); done <<< "$(printf '%b' "$variants")"

for name in "${stages[@]}"; do
  case "$name" in
    twin)
      stage twin-seed "${shares[0]}" $py -m bench.twin "${twin_seed[@]}" --out "$res/twin-seed" -- "${seed[@]}"
      stage twin-graphs "${shares[1]}" $py -m bench.twin "${twin_graphs[@]}" --out "$res/twin-graphs" -- "${graphs[@]}" ;;
    knobs)
      stage knobs "${shares[2]}" $py -m bench.knob_gains --base "${graphs[*]}" --reference "${seed[*]}" \
        "${variant_args[@]}" "${gains[@]}" --out "$res/knobs" ;;
    meter)
      stage meter "${shares[3]}" $py -m bench.meter_overhead "${meter[@]}" --out "$res/meter.json" -- "${graphs[@]}" ;;
    *) say "unknown stage $name" ;;
  esac
done

# the lines that say what happened, in one place
tag=$(IFS=-; echo "${stages[*]}")
for log in "$res"/twin-seed.log "$res"/twin-graphs.log "$res"/knobs.log "$res"/meter.log; do
  [ -f "$log" ] || continue
  { echo "== $(basename "$log")"; grep -E '^\[twin\]|^\[gains\]|^\||pairs; median step|Error|error:' "$log"; } >> "$res/limit.log"
done
say "done in $(( $(date +%s) - start )) s; $out/limit-$tag.log, $out/limit-$tag.tgz"
tar czf "$out/limit-$tag.tgz" --exclude='compile-cache' --exclude='*.db-journal' --exclude='trace.json*' \
  -C "$(dirname "$res")" "$(basename "$res")"
cp "$res/limit.log" "$out/limit-$tag.log"
cat "$res/limit.log"
