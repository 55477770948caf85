#!/usr/bin/env bash
# Whether a capped answer on variable-length chats fits from one run to the next under each `train.allocator`: the
# chats study's answer of 2026-12-06 (Qwen3-0.6B, max_length 1,024, 8x1, bucketed padding, eager layers, adapters in
# fp32, TRL's loss; 19.07 GiB of 20 in its trial) ran out of memory at step 10 of every 16-step run beside its
# neighbours, 1.80 GiB reserved and unused. In a queue that outlives a device call, collected by later calls:
#   short   16 steps (6 warm-up) under the 20 GiB cap, cached / unsplit / expandable, 2 rotated rounds of fresh
#           processes (`bench.side_by_side` over `bench.job_json`: each step's reserved and allocated peaks)
#   epoch   one pass over the 2,000 records (250 steps) under the cap, cached and expandable once each: the run the
#           study's fit claims (`optimize.fit_over=epoch`)
#   pair    cached against expandable, paired: 9 steps (the first 4 left out), 3 rotated rounds (not in the default
#           stages; on a GPU only). Both fit 9 steps because this order brings the largest shape at step 10: a speed
#           comparison without it.
# The records of 2026-12-06 (bench/results/fragment-h100-1206) also hold a stage `probe` (the answer as a study's
# baseline trial, cached and expandable) of commit 3cfa1e7, whose feature was reverted.
# Each run's JSON (status, step times, running peaks, the error of one that failed) and each stage's log come back
# in OUT as one tarball.
#
# Here, once: bash bench/fetch_wheels.sh
# There (carry [".whl"], timeout_s 600): bash bench/fragment_h200.sh start   # the first call
#                                        bash bench/fragment_h200.sh         # later calls: follow and collect
# Rehearsal on a CPU (the tiny model; every allocator but cached is refused there):
#   REHEARSAL=1 bash bench/fragment_h200.sh start
set -uo pipefail
out=${OUT:-bench-out}
dir=${DIR:-/root/fragment}
py=${PYTHON:-python3}
wait_s=${WAIT_S:-560}
stages=${STAGES:-short epoch}
mkdir -p "$out" "$dir"
source "$(dirname "$0")/stages.sh"

if [ "${REHEARSAL:-0}" = 1 ]; then
  answer=(model=tiny gpu=cpu mem_cap=3GiB model.vocab_size=2048 train.max_length=128 batch.effective=4 batch.split=4x1
    data=jsonl train.padding=buckets)
  allocators=(cached) whole=(cached) records=64 epoch_steps=16 rounds=2
else
  answer=(model=qwen3-0.6b gpu=auto mem_cap=20GiB train.max_length=1024 batch.effective=8 batch.split=8x1 data=jsonl
    train.adapter_dtype=fp32 model.attn_implementation=sdpa train.compile_mode=default train.dtype=bf16
    train.gradient_checkpointing=false train.liger_kernel=false train.loss=trl train.optimizer=adamw_torch
    train.optimizer_step=eager train.padding=buckets train.torch_compile=off)
  allocators=(cached unsplit expandable) whole=(cached expandable) records=2000 epoch_steps=250 rounds=2
  if [ ! -d /tmp/site ]; then
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
      || exit 1
  fi
  export PYTHONPATH=/tmp/site
fi

job() {  # job ALLOCATOR STEPS: the answer under ALLOCATOR for STEPS steps, as `bench.job_json` runs it
  echo "python -m bench.job_json ${answer[*]} data.path=$dir/chats.jsonl paths.root=$dir/runs train.allocator=$1" \
    "train.steps=$2 measure.warmup_steps=6"
}

stage() {  # stage NAME: one stage of the queue, from the copy in DIR
  [ -e "$dir/chats.jsonl" ] || "$py" -m bench.chats "$dir/chats.jsonl" --records $records --shortest 30 --longest 1000
  case "$1" in
    short)
      local sides=()
      for a in "${allocators[@]}"; do sides+=("$a=$(job "$a" 16)"); done
      "$py" -m bench.side_by_side --rounds $rounds --warmup 6 --out "$dir/short" "${sides[@]}" ;;
    pair)
      "$py" -m bench.side_by_side --rounds 3 --warmup 4 --out "$dir/pair" "cached=$(job cached 9)" \
        "expandable=$(job expandable 9)" ;;
    epoch)
      mkdir -p "$dir/epoch"
      for a in "${whole[@]}"; do
        # shellcheck disable=SC2046 # the command's words, as side_by_side splits them
        "$py" $(job "$a" $epoch_steps | cut -d' ' -f2-) --out "$dir/epoch/$a.json"
        echo "$a: exit $?"
      done ;;
  esac
}

case "${1:-follow}" in
  queue)
    queue_enter && queue_run
    exit 0 ;;
  start)
    queue_start fragment_h200.sh || exit $? ;;
esac
collect() {  # the logs and every run's JSON so far, as one tarball in OUT
  (cd "$dir" && tar czf "$out/fragment.tgz" --ignore-failed-read ./*.log ./short ./epoch ./pair queue.out 2>/dev/null)
}
queue_follow collect 10 || exit $?
for f in "$dir"/*.log; do
  [ -e "$f" ] || continue
  echo "== $(basename "$f")"
  grep -E '^\||exit|failed|over' "$f" | tail -12
done
