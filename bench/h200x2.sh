#!/usr/bin/env bash
# The GPU benchmarks of BENCHMARKS.md on one two-GPU machine, a queue per GPU (jobs never share a GPU), each queue on
# its own CPU cores. All runs use the seed's setup (experiment=seed-t4: Qwen3-1.7B shape, 512 tokens padded, LoRA
# r16 all-linear, effective batch 4) on the real device (gpu=auto) under a 14 GiB cap.
#   GPU 0: the study over every speed knob that runs here (split x checkpointing x dtype x adapter dtype x
#          torch.compile), the seed's setting (4x1, fp16, checkpointing) as its baseline; then the baseline and the
#          answer profiled (measure.profile=true: kernel launches per step, GPU busy share).
#   GPU 1: the gpu test tier (pytest -m gpu); the study with Liger in the space (split x checkpointing x dtype x
#          Liger) and its confirmation round; the meter's cost in one process for 4x1, 2x2 and 1x4.
# The queues outlive the command that starts them (setsid); `wait` blocks at most the seconds given:
#   bash bench/h200x2.sh start; bash bench/h200x2.sh wait 540; bash bench/h200x2.sh collect $OUT
set -uo pipefail
res=${RES:-/tmp/bench-res}
seed=(experiment=seed-t4 gpu=auto mem_cap=14GiB batch.split=4x1 measure.warmup_steps=5)
knobs='++optimize.space={train.gradient_checkpointing:[true,false],train.dtype:[fp16,bf16],train.adapter_dtype:[fp32,compute],train.torch_compile:[off,whole]}'
liger='++optimize.space={train.gradient_checkpointing:[true,false],train.dtype:[bf16,fp16],train.liger_kernel:[false,true]}'
pin() { taskset -c "$1" true 2>/dev/null && echo "taskset -c $1"; }  # pin where the cores exist
p0=$(pin 0-7); p1=$(pin 16-23)
case "${1:-}" in
  start)
    mkdir -p "$res"
    nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv > "$res/gpus.csv"
    python3 -c 'import torch, transformers, trl, peft; print(torch.__version__, transformers.__version__, trl.__version__, peft.__version__)' > "$res/versions.txt" 2>&1
    CUDA_VISIBLE_DEVICES=0 setsid $p0 bash -c "
      python3 -m pipeline.optimize ${seed[*]} '$knobs' optimize.trials=14 train.steps=20 optimize.confirm_k=2 \
        optimize.confirm_rounds=5 optimize.confirm_steps=14 optimize.confirm_budget_s=300 paths.root=$res/knobs \
        > $res/knobs.log 2>&1
      python3 bench/profile_answer.py $res/knobs ${seed[*]} >> $res/knobs.log 2>&1
      echo \$? > $res/gpu0.done" > "$res/gpu0.log" 2>&1 < /dev/null &
    CUDA_VISIBLE_DEVICES=1 setsid $p1 bash -c "
      python3 -m pytest -m gpu tests/test_gpu.py -q -p no:cacheprovider > $res/gpu-tests.log 2>&1
      python3 -m pipeline.optimize ${seed[*]} '$liger' optimize.trials=24 train.steps=15 paths.root=$res/liger \
        > $res/liger.log 2>&1
      for split in 4x1 2x2 1x4; do
        steps=\$([ \$split = 4x1 ] && echo 400 || ([ \$split = 2x2 ] && echo 160 || echo 90))
        python3 bench/meter_overhead.py --steps \$steps --out $res/overhead-\$split.json -- experiment=seed-t4 \
          gpu=auto batch.split=\$split 2>&1 | grep 'pairs;' >> $res/overhead.log
      done
      echo \$? > $res/gpu1.done" > "$res/gpu1.log" 2>&1 < /dev/null &
    sleep 2; echo "started; logs in $res" ;;
  wait)
    deadline=$(( $(date +%s) + ${2:-540} ))
    while [ "$(date +%s)" -lt "$deadline" ] && ! { [ -e "$res/gpu0.done" ] && [ -e "$res/gpu1.done" ]; }; do sleep 10; done
    for q in gpu0 gpu1; do echo "== $q: $(cat "$res/$q.done" 2>/dev/null || echo running)"; done
    for log in knobs liger gpu-tests overhead; do
      echo "== $log"; grep -v "Warning\|warn(\|examples/s\|it/s\]" "$res/$log.log" 2>/dev/null | tail -6
    done
    nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv,noheader ;;
  collect)
    tar czf "$2/bench-res.tgz" --exclude='*.db-journal' --exclude='compile-cache' --exclude='*.png' \
      -C "$(dirname "$res")" "$(basename "$res")" ;;
  *) echo "usage: $0 start | wait [seconds] | collect DIR" >&2; exit 2 ;;
esac
