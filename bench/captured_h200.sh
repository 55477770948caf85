#!/usr/bin/env bash
# The whole step captured by hand (bench/captured_step.py) beside the seed's setting and the answer's knobs in plain
# TRL, on one GPU, in a queue that outlives a device call (its own session), collected by later calls:
#   check   one process captured and one op by op (--capture false), 16 steps each: that the graph replays and
#           trains the same losses as the same loop launched op by op
#   side    bench/side_by_side.py on the seed's setting (Qwen3-1.7B's shape, random weights, 512 tokens, LoRA r16
#           alpha 32 on the seven projections, effective batch 4 as 4x1), ROUNDS rounds (default 5) of fresh
#           processes, the order rotated: the seed's setting in plain TRL (fp16, checkpointing), the answer's knobs in
#           plain TRL (bf16, no checkpointing, regional compilation with CUDA graphs) and the captured step; its
#           rounds are also the captured step's spread across fresh processes
#   side-small  the same three on Qwen3-0.6B's shape at 1,024 tokens, effective batch 8 (8x1)
#
# Here, once: bash bench/fetch_wheels.sh
# There (carry [".whl"], timeout_s 600): bash bench/captured_h200.sh start   # the first call
#                                        bash bench/captured_h200.sh         # later calls: follow and collect
# STAGES picks the stages (default: check side). Rehearsal on a CPU (a small shape, op by op; ratios only):
#   REHEARSAL=1 PYTHON=$PWD/.venv/bin/python DIR=/tmp/cap bash bench/captured_h200.sh start
set -uo pipefail
out=${OUT:-bench-out}
dir=${DIR:-/root/captured}
py=${PYTHON:-python3}
wait_s=${WAIT_S:-560}
rounds=${ROUNDS:-5}
stages=${STAGES:-check side}
mkdir -p "$out" "$dir"
source "$(dirname "$0")/stages.sh"

if [ "${REHEARSAL:-0}" = 1 ]; then
  cpu=(--device cpu)
  captured_cpu=(--device cpu --compile off --loss model --adapter-dtype fp32)
  seed_shape='{"hidden_size":128,"intermediate_size":256,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":32,"vocab_size":2048}'
  length=128 small_length=128 steps=12 warmup=4
else
  cpu=() captured_cpu=() seed_shape='{}' length=512 small_length=1024 steps=30 warmup=8
  if [ ! -d /tmp/site ]; then
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
      || exit 1
  fi
  export PYTHONPATH=/tmp/site
fi
small_shape='{"hidden_size":1024,"intermediate_size":3072,"num_hidden_layers":28,"num_attention_heads":16,"num_key_value_heads":8,"head_dim":128}'
[ "${REHEARSAL:-0}" = 1 ] && small_shape=$seed_shape

side() {  # side NAME SHAPE LENGTH SPLIT: the three side by side, into $dir/NAME
  local name=$1 shape=$2 length=$3 split=$4 common
  common="--split $split --steps $steps --length $length --shape '$shape'"
  "$py" -m bench.side_by_side --rounds "$rounds" --warmup "$warmup" --out "$dir/$name" \
    "seed=$py bench/plain_trl.py $common ${cpu[*]}" \
    "answer=$py bench/plain_trl.py $common ${cpu[*]} --dtype bf16 --checkpointing false --compile regional --compile-mode reduce-overhead" \
    "captured=$py bench/captured_step.py $common ${captured_cpu[*]}"
}

stage() {  # stage NAME: one stage of the queue, from the copy in DIR
  case "$1" in
    check)
      for capture in true false; do
        TORCH_LOGS=recompiles "$py" bench/captured_step.py --split 4x1 --steps 16 --length "$length" --shape "$seed_shape" \
          "${captured_cpu[@]}" --capture $capture --out "$dir/check-$capture.json"
      done
      "$py" - "$dir/check-true.json" "$dir/check-false.json" <<'PY'
import json, statistics, sys
from bench.side_by_side import deviation
graph, eager = (json.load(open(p)) for p in sys.argv[1:])
dev = deviation(graph["losses"], eager["losses"])
print(f"losses captured against op by op: largest relative deviation {dev:.2e} over {len(eager['losses'])} steps")
for name, r in (("captured", graph), ("op by op", eager)):
    step, launch = (statistics.median(r[key][6:]) for key in ("step_times_s", "launch_s"))
    print(f"{name}: median step {step:.4f} s, launch {launch * 1e3:.2f} ms, busy {r['gpu_busy']},"
          f" peak {(r['peak_reserved_bytes'] or 0) / 2**30:.2f} GiB")
PY
      ;;
    side)
      side side "$seed_shape" "$length" 4x1 ;;
    side-small)
      side side-small "$small_shape" "$small_length" 8x1 ;;
  esac
}

case "${1:-follow}" in
  queue)
    cd "$dir/repo" && export PYTHONPATH="$dir/repo:$dir/repo/bench:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 NAME=captured RES="$dir"
    machine
    queue_run
    exit 0 ;;
  start)
    queue_start captured_h200.sh || exit $? ;;
esac
collect() {  # the logs and the side by sides' records so far, as one tarball in OUT
  (cd "$dir" && tar czf "$out/captured.tgz" --ignore-failed-read ./*.log ./*.json ./side*/*.json queue.out 2>/dev/null)
}
queue_follow collect 10 || exit $?
for f in "$dir"/*.log; do
  [ -e "$f" ] || continue
  echo "== $(basename "$f")"
  grep -E '^\[round|^\||over|^losses|^captured|^op by op|^median|Error|error' "$f" | tail -16
done
