#!/usr/bin/env bash
# What the replays and the memory predictor are tuned and tested on, recorded on one H200 in a queue that outlives a
# device call (its own session), collected by later calls:
#   spread-seed   the seed's compiled answer (regional layers with CUDA graphs, compiled loss) in fresh processes:
#                 5 sharing one compile cache as a study does (warm), 3 each with an empty cache of its own (cold),
#                 2 pinned to four cores (taskset), 3 profiled (device and host time per step); `bench.spread` prints them
#   spread-causes the seed's answer, 4 processes each: profiled (where the host's time goes), without the memory cap,
#                 and with the allocator's expandable segments
#   spread-fix    the host's CPUs and memory nodes; the answer with its optimizer step compiled (5 processes; a CUDA
#                 graph of its own is refused beside reduce-overhead's),
#                 with fused AdamW (5: one launch where the for-each step loops over 392 tensors on the host), and
#                 each process a fresh interpreter (launcher.kind=subprocess, 3)
#   spread-pin    whether the CPU a job's thread runs on sets its host speed: each CPU's speed (bench.cpu_speed), then
#                 the answer's processes free (each records its CPU), all on the fastest CPU, and on the slowest; the
#                 same free and fastest for the 0.6B setting's answer and for the baseline (the seed's setting at 4x1)
#   spread-pinned measure.pin_cpu=false,true in paired rounds of fresh processes (one sweep each): the seed's answer
#                 and the 0.6B setting's (5 rounds), the baseline (3 rounds); the CPUs' speeds before and after;
#                 PINNED="seed small" runs those settings only, the table printed after each
#   spread-small  the same answer's shape on Qwen3-0.6B, 1,024 tokens, effective batch 8 (8x1), 5 warm processes
#   grid-chats    every config of split x padding x compilation x mode x loss on variable-length chats (Qwen3-0.6B,
#                 max_length 1,024, effective batch 8), once, uncapped (the replay applies the 20 GiB cap)
#   grid-small    every config of split x compilation x mode x loss x Liger on Qwen3-0.6B at 1,024 tokens, effective
#                 batch 8, once, uncapped
#   grid-alloc    the chats at 4x2, padding x loss x the CUDA allocator (train.allocator: cached, expandable), once:
#                 whether expandable segments take the layouts' leftover segments out of the peak (12 configs)
#   cap-small     grid-small's compiled-loss configs whose allocated and reserved peaks straddle 20 GiB, run under a
#                 20 GiB cap, both allocators, 3 rotated rounds: whether a capped run needs the reserved peak or only
#                 the allocated one, and what expandable segments cost beside CUDA graphs (12 jobs)
#   cap-unsplit   cap-split through the config: train.allocator=unsplit (the value as a user sets it), both compile
#                 modes, 3 rounds (6 jobs); each run records the settings the knob gave (version.cuda_alloc_conf)
#   cap-split     cap-small's cached allocator with max_split_size_mb:512 (blocks over it never split: a segment freed
#                 whole goes back under the cap), both compile modes, 3 rounds: whether the runs that failed asking for
#                 one fp32 copy of the logits beside 4.66 GiB reserved unused then fit, and at what speed (6 jobs)
# Each grid is a bruteforce study with no pruning and no skipping, under a cap of the whole card (WHOLE); it resumes from its store, so a queue cut short
# is continued by `start` on a machine that still holds DIR, or on a fresh one from the stores brought back:
# RESUME=FOLDER (its grid-NAME-optuna.db files, e.g. bench/results/record-h100-1205, and grid-NAME-mlflow.db where
# kept) copies each to DIR/NAME first, where the folder's card.txt names this machine's card (speeds from one card).
# Every call copies the logs, the spread tables and the grids (JSON and store) into OUT as one tarball.
#
# Here, once: bash bench/fetch_wheels.sh
# There (carry [".whl"], timeout_s 600): bash bench/record_h200.sh start   # the first call
#                                        bash bench/record_h200.sh         # later calls: follow and collect
# STAGES picks the stages (default: all four, in that order).
# Rehearsal on a CPU (the tiny model, small spaces): REHEARSAL=1 bash bench/record_h200.sh start
set -uo pipefail
out=${OUT:-bench-out}
dir=${DIR:-/root/record}
py=${PYTHON:-python3}
wait_s=${WAIT_S:-560}
stages=${STAGES:-spread-seed spread-small grid-chats grid-small}
mkdir -p "$out" "$dir"
source "$(dirname "$0")/stages.sh"

