#!/usr/bin/env bash
# The recorded grid of the seed's setting on one H200 (bench/replay.py replays studies against it): every config of
# the space measured once, as a bruteforce study with no pruning and no skipping by prediction, under the 14 GiB cap
# (a config over it stops at its first step, as in a study). The study resumes where it stopped, so the grid is
# measured over as many device calls as it takes: each call runs until BUDGET_S (default 540 s) and stops it with
# SIGINT; the store lives in GRID_DIR (an ignored folder that a warm machine keeps between calls) and is copied to
# OUT with the exported grid (grid.json) and the study's log.
#
# Here, once: bash bench/fetch_wheels.sh; echo /.grid/ >> .git/info/exclude
# There (carry [".whl"], timeout_s 600), as often as it takes:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
#     .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit; bash bench/grid_h200.sh
# Rehearsal on a CPU (the tiny model, a small space): REHEARSAL=1 bash bench/grid_h200.sh
set -uo pipefail
out=${OUT:-bench-out}
dir=${GRID_DIR:-.grid}
py=${PYTHON:-python3}
budget=${BUDGET_S:-540}
mkdir -p "$out" "$dir"
export PYTHONUNBUFFERED=1
if [ "${REHEARSAL:-0}" = 1 ]; then
  setting=(mem_cap=0.6GiB batch.effective=4 model.vocab_size=2048 train.max_length=128 train.steps=8 measure.warmup_steps=2)
  space='{train.gradient_checkpointing:[true,false],train.loss:[trl,model]}'
  trials=12 cap=0.6 steps=8 warmup=2
else
  setting=(experiment=seed-t4 gpu=auto mem_cap=14GiB batch.split=4x1 train.steps=16 measure.warmup_steps=4)
  space='{train.gradient_checkpointing:[true,false],train.torch_compile:[off,regional],train.compile_mode:[default,reduce-overhead],train.loss:[trl,compiled],train.optimizer:[adamw_torch,adamw_torch_fused]}'
  trials=52 cap=14 steps=16 warmup=4
fi
timeout -s INT "$budget" "$py" -m pipeline.optimize "${setting[@]}" "++optimize.space=$space" \
  optimize.sampler=bruteforce optimize.trials=$trials optimize.prune_factor=100 optimize.skip_margin=100 \
  optimize.confirm=never optimize.study_name=grid paths.root="$dir" 2>&1 | tee -a "$out/grid.log"
"$py" -m bench.grid_export "sqlite:///$dir/optuna.db" grid --cap-gib $cap --steps $steps --warmup $warmup \
  --setting "${setting[*]} optimize.space=$space" > "$out/grid.json"
"$py" -c "import json; g = json.load(open('$out/grid.json')); print(len(g['configs']), 'configs in the grid')"
cp "$dir/optuna.db" "$out/optuna.db"
