#!/usr/bin/env bash
# The GPU benchmarks of BENCHMARKS.md on one two-GPU machine, each GPU running its own queue on its own
# CPU cores (jobs never share a GPU):
#   start:  GPU 0: the pipeline against plain TRL, 100 steps, repeats 0 and 1   (bench/compare_trl.py)
#           GPU 1: the effective-batch-16 grid against the study, then repeat 2 (grid_vs_study.py, compare_trl.py)
#   verify: GPU 0: the meter's cost in one process, 200 steps per split          (bench/meter_overhead.py)
#           GPU 1: the effective-batch-16 grid against the study                 (bench/grid_vs_study.py)
#   knobs:  GPU 0: the effective-batch-4 study with Liger kernels in the space   (MEM_CAP=14GiB, 24 configs)
#           GPU 1: 4x1 fp16 with and without checkpointing, each with and without torch.compile, 30 steps
# The queues outlive the command that starts them (setsid); `wait` blocks at most the seconds given, so progress can
# be read in bounded steps:
#   bash bench/h200x2.sh start; bash bench/h200x2.sh wait 540; bash bench/h200x2.sh collect results/
set -uo pipefail
res=${RES:-/tmp/bench-res}
e16=(model=qwen3-1.7b batch.effective=16 mem_cap=14GiB train.max_length=512 data.length=512 train.padding=max_length
     train.dtype=fp16 train.gradient_checkpointing=true train.steps=12 measure.warmup_steps=4 train.progress_bar=false)
pin() { taskset -c "$1" true 2>/dev/null && echo "taskset -c $1"; }  # pin where the cores exist
p0=$(pin 0-7); p1=$(pin 16-23)
case "${1:-}" in
  start)
    mkdir -p "$res"
    nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv > "$res/gpus.csv"
    CUDA_VISIBLE_DEVICES=0 setsid $p0 bash -c "
      python3 bench/compare_trl.py measure --steps 100 --warmup 5 --repeats 2 --first 0 --out $res/cmp --work /tmp/w0
      echo \$? > $res/gpu0.done" > "$res/gpu0.log" 2>&1 < /dev/null &
    CUDA_VISIBLE_DEVICES=1 setsid $p1 bash -c "
      python3 bench/grid_vs_study.py run --out $res/e16 --trials 20 -- ${e16[*]}
      python3 bench/grid_vs_study.py summarize $res/e16 > $res/e16-summary.txt 2>&1
      python3 bench/compare_trl.py measure --steps 100 --warmup 5 --repeats 1 --first 2 --out $res/cmp --work /tmp/w2
      echo \$? > $res/gpu1.done" > "$res/gpu1.log" 2>&1 < /dev/null &
    sleep 2; echo "started; logs in $res" ;;
  verify)
    mkdir -p "$res"
    nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv > "$res/gpus.csv"
    CUDA_VISIBLE_DEVICES=0 setsid $p0 bash -c "
      for split in 4x1 2x2 1x4; do
        python3 bench/meter_overhead.py --steps 200 --out $res/overhead-\$split.json -- experiment=seed-t4 gpu=auto \
          batch.split=\$split 2>&1 | grep ratio
      done
      echo \$? > $res/gpu0.done" > "$res/gpu0.log" 2>&1 < /dev/null &
    CUDA_VISIBLE_DEVICES=1 setsid $p1 bash -c "
      python3 bench/grid_vs_study.py run --out $res/e16 --trials 20 -- ${e16[*]}
      python3 bench/grid_vs_study.py summarize $res/e16 > $res/e16-summary.txt 2>&1
      echo \$? > $res/gpu1.done" > "$res/gpu1.log" 2>&1 < /dev/null &
    sleep 2; echo "started; logs in $res" ;;
  knobs)
    mkdir -p "$res"
    e4=(model=qwen3-1.7b batch.effective=4 mem_cap=14GiB train.max_length=512 data.length=512 train.padding=max_length
        measure.warmup_steps=5 train.progress_bar=false)
    CUDA_VISIBLE_DEVICES=0 setsid $p0 bash -c "
      python3 -m pipeline.optimize '++optimize.space={train.gradient_checkpointing:[true,false],train.dtype:[bf16,fp16],train.liger_kernel:[false,true]}' \
        optimize.trials=24 train.steps=15 ${e4[*]} paths.root=$res/liger
      echo \$? > $res/gpu0.done" > "$res/gpu0.log" 2>&1 < /dev/null &
    CUDA_VISIBLE_DEVICES=1 setsid $p1 bash -c "
      python3 -m pipeline.train -m 'batch.split=4x1' train.steps=30 ${e4[*]} paths.root=$res/compile \
        train.dtype=fp16 train.gradient_checkpointing=true,false train.torch_compile=false,true
      echo \$? > $res/gpu1.done" > "$res/gpu1.log" 2>&1 < /dev/null &
    sleep 2; echo "started; logs in $res" ;;
  wait)
    deadline=$(( $(date +%s) + ${2:-540} ))
    while [ "$(date +%s)" -lt "$deadline" ] && ! { [ -e "$res/gpu0.done" ] && [ -e "$res/gpu1.done" ]; }; do sleep 10; done
    for q in gpu0 gpu1; do echo "== $q: $(cat "$res/$q.done" 2>/dev/null || echo running)"; tail -4 "$res/$q.log"; done
    nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv,noheader ;;
  collect)
    tar czf "$2/bench-res.tgz" --exclude='*.db-journal' -C "$(dirname "$res")" "$(basename "$res")" ;;
  *) echo "usage: $0 start | verify | knobs | wait [seconds] | collect DIR" >&2; exit 2 ;;
esac