if [ "${REHEARSAL:-0}" = 1 ]; then
  seed=(model=tiny gpu=cpu mem_cap=14GiB batch.split=4x1 batch.effective=4 train.steps=10 measure.warmup_steps=2)
  small=("${seed[@]}" train.max_length=256 data.length=256)
  base=(model=tiny gpu=cpu mem_cap=14GiB batch.split=4x1 batch.effective=4 train.steps=8 measure.warmup_steps=4)
  chats_model=(model=tiny gpu=cpu model.vocab_size=2048 train.max_length=512 batch.effective=8 batch.split=8x1)
  chats_space='{batch.split:[4x2,8x1],train.padding:[longest,padding_free],train.loss:[trl,compiled]}'
  small_model=(model=tiny gpu=cpu model.vocab_size=2048 train.max_length=256 data.length=256 batch.effective=8
    batch.split=8x1)
  small_space='{batch.split:[4x2,8x1],train.loss:[trl,model,compiled]}'
  alloc_space='{batch.split:[4x2],train.padding:[longest,padding_free],train.allocator:[cached,expandable]}'
  allocators=cached modes=default unsplit=cached  # expandable, unsplit and CUDA graphs are the GPU's
  grid_steps=(train.steps=6 measure.warmup_steps=2) records=160 cold=2 warm=2 pinned=1 profiled=1 cores=0 whole=8GiB causes=1
else
  seed=(experiment=seed-t4 gpu=auto mem_cap=14GiB batch.split=4x1 train.adapter_dtype=compute train.dtype=bf16
    train.gradient_checkpointing=false train.torch_compile=regional train.compile_mode=reduce-overhead
    train.loss=compiled train.steps=24 measure.warmup_steps=6)
  base=(experiment=seed-t4 gpu=auto mem_cap=14GiB batch.split=4x1 train.steps=16 measure.warmup_steps=4)
  small=(model=qwen3-0.6b gpu=auto mem_cap=20GiB train.max_length=1024 data.length=1024 batch.effective=8
    batch.split=8x1 train.adapter_dtype=compute train.dtype=bf16 train.gradient_checkpointing=false
    train.torch_compile=regional train.compile_mode=reduce-overhead train.loss=compiled train.steps=24
    measure.warmup_steps=6)
  chats_model=(model=qwen3-0.6b gpu=auto train.max_length=1024 batch.effective=8 batch.split=8x1 train.dtype=bf16
    train.adapter_dtype=compute train.gradient_checkpointing=false)
  chats_space='{batch.split:[4x2,8x1],train.padding:[longest,max_length,padding_free,buckets],train.torch_compile:[off,regional],train.compile_mode:[default,reduce-overhead],train.loss:[trl,compiled]}'
  alloc_space='{batch.split:[4x2],train.padding:[longest,buckets,max_length],train.loss:[trl,compiled],train.allocator:[cached,expandable]}'
  small_model=(model=qwen3-0.6b gpu=auto train.max_length=1024 data.length=1024 batch.effective=8 batch.split=8x1
    train.dtype=bf16
    train.adapter_dtype=compute train.gradient_checkpointing=false)
  small_space='{batch.split:[4x2,8x1],train.torch_compile:[off,regional],train.compile_mode:[default,reduce-overhead],train.loss:[trl,model,compiled,liger],train.liger_kernel:[false,true]}'
  allocators=cached,expandable modes=default,reduce-overhead unsplit=unsplit
  grid_steps=(train.steps=12 measure.warmup_steps=4) records=2000 cold=3 warm=5 pinned=2 profiled=3 cores=4-7 whole=130GiB causes=4
  if [ ! -d /tmp/site ]; then
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
      || exit 1
  fi
  export PYTHONPATH=/tmp/site
