#!/usr/bin/env bash
# `optimize=fastest` on the seed's setting on one H200, once per seed in SEEDS (default "1 2 3"): each study searches
# the split and every speed knob this setting can run, ends with its confirmation round against the baseline (the
# seed's setting: experiment=seed-t4 at split BASE_SPLIT, default 4x1) and prints its answer, what each knob bought
# and the predictor's error.
# The studies run one after the other in a queue that outlives a device call (its own session), from a copy of the
# repository in DIR, sharing one compile cache; each call follows the queue for WAIT_S seconds (default 560) and copies
# the logs to OUT, so the queue is collected over as many calls as it takes.
#
# There (carry [".whl"], timeout_s 600): bash bench/fastest_h200.sh start   # the first call
#                                        bash bench/fastest_h200.sh         # later calls: follow and collect
# EXTRA adds overrides to every study (e.g. EXTRA="measure.pin_cpu=true").
# Rehearsal on a CPU (the tiny model, a small space, one seed): REHEARSAL=1 SEEDS=1 bash bench/fastest_h200.sh start
set -uo pipefail
out=${OUT:-bench-out}
dir=${DIR:-/root/fastest}
py=${PYTHON:-python3}
wait_s=${WAIT_S:-560}
mkdir -p "$out" "$dir"
source "$(dirname "$0")/stages.sh"
if [ "${REHEARSAL:-0}" = 1 ]; then
  setting=(mem_cap=1GiB batch.effective=4 model.vocab_size=2048 train.max_length=128 train.steps=8
    measure.warmup_steps=2 optimize.probe_steps=3 optimize.trials=4
    '++optimize.space={train.torch_compile:[off],train.loss:[trl,model],train.optimizer_step:[eager]}')
else
  setting=(experiment=seed-t4 gpu=auto mem_cap=14GiB batch.split=${BASE_SPLIT:-4x1} train.steps=16 measure.warmup_steps=4)
  if [ ! -d /tmp/site ]; then
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
      || exit 1
  fi
  export PYTHONPATH=/tmp/site
fi
case "${1:-follow}" in
  queue)  # the studies, one after the other, from the copy in DIR
    queue_enter || exit 2
    for s in ${SEEDS:-1 2 3}; do
      start=$(date +%s)
      "$py" -m pipeline.optimize "${setting[@]}" ${EXTRA:-} optimize=fastest optimize.seed="$s" optimize.study_name="fastest-seed$s" \
        paths.root="$dir/runs" > "$dir/study-$s.log" 2>&1
      echo "seed $s: exit $? after $(($(date +%s) - start)) s" >> "$dir/queue.log"
    done
    touch "$dir/queue.done"
    exit 0 ;;
  start)
    queue_start fastest_h200.sh || exit $? ;;
esac
collect() { cp "$dir"/*.log "$out/" 2>/dev/null; }
queue_follow collect 5 || exit $?
[ -e "$dir/runs/optuna.db" ] && cp "$dir/runs/optuna.db" "$out/optuna.db"
for f in "$dir"/study-*.log; do
  [ -e "$f" ] || continue
  echo "== $f: $(grep -c '^\[job\].*: ok' "$f") jobs ok, $(grep -c '^\[job\].*: starting' "$f") started"
  grep -E '^\[study\]|^best feasible|^answer|x the baseline|^  no speed-up|^    train\.|^decided|^memory predictor|^device time|^error' "$f" | tail -25
done
