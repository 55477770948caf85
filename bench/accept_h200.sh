#!/usr/bin/env bash
# The acceptance studies off the seed's setting, in a queue that outlives a device call (its own session), collected
# by later calls; each stage's output goes to DIR/STAGE.log:
#   small       `optimize=fastest` on grid-small's setting (Qwen3-0.6B, 1,024 tokens, effective batch 8, 20 GiB cap)
#   near-small  its answer beside the 3 fastest fitting configs of grid-small (the H100's recorded grid), 3 rotated
#               rounds of fresh processes (`bench.near`): is the answer within 5% of the best of its neighbours
#   chats       `optimize=fastest` on the chats grid's setting (variable-length chats, max_length 1,024, effective
#               batch 8, 20 GiB cap, one epoch must fit)
#   near-chats  its answer beside the 3 fastest fitting configs of the chats grid, 3 rotated rounds
#   seed3       `optimize=fastest optimize.seed=3` on the seed's setting (bench/fastest_h200.sh's study)
# ROUNDS (default 3): the rounds of the near stages.
# The grids were timed on an H100 (their card.txt): on another card the neighbours are still the grid's configs, but
# their recorded speeds are not this card's (the rounds measure them again).
#
# There (carry [".whl"], timeout_s 600):  STAGES="small near-small" bash bench/accept_h200.sh start   # the first call
#                                         bash bench/accept_h200.sh                                   # later calls
# Rehearsal on a CPU (the tiny model, a hand-written grid): REHEARSAL=1 STAGES="small near-small" bash bench/accept_h200.sh start
set -uo pipefail
out=${OUT:-bench-out}
dir=${DIR:-/root/accept}
py=${PYTHON:-python3}
wait_s=${WAIT_S:-560}
stages=${STAGES:-small near-small seed3}
mkdir -p "$out" "$dir"
source "$(dirname "$0")/stages.sh"

if [ "${REHEARSAL:-0}" = 1 ]; then
  small=(model=tiny gpu=cpu mem_cap=3GiB batch.effective=4 batch.split=4x1 model.vocab_size=2048 train.max_length=128
    data.length=128 optimize.trials=4 '++optimize.space={train.torch_compile:[off],train.loss:[trl,model]}')
  chats=("${small[@]}" data=jsonl optimize.fit_over=epoch)
  seed=("${small[@]}")
  steps=(train.steps=6 measure.warmup_steps=2) seed_steps=("${steps[@]}") near_steps=(train.steps=6 measure.warmup_steps=2) rounds=2 warmup=2
  small_grid=$dir/tiny-grid.json chats_grid=$dir/tiny-grid.json records=64
  [ -e "$small_grid" ] || cat > "$small_grid" <<'EOF'
{"setting": "model=tiny gpu=cpu model.vocab_size=2048 train.max_length=128 data.length=128 batch.effective=4 batch.split=4x1 optimize.space={train.loss:[trl,model]} (hand-written)",
 "cap_gib": 3.0, "configs": [{"params": {"train.loss": "trl"}, "step_s": 0.1, "peak_gib": 0.5},
                             {"params": {"train.loss": "model"}, "step_s": 0.2, "peak_gib": 0.6}]}
EOF
else
  small=(model=qwen3-0.6b gpu=auto mem_cap=20GiB train.max_length=1024 data.length=1024 batch.effective=8 batch.split=8x1)
  chats=(model=qwen3-0.6b gpu=auto mem_cap=20GiB train.max_length=1024 batch.effective=8 batch.split=8x1 data=jsonl
    optimize.fit_over=epoch)
  seed=(experiment=seed-t4 gpu=auto mem_cap=14GiB batch.split=4x1)
  steps=(train.steps=12 measure.warmup_steps=4) seed_steps=(train.steps=16 measure.warmup_steps=4) near_steps=(train.steps=16 measure.warmup_steps=6) rounds=${ROUNDS:-3} warmup=6
  small_grid=$dir/repo/bench/results/record-h100-1206/grid-small.json
  chats_grid=$dir/repo/bench/results/record-h100-1205b/grid-chats.json records=2000
  if [ ! -d /tmp/site ]; then
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
      || exit 1
  fi
  export PYTHONPATH=/tmp/site
fi

study() {  # study NAME SETTING...: `optimize=fastest` on SETTING, its store in DIR/NAME
  local name=$1
  shift
  "$py" -m pipeline.optimize "$@" optimize=fastest optimize.study_name="accept-$name" \
    paths.root="$dir/$name"
}

near() {  # near NAME GRID EXTRA...: NAME's answer beside GRID's fastest fitting configs, in rotated rounds
  local name=$1 grid=$2
  shift 2
  "$py" -m bench.near "$dir/$name.log" "$grid" --top 3 --rounds $rounds --warmup $warmup --out "$dir/near-$name" -- \
    "${near_steps[@]}" paths.root="$dir/$name" "$@"
}

chats_data() {
  [ -e "$dir/chats.jsonl" ] || "$py" -m bench.chats "$dir/chats.jsonl" --records $records --shortest 30 --longest 1000
}

stage() {
  case "$1" in
    small) study small "${small[@]}" "${steps[@]}" ;;
    near-small) near small "$small_grid" "${small[2]}" ;;
    chats) chats_data && study chats "${chats[@]}" "${steps[@]}" data.path="$dir/chats.jsonl" ;;
    near-chats) near chats "$chats_grid" "${chats[2]}" data.path="$dir/chats.jsonl" ;;
    seed3) study seed3 "${seed[@]}" "${seed_steps[@]}" optimize.seed=3 ;;
  esac
}

case "${1:-follow}" in
  queue)
    queue_enter && queue_run
    exit 0 ;;
  start)
    queue_start accept_h200.sh || exit $? ;;
esac
collect() {
  (cd "$dir" && tar czf "$out/accept.tgz" --ignore-failed-read ./*.log ./near-*/*.json ./*/optuna.db queue.out 2>/dev/null)
}
queue_follow collect 10 || exit $?
for s in $stages; do
  f=$dir/$s.log
  [ -e "$f" ] || continue
  echo "== $s: $(grep -c '^\[job\].*: ok' "$f") jobs ok, $(grep -c '^\[round' "$f") side-by-side runs"
  grep -E '^best feasible|x the baseline|faster than the baseline|^\| |^\[near\]|^memory predictor|^error|over|^the answer' "$f" | tail -14
done