fi

grid() {  # grid NAME CAP_GIB SPACE SETTING...: a bruteforce study over SPACE, exported to NAME.json
  local name=$1 cap=$2 space=$3
  shift 3
  "$py" -m pipeline.optimize "$@" mem_cap=$whole "${grid_steps[@]}" "++optimize.space=$space" optimize.sampler=bruteforce \
    optimize.trials=200 optimize.prune_factor=100 optimize.skip_margin=100 optimize.confirm=never \
    optimize.study_name="$name" paths.root="$dir/$name"
  "$py" -m bench.grid_export "sqlite:///$dir/$name/optuna.db" "$name" --cap-gib "$cap" \
    --steps "${grid_steps[0]#train.steps=}" --warmup "${grid_steps[1]#measure.warmup_steps=}" \
    --setting "$* optimize.space=$space (recorded uncapped; cap $cap GiB applied by the replay)" > "$dir/$name.json"
}

stage() {  # stage NAME: one stage of the queue, from the copy in DIR
  case "$1" in
    spread-seed)
      "$py" -m pipeline.train -m "${seed[@]}" repeats=$warm paths.root="$dir/seed-warm"
      for i in $(seq 1 $cold); do "$py" -m pipeline.train "${seed[@]}" paths.root="$dir/seed-cold-$i"; done
      taskset -c "$cores" "$py" -m pipeline.train -m "${seed[@]}" repeats=$pinned paths.root="$dir/seed-pinned"
      "$py" -m pipeline.train -m "${seed[@]}" repeats=$profiled measure.profile=true paths.root="$dir/seed-profiled"
      colds=$(seq -s, -f "$dir/seed-cold-%g" 1 $cold)
      "$py" -m bench.spread warm="$dir/seed-warm" cold="$colds" pinned="$dir/seed-pinned" \
        profiled="$dir/seed-profiled" --warmup 6 --caches $(seq -f "$dir/seed-cold-%g/compile-cache" 1 $cold) \
        "$dir/seed-warm/compile-cache" ;;
    spread-causes)  # which of the memory cap, the allocator's segments and Python's collector the slow processes need
      mkdir -p "$dir/causes-cache"
      for v in profiled nocap expandable; do mkdir -p "$dir/causes-$v" && ln -sfn "$dir/causes-cache" "$dir/causes-$v/compile-cache"; done
      "$py" -m pipeline.train -m "${seed[@]}" repeats=$causes measure.profile=true paths.root="$dir/causes-profiled"
      uncapped=(); for a in "${seed[@]}"; do [[ $a == mem_cap=* ]] || uncapped+=("$a"); done
      "$py" -m pipeline.train -m "${uncapped[@]}" repeats=$causes paths.root="$dir/causes-nocap"
      PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "$py" -m pipeline.train -m "${seed[@]}" repeats=$causes \
        paths.root="$dir/causes-expandable"
      "$py" -m bench.spread profiled="$dir/causes-profiled" nocap="$dir/causes-nocap" \
        expandable="$dir/causes-expandable" --warmup 6 ;;
    spread-fix)  # the host's topology, then what the answer's spread is without a host loop in its optimizer step
      lscpu | grep -Ei 'model name|^cpu\(s\)|thread|core|socket|numa'; nvidia-smi topo -m
      cat /sys/bus/pci/devices/*/numa_node 2>/dev/null | sort | uniq -c
      "$py" -m pipeline.train -m "${seed[@]}" train.optimizer_step=compiled repeats=$warm paths.root="$dir/fix-compiled"
      "$py" -m pipeline.train -m "${seed[@]}" train.optimizer=adamw_torch_fused repeats=$warm paths.root="$dir/fix-fused"
      "$py" -m pipeline.train -m "${seed[@]}" launcher.kind=subprocess repeats=$cold paths.root="$dir/fix-subprocess"
      "$py" -m bench.spread compiled="$dir/fix-compiled" fused="$dir/fix-fused" subprocess="$dir/fix-subprocess" --warmup 6 ;;
    spread-pin)
      "$py" -m bench.cpu_speed --rounds 10 --json "$dir/cpus-before.json"
      fast=$("$py" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(min(d, key=lambda c: sum(d[c].values())))' "$dir/cpus-before.json")
      slow=$("$py" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(max(d, key=lambda c: sum(d[c].values())))' "$dir/cpus-before.json")
      mkdir -p "$dir/pin-cache"
      for v in seed-free seed-fast seed-slow small-free small-fast base-free base-fast; do
        mkdir -p "$dir/pin-$v" && ln -sfn "$dir/pin-cache" "$dir/pin-$v/compile-cache"
      done
      "$py" -m pipeline.train -m "${seed[@]}" repeats=$warm paths.root="$dir/pin-seed-free"
      taskset -c "$fast" "$py" -m pipeline.train -m "${seed[@]}" repeats=$warm paths.root="$dir/pin-seed-fast"
      taskset -c "$slow" "$py" -m pipeline.train -m "${seed[@]}" repeats=$cold paths.root="$dir/pin-seed-slow"
      "$py" -m bench.spread seed-free="$dir/pin-seed-free" seed-fast="$dir/pin-seed-fast" \
        seed-slow="$dir/pin-seed-slow" --warmup 6
      "$py" -m pipeline.train -m "${small[@]}" repeats=$warm paths.root="$dir/pin-small-free"
      taskset -c "$fast" "$py" -m pipeline.train -m "${small[@]}" repeats=$warm paths.root="$dir/pin-small-fast"
      "$py" -m bench.spread small-free="$dir/pin-small-free" small-fast="$dir/pin-small-fast" --warmup 6
      "$py" -m pipeline.train -m "${base[@]}" repeats=$cold paths.root="$dir/pin-base-free"
      taskset -c "$fast" "$py" -m pipeline.train -m "${base[@]}" repeats=$cold paths.root="$dir/pin-base-fast"
      "$py" -m bench.spread base-free="$dir/pin-base-free" base-fast="$dir/pin-base-fast" --warmup 4
      "$py" -m bench.cpu_speed --rounds 10 --json "$dir/cpus-after.json" ;;
    spread-pinned)
      "$py" -m bench.cpu_speed --rounds 10 --json "$dir/cpus-pinned-before.json"
      mkdir -p "$dir/pinned-cache"
      for v in seed small base; do mkdir -p "$dir/pinned-$v" && ln -sfn "$dir/pinned-cache" "$dir/pinned-$v/compile-cache"; done
      tables=()
      for v in ${PINNED:-seed small base}; do  # PINNED: which settings, in this order (a short call: seed small)
        case $v in seed) args=("${seed[@]}") n=$warm ;; small) args=("${small[@]}") n=$warm ;; base) args=("${base[@]}") n=$cold ;; esac
        "$py" -m pipeline.train -m "${args[@]}" measure.pin_cpu=false,true repeats=$n paths.root="$dir/pinned-$v"
        tables+=("$v-free=$dir/pinned-$v?measure.pin_cpu=false" "$v-pinned=$dir/pinned-$v?measure.pin_cpu=true")
        "$py" -m bench.spread "${tables[@]}" --warmup 6
      done
      "$py" -m bench.cpu_speed --rounds 10 --json "$dir/cpus-pinned-after.json" ;;
    spread-small)
      "$py" -m pipeline.train -m "${small[@]}" repeats=$warm paths.root="$dir/small-warm"
      "$py" -m bench.spread warm="$dir/small-warm" --warmup 6 ;;
    grid-chats)
      [ -e "$dir/chats.jsonl" ] || "$py" -m bench.chats "$dir/chats.jsonl" --records $records --shortest 30 --longest 1000
      grid grid-chats 20 "$chats_space" "${chats_model[@]}" data=jsonl data.path="$dir/chats.jsonl" \
        optimize.fit_over=epoch ;;
    grid-small)
      grid grid-small 20 "$small_space" "${small_model[@]}" ;;
    cap-small)
      "$py" -m pipeline.train -m "${small_model[@]}" mem_cap=20GiB "${grid_steps[@]}" train.loss=compiled \
        train.torch_compile=regional train.compile_mode=$modes train.allocator=$allocators repeats=3 \
        paths.root="$dir/cap-small" ;;
    cap-split)
      PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:512 "$py" -m pipeline.train -m "${small_model[@]}" mem_cap=20GiB \
        "${grid_steps[@]}" train.loss=compiled train.torch_compile=regional train.compile_mode=$modes \
        train.allocator=cached repeats=3 paths.root="$dir/cap-split" ;;
    cap-unsplit)
      "$py" -m pipeline.train -m "${small_model[@]}" mem_cap=20GiB "${grid_steps[@]}" train.loss=compiled \
        train.torch_compile=regional train.compile_mode=$modes train.allocator=$unsplit repeats=3 \
        paths.root="$dir/cap-unsplit" ;;
    grid-alloc)
      [ -e "$dir/chats.jsonl" ] || "$py" -m bench.chats "$dir/chats.jsonl" --records $records --shortest 30 --longest 1000
      grid grid-alloc 20 "$alloc_space" "${chats_model[@]}" data=jsonl data.path="$dir/chats.jsonl" \
        optimize.fit_over=epoch ;;
  esac
}

card() {  # the card the grids are timed on, as one line
  nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | grep . || echo "no GPU"
}

case "${1:-follow}" in
  queue)
    queue_enter && queue_run
    exit 0 ;;
  start)
    here=$(card) && mkdir -p "$dir" && echo "$here" > "$dir/card.txt"
    if [ -n "${RESUME:-}" ]; then  # grid stores brought back from an earlier machine: each grid goes on where it stopped
      was=$(cat "$RESUME/card.txt" 2>/dev/null || echo "$here")
      if [ "$was" != "$here" ]; then
        echo "RESUME=$RESUME was timed on $was, this machine has $here:" \
          "a grid's speeds come from one card; accepted: the same card, or no RESUME (the grid recorded whole)" >&2
        exit 2
      fi
      for f in "$RESUME"/grid-*-optuna.db; do
        [ -e "$f" ] || { echo "RESUME=$RESUME holds no grid-NAME-optuna.db" >&2; exit 2; }
        n=$(basename "$f" -optuna.db)
        [ ! -e "$dir/$n/optuna.db" ] || continue  # this machine's own store is newer
        mkdir -p "$dir/$n" && cp "$f" "$dir/$n/optuna.db" || exit 2
        [ ! -e "$RESUME/$n-mlflow.db" ] || cp "$RESUME/$n-mlflow.db" "$dir/$n/mlflow.db" || exit 2
      done
    fi
    queue_start record_h200.sh || exit $? ;;
esac
collect() {  # the logs, spread tables and grids so far (with their MLflow runs: the allocated peaks), as one tarball in OUT
  (cd "$dir" && tar czf "$out/record.tgz" --ignore-failed-read ./*.log ./*.json ./grid-*/optuna.db ./grid-*/mlflow.db ./cap-*/mlflow.db ./pin-*/mlflow.db ./pinned-*/mlflow.db card.txt queue.out 2>/dev/null)
}
queue_follow collect 10 || exit $?
for f in "$dir"/*.log; do
  [ -e "$f" ] || continue
  echo "== $(basename "$f"): $(grep -c '^\[job\].*: ok' "$f") jobs ok"
  grep -E '^\|.*\| [0-9]+ \||^autotuned|^\[study\].*valid configs|^error' "$f" | tail -8
done
