#!/usr/bin/env bash
# The GPU benchmarks of BENCHMARKS.md in one lease of a two-GPU machine, each GPU running its own queue on its own
# CPU cores (jobs never share a GPU):
#   GPU 0: the pipeline against plain TRL, 100 steps, repeats 0 and 1       (bench/compare_trl.py)
#   GPU 1: the effective-batch-16 grid against the study, then repeat 2    (bench/grid_vs_study.py, compare_trl.py)
# The queues outlive the command that starts them (setsid), so a run longer than one call is read by later calls:
#   bash bench/h200x2.sh start; bash bench/h200x2.sh wait 540; bash bench/h200x2.sh collect "$OUT"
set -uo pipefail
res=${RES:-/tmp/bench-res}
e16=(model=qwen3-1.7b batch.effective=16 mem_cap=14GiB train.max_length=512 data.length=512 train.padding=max_length
     train.dtype=fp16 train.gradient_checkpointing=true train.steps=12 measure.warmup_steps=4 train.progress_bar=false)
case "${1:-}" in
  start)
    mkdir -p "$res"
    nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv > "$res/gpus.csv"
    CUDA_VISIBLE_DEVICES=0 setsid taskset -c 0-7 bash -c "
      python3 bench/compare_trl.py measure --steps 100 --warmup 5 --repeats 2 --first 0 --out $res/cmp --work /tmp/w0
      echo \$? > $res/gpu0.done" > "$res/gpu0.log" 2>&1 < /dev/null &
    CUDA_VISIBLE_DEVICES=1 setsid taskset -c 16-23 bash -c "
      python3 bench/grid_vs_study.py run --out $res/e16 --trials 20 -- ${e16[*]}
      python3 bench/grid_vs_study.py summarize $res/e16 > $res/e16-summary.txt 2>&1
      python3 bench/compare_trl.py measure --steps 100 --warmup 5 --repeats 1 --first 2 --out $res/cmp --work /tmp/w2
      echo \$? > $res/gpu1.done" > "$res/gpu1.log" 2>&1 < /dev/null &
    sleep 2; echo "started; logs in $res" ;;
  wait)
    deadline=$(( $(date +%s) + ${2:-540} ))
    while [ "$(date +%s)" -lt "$deadline" ] && ! { [ -e "$res/gpu0.done" ] && [ -e "$res/gpu1.done" ]; }; do sleep 10; done
    for q in gpu0 gpu1; do echo "== $q: $(cat "$res/$q.done" 2>/dev/null || echo running)"; tail -4 "$res/$q.log"; done
    nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv,noheader ;;
  collect)
    tar czf "$2/bench-res.tgz" -C "$(dirname "$res")" "$(basename "$res")" --exclude='*.db-journal' ;;
  *) echo "usage: $0 start | wait [seconds] | collect DIR" >&2; exit 2 ;;
esac
