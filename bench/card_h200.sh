#!/usr/bin/env bash
# A result card from one H200 (the card that tests/test_cards.py merges with a CPU card): the seed's T4 setting
# (experiment=seed-t4: Qwen3-1.7B, fp16, checkpointing, 512 tokens, effective batch 4, the T4's 15 GiB emulated as
# the cap), splits 1x4, 2x2, 4x1 in three paired rounds of 30 steps, then `python -m pipeline.card` over its store.
# Run on the GPU machine as the other bench scripts are (wheels from bench/fetch_wheels.sh, carry [".whl"]):
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
#     .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit; bash bench/card_h200.sh
# then commit OUT/cards/*.json and *.md as bench/results/cards/h200-seed-t4.json and .md.
# SWEEP_S (default 480) bounds the sweep: at it the sweep is stopped as Ctrl-C would, and the card is of what ran.
# Rehearsal on a CPU (the tiny model, about two minutes): REHEARSAL=1 bash bench/card_h200.sh
set -uo pipefail
out=${OUT:-bench-out}
res=${RES:-/tmp/card}
py=${PYTHON:-python3}
mkdir -p "$out" "$res"
export PYTHONUNBUFFERED=1
if [ "${REHEARSAL:-0}" = 1 ]; then
  sweep=(batch.split=1x4,2x2,4x1 repeats=3 train.steps=8 measure.warmup_steps=2)
else
  sweep=(experiment=seed-t4 batch.split=1x4,2x2,4x1 repeats=3 train.steps=30 measure.warmup_steps=5)
fi
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "no GPU"; } \
  > "$out/machine.txt"
timeout -s INT "${SWEEP_S:-480}" $py -m pipeline.train -m "${sweep[@]}" paths.root="$res" 2>&1 | tee "$out/card-sweep.log"
$py -m pipeline.card --tracking-uri "sqlite:///$res/mlflow.db" --out "$out/cards" 2>&1 | tee "$out/card.log"
