#!/usr/bin/env bash
# Issue 19 ("numbers that hold up") on one H200: the comparison engine on the seed's setting.
#   sweep    the repeats=4 sweep of checkpointing on and off (4x1, fp16, 30 steps): paired ranks across processes
#   study0-2 the same study three times (optimize.seed=0,1,2, each in its own paths.root): split x checkpointing x
#            dtype, the seed's 4x1 fp16 checkpointed config as baseline; its confirmation round pairs the answer with
#            the baseline, so the three speed-up intervals come from pairs
# Name the stages to run (default: all): one device call of 10 minutes holds about three of them. Each stage gets at
# most its share (timeout, SIGINT: an interrupted study still prints and records its answer). Logs and stores go to
# RES (/tmp/trust); trust.log (the lines that say what happened) and trust-<stages>.tgz (logs, stores) to OUT.
#
# Here, once:  bash bench/fetch_wheels.sh          (the wheels the GPU machine lacks, into .whl/)
# There (a device run of the checkout, carry [".whl"], timeout_s 600):
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
#     .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit; bash bench/trust_h200.sh sweep study0 study1
# Rehearsal on a CPU (the tiny model, a few minutes): REHEARSAL=1 bash bench/trust_h200.sh
set -uo pipefail
out=${OUT:-bench-out}
res=${RES:-/tmp/trust}
py=${PYTHON:-python3}
mkdir -p "$out" "$res"
export PYTHONUNBUFFERED=1
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(sweep study0 study1 study2)

if [ "${REHEARSAL:-0}" = 1 ]; then
  sweep=(batch.effective=8 batch.split=1x8,8x1 repeats=4 train.steps=12 measure.warmup_steps=2)
  study=(mem_cap=0.6GiB batch.effective=8 model.vocab_size=2048 train.max_length=256 optimize.trials=4
         train.steps=15 measure.warmup_steps=5)
  shares=(240 200)
else
  sweep=(experiment=seed-t4 gpu=auto batch.split=4x1 train.gradient_checkpointing=true,false repeats=4 train.steps=30)
  study=(experiment=seed-t4 gpu=auto mem_cap=14GiB batch.split=4x1 measure.warmup_steps=5 optimize=ckpt-dtype
         optimize.trials=12 train.steps=15 optimize.confirm_budget_s=150)
  shares=(200 250)
fi

NAME=trust RES=$res START=${start:-} BUDGET=
source "$(dirname "$0")/stages.sh"

machine

for name in "${stages[@]}"; do
  case "$name" in
    sweep) stage sweep "${shares[0]}" $py -m pipeline.train -m "${sweep[@]}" paths.root="$res/sweep" ;;
    study[0-9]) stage "$name" "${shares[1]}" $py -m pipeline.optimize "${study[@]}" optimize.seed="${name#study}" \
                  paths.root="$res/$name" ;;
    *) say "unknown stage $name" ;;
  esac
  case "$name" in
    sweep) grep -E '^\||^\[sweep\] [0-9]+ of|^drift' "$res/sweep.log" >> "$res/trust.log" ;;
    study*) grep -E '^\[study\] confirmation|^confirmation round|^  .* (faster than|equal within|against)|best feasible|x the baseline|no speed-up|predictor|device time|^\| [0-9]' "$res/$name.log" >> "$res/trust.log" ;;
  esac
  cp "$res/$name.log" "$res/trust.log" "$out/"  # what a call cut short at its limit still brings back
done
tag=$(IFS=-; echo "${stages[*]}")
tar czf "$out/trust-$tag.tgz" --exclude='compile-cache' --exclude='*.db-journal' -C "$(dirname "$res")" "$(basename "$res")"
cp "$res/trust.log" "$out/trust-$tag.log"
cat "$res/trust.log"
