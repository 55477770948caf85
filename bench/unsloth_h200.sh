#!/usr/bin/env bash
# Unsloth's recipe beside the project's answer and the seed's setting, and the console of a GPU study with Liger and
# compiled layers, on one H200, in a queue that outlives a device call (its own session), collected by later calls:
#   console     a study whose space holds Liger under compiled layers (the job that warned thousands of times): its
#               console's line count, and the library warnings its jobs' logs hold
#   side-seed   bench/side_by_side.py on the seed's setting (Qwen3-1.7B's shape, random weights, 512 tokens, LoRA r16
#               alpha 32 on the seven projections, effective batch 4 as 4x1): the seed's setting in plain TRL (fp16,
#               checkpointing), the answer's knobs in plain TRL (bf16, no checkpointing, regional compilation with CUDA
#               graphs) and Unsloth's own recipe, in rotated rounds of fresh processes
#   side-small  the same three on Qwen3-0.6B's shape at 1,024 tokens, effective batch 8 (8x1)
# Unsloth 2026.10 needs trl <= 1.15 and datasets < 5: its wheels go to a site of their own (/tmp/uns-site), which the
# three scripts of a side by side share (the same TRL and datasets for each).
#
# Here, once: bash bench/fetch_wheels.sh && bash bench/fetch_unsloth_wheels.sh
# There, one call each, the machine kept warm (it is given back after 30 s idle; timeout_s 600 for the last):
#   bash bench/unsloth_h200.sh gather .whl-uns-a      # carry [".whl-uns-a"]; then .whl-uns-b, .whl-uns-c alike
#   bash bench/unsloth_h200.sh gather .whl-uns-d      # carry [".whl-uns-d"]: the last; Unsloth's site is installed
#   bash bench/unsloth_h200.sh start                  # the queue starts
#   bash bench/unsloth_h200.sh                        # later calls: follow and collect
# The console stage runs the project's study: it needs the project's site too (carry [".whl"] in a call before).
# STAGES picks the stages (default: side-seed side-small); ROUNDS the side-by-side's rounds (default 4).
set -uo pipefail
out=${OUT:-bench-out}
dir=${DIR:-/root/unsloth}
py=${PYTHON:-python3}
wait_s=${WAIT_S:-560}
rounds=${ROUNDS:-4}
stages=${STAGES:-side-seed side-small}
mkdir -p "$out" "$dir"
source "$(dirname "$0")/stages.sh"

site() {  # site FOLDER TARGET: the wheels of FOLDER into TARGET
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$2" "$1"/*.whl
}

case "${1:-follow}" in
  gather)  # gather FOLDER: its wheels kept on the machine; once all four are there, joined and installed
    mkdir -p /tmp/uns-wheels && cp "$2"/* /tmp/uns-wheels/ || exit 1
    cd /tmp/uns-wheels || exit 1
    if [ -e bitsandbytes.part.aa ] && [ -e bitsandbytes.part.ab ] && ls unsloth-2026* unsloth_zoo-* >/dev/null 2>&1; then
      cat bitsandbytes.part.aa bitsandbytes.part.ab > bitsandbytes-0.50.2-py3-none-manylinux_2_24_x86_64.whl \
        && rm bitsandbytes.part.* && site /tmp/uns-wheels /tmp/uns-site && touch /tmp/uns-site/.ready \
        && echo "Unsloth's site installed" || exit 1
    else
      echo "gathered $(ls | wc -l) files; the next folder, at once"
    fi
    exit 0 ;;
  start)
    [ -e /tmp/uns-site/.ready ] || { echo "Unsloth's site is not installed: gather the four folders first" >&2; exit 2; }
    PYTHONPATH=/tmp/uns-site "$py" -c 'import unsloth, trl, datasets; print("unsloth", unsloth.__version__, "trl", trl.__version__, "datasets", datasets.__version__)' 2>&1 | tail -5 ;;
esac

side() {  # side NAME SHAPE LENGTH SPLIT: the three scripts side by side, into $dir/NAME
  local name=$1 shape=$2 length=$3 split=$4 common
  common="--split $split --steps 30 --length $length --shape '$shape'"
  "$py" -m bench.side_by_side --rounds "$rounds" --warmup 8 --out "$dir/$name" \
    "seed=$py bench/plain_trl.py $common" \
    "answer=$py bench/plain_trl.py $common --dtype bf16 --checkpointing false --compile regional --compile-mode reduce-overhead" \
    "unsloth=$py bench/unsloth_recipe.py $common"
}

stage() {  # stage NAME: one stage of the queue, from the copy in DIR
  case "$1" in
    console)
      "$py" -m pipeline.optimize model=qwen3-0.6b gpu=auto mem_cap=20GiB train.max_length=1024 data.length=1024 \
        batch.effective=8 batch.split=8x1 train.dtype=bf16 train.gradient_checkpointing=false train.steps=12 \
        measure.warmup_steps=4 '++optimize.space={train.liger_kernel:[true],train.torch_compile:[regional]}' \
        paths.root="$dir/console" > "$dir/console-out.txt" 2>&1
      echo "console: exit $?, $(wc -l < "$dir/console-out.txt") lines"
      tail -40 "$dir/console-out.txt"
      find "$dir/console" -name job.log -exec grep -c -i warn {} + 2>/dev/null | tail -20 ;;
    side-seed)
      side side-seed '{}' 512 4x1 ;;
    side-small)
      side side-small '{"hidden_size":1024,"intermediate_size":3072,"num_hidden_layers":28,"num_attention_heads":16,"num_key_value_heads":8,"head_dim":128}' 1024 8x1 ;;
  esac
}

case "${1:-follow}" in
  queue)
    cd "$dir/repo" && export PYTHONPATH="$dir/repo:/tmp/uns-site:/tmp/site" PYTHONUNBUFFERED=1 NAME=unsloth RES="$dir"
    machine
    queue_run
    exit 0 ;;
  start)
    queue_start unsloth_h200.sh || exit $? ;;
esac
collect() {  # the logs, the console and the side-by-sides' records so far, as one tarball in OUT
  (cd "$dir" && tar czf "$out/unsloth.tgz" --ignore-failed-read ./*.log ./*.txt ./side-*/*.json queue.out 2>/dev/null)
}
queue_follow collect 10 || exit $?
for f in "$dir"/*.log; do
  [ -e "$f" ] || continue
  echo "== $(basename "$f")"
  grep -E '^\[round|^\||^console:|^error|Error' "$f" | tail -14
done
