#!/usr/bin/env bash
# The study on settings nobody tuned it for, one H200: the README's examples as typed, other models, lengths, batches,
# caps and spaces; and the exhaustive grid of one small space beside its study.
#   compile     the compile knob study on the seed's setting (README: optimize=compile): a decided paired speed-up
#   ckptdtype   README: qwen3-1.7b, max_length 512, optimize=ckpt-dtype, 6 trials (its dtype=auto baseline)
#   knobs       README: qwen3-1.7b, max_length 512, optimize=knobs (padding-free among the knobs), 8 trials
#   small       qwen3-0.6b, 1024 tokens, effective batch 8, padding to max_length, optimize=compile, cap 20 GiB
#   big         qwen3-4b, 1024 tokens, effective batch 16, gpu=a100-40gb (its memory is the cap), optimize=ckpt-dtype
#   long        qwen3-0.6b, 2048 tokens, effective batch 4, cap 16 GiB, optimize=ckpt-dtype
#   grid        the exhaustive grid of ckptdtype's space (every config once, as a sweep), for the study beside it
# Each stage gets at most its share (timeout, SIGINT: an interrupted study still prints and records its answer).
# Logs and stores go to RES (/tmp/settings); settings.log (what each said) and settings-<stages>.tgz to OUT;
# bench/settings_report.py reads the stores and prints the table of BENCHMARKS.md.
#
# Here, once:  bash bench/fetch_wheels.sh          (the wheels the GPU machine lacks, into .whl/)
# There (a device run of the checkout, carry [".whl"], timeout_s 600):
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
#     .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit; bash bench/settings_h200.sh compile ckptdtype knobs
# A later call resumes the studies a call cut short: carry its settings-*.tgz and untar it into /tmp first (the same
# command resumes a study from its store). Rehearsal on a CPU (the tiny model): REHEARSAL=1 bash bench/settings_h200.sh
set -uo pipefail
out=${OUT:-bench-out}
res=${RES:-/tmp/settings}
py=${PYTHON:-python3}
mkdir -p "$out" "$res"
export PYTHONUNBUFFERED=1
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(compile ckptdtype knobs)

short=(train.steps=12)
if [ "${REHEARSAL:-0}" = 1 ]; then  # the same stages on the tiny model: what the CPU can run of each
  declare -A args=(
    [compile]="mem_cap=4GiB optimize.trials=4 ++optimize.space={train.torch_compile:[off,regional]} train.steps=8"
    [ckptdtype]="mem_cap=4GiB gpu=cpu optimize=ckpt-dtype optimize.trials=6 train.steps=8"
    [knobs]="mem_cap=4GiB gpu=cpu optimize=knobs optimize.trials=8 train.steps=8"
    [small]="mem_cap=4GiB batch.effective=8 train.padding=max_length optimize.trials=4 train.steps=8"
    [big]="mem_cap=0.6GiB batch.effective=8 model.vocab_size=2048 train.max_length=256 optimize.trials=4 train.steps=8"
    [long]="mem_cap=4GiB train.max_length=512 data.length=512 optimize=ckpt-dtype gpu=cpu optimize.trials=4 train.steps=8"
    [grid]="gpu=cpu batch.split=1x4,2x2,4x1 train.gradient_checkpointing=true,false train.dtype=bf16 train.steps=8"
  )
  declare -A shares=([compile]=200 [ckptdtype]=200 [knobs]=240 [small]=200 [big]=200 [long]=200 [grid]=200)
else
  declare -A args=(
    [compile]="experiment=seed-t4 gpu=auto mem_cap=14GiB batch.split=4x1 optimize=compile optimize.trials=8 ${short[*]}"
    [ckptdtype]="mem_cap=14GiB model=qwen3-1.7b train.max_length=512 optimize=ckpt-dtype gpu=auto optimize.trials=6 ${short[*]}"
    [knobs]="mem_cap=14GiB optimize=knobs model=qwen3-1.7b train.max_length=512 gpu=auto optimize.trials=8 ${short[*]}"
    [small]="model=qwen3-0.6b train.max_length=1024 data.length=1024 batch.effective=8 train.padding=max_length gpu=auto mem_cap=20GiB optimize=compile optimize.trials=8 ${short[*]}"
    [big]="model=qwen3-4b train.max_length=1024 data.length=1024 batch.effective=16 gpu=a100-40gb optimize=ckpt-dtype optimize.trials=8 train.steps=10"
    [long]="model=qwen3-0.6b train.max_length=2048 data.length=2048 batch.effective=4 gpu=auto mem_cap=16GiB optimize=ckpt-dtype optimize.trials=8 ${short[*]}"
    [grid]="model=qwen3-1.7b train.max_length=512 gpu=auto mem_cap=14GiB batch.split=1x4,2x2,4x1 train.gradient_checkpointing=true,false train.dtype=bf16,fp16 ${short[*]}"
  )
  declare -A shares=([compile]=220 [ckptdtype]=140 [knobs]=160 [small]=160 [big]=190 [long]=160 [grid]=190)
fi

for pair in ${SHARES:-}; do shares[${pair%%=*}]=${pair#*=}; done  # SHARES="compile=230 knobs=150": other shares
NAME=settings RES=$res START=$(date +%s) BUDGET=${BUDGET:-}  # BUDGET: seconds for all the stages of this call
source "$(dirname "$0")/stages.sh"

machine

for name in "${stages[@]}"; do
  [ -n "${args[$name]:-}" ] || { say "unknown stage $name"; continue; }
  read -r -a given <<< "${args[$name]}"
  say "$name: ${args[$name]}"
  if [ "$name" = grid ]; then
    stage "$name" "${shares[$name]}" $py -m pipeline.train -m "${given[@]}" paths.root="$res/$name"
    grep -E '^\||^\[sweep\] [0-9]+ of' "$res/$name.log" >> "$res/settings.log"
  else
    stage "$name" "${shares[$name]}" $py -m pipeline.optimize "${given[@]}" paths.root="$res/$name"
    grep -E '^\[study\] (left out|confirmation)|^confirmation round|^  .* (faster than|equal within|against|not told)|best feasible|x the baseline|no speed-up|^decided|^left out|^failed as|predictor|device time|^\| [0-9]' "$res/$name.log" >> "$res/settings.log"
  fi
  cp "$res/$name.log" "$res/settings.log" "$out/"  # what a call cut short at its limit still brings back
done
$py bench/settings_report.py "$res" > "$res/report.txt" 2>&1 && cat "$res/report.txt" | tee -a "$res/settings.log"
tag=$(IFS=-; echo "${stages[*]}")
tar czf "$out/settings-$tag.tgz" --exclude='compile-cache' --exclude='*.db-journal' --exclude='artifacts' \
  -C "$(dirname "$res")" "$(basename "$res")"
cp "$res/settings.log" "$out/settings-$tag.log"
