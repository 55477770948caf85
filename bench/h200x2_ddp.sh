#!/usr/bin/env bash
# Issue 23 ("several GPUs of one machine") on two H200s, in one device call of under 10 minutes, on the seed's
# setting (experiment=seed-t4: Qwen3-1.7B shape, 512 tokens padded, fp16, gradient checkpointing, LoRA r16 all-linear,
# effective batch 4), every job under torchrun (one process per GPU, DDP over NCCL):
#   1. sweep  world_size=1,2 x the seed's splits at effective batch 4: 1x4, 2x2, 4x1 on one GPU, 1x2, 2x1 on two
#             (the sweep keeps the splits whose product with the world size is 4, and names those it leaves out),
#             REPEATS rounds (default 2), uncapped on the real device (gpu=auto); then bench/ddp_report.py: per layout
#             the step time, tokens/s, each rank's peak memory, the phases and DDP's all-reduce; the loss agreement
#             between world sizes; the scaling efficiency (tokens/s on 2 GPUs over 2x tokens/s on 1), paired by round
#   2. study  the two-T4 question: world size x split x gradient checkpointing under gpu=t4 (each rank's memory
#             capped at a T4's 15 GiB on its own H200; speed is the H200's), the seed's 4x1 checkpointed config on one
#             GPU as the baseline; its answer says how many GPUs it uses and, paired in its confirmation round, its
#             speed-up and scaling efficiency against the best on one
# Each stage gets at most its share and what is left of BUDGET_S (default 550 s from the script's start); one that
# runs past is interrupted with SIGINT (an interrupted sweep or study still records what it finished; the study
# prints its answer over the trials decided). Logs and stores go to RES (/tmp/ddp); ddp.log (every stage's summary
# lines and the report) and ddp.tgz (logs, stores) to OUT. Name stages to run only those (default: sweep study): a
# study cut short at its share (each job is a fresh torchrun launch) gets a call of its own with `... h200x2_ddp.sh
# study`.
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1): the
# ranks inherit this environment through torchrun.
#
# Here, once:  bash bench/fetch_wheels.sh          (the wheels the GPU machine lacks, into .whl/)
# There (a device run of the branch's checkout on nvidia-h200-x2, carry [".whl"], timeout_s 600):
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
#     .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit; bash bench/h200x2_ddp.sh
# Rehearsal on a CPU (the tiny model, gloo, one process per core; a few minutes): REHEARSAL=1 bash bench/h200x2_ddp.sh
set -uo pipefail
out=${OUT:-bench-out}
res=${RES:-/tmp/ddp}
py=${PYTHON:-python3}
start=$(date +%s)
budget=${BUDGET_S:-550}
repeats=${REPEATS:-2}
mkdir -p "$out" "$res"
: > "$res/ddp.log"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(sweep study)
layouts=(world_size=1,2 batch.split=1x4,2x2,4x1,1x2,2x1)
space='++optimize.space={world_size:[1,2],train.gradient_checkpointing:[true,false]}'

if [ "${REHEARSAL:-0}" = 1 ]; then
  sweep=(model=tiny gpu=cpu launcher.kind=torchrun launcher.timeout_s=120 "${layouts[@]}" repeats="$repeats"
         train.steps=8 measure.warmup_steps=2)
  study=(model=tiny gpu=cpu launcher.kind=torchrun launcher.timeout_s=120 mem_cap=2GiB batch.split=4x1 "$space"
         optimize.trials=6 train.steps=8 measure.warmup_steps=2 optimize.confirm_share=0.6 optimize.confirm_k=2
         optimize.confirm_budget_s=90)
  shares=(200 280)
else
  # every job is a fresh torchrun launch (~20 s of imports, model and NCCL set-up before its first step): few steps
  sweep=(experiment=seed-t4 gpu=auto launcher.kind=torchrun launcher.timeout_s=240 "${layouts[@]}"
         repeats="$repeats" train.steps=8 measure.warmup_steps=3)
  study=(experiment=seed-t4 launcher.kind=torchrun launcher.timeout_s=240 batch.split=4x1 "$space" optimize.trials=6
         train.steps=8 measure.warmup_steps=3 optimize.confirm_share=0.5 optimize.confirm_k=2
         optimize.confirm_budget_s=120)
  shares=(270 270)
fi

NAME=ddp RES=$res START=${start:-} BUDGET=$budget
source "$(dirname "$0")/stages.sh"

ddp_facts() {
  nvidia-smi topo -m 2>/dev/null | head -4
  $py -c 'import torch; print("cuda devices:", torch.cuda.device_count(), "nccl:", torch.cuda.nccl.version() if torch.cuda.is_available() else "-")'
}
machine ddp_facts

for name in "${stages[@]}"; do
  case "$name" in
    sweep)
      stage sweep "${shares[0]}" $py -m pipeline.train -m "${sweep[@]}" paths.root="$res/sweep"
      { echo "== sweep"; grep -E '^\[sweep\]|^\||failed|Error' "$res/sweep.log"
        echo "== ddp_report (layouts MxAxW: micro-batch x accumulation x world size)"
        $py bench/ddp_report.py "$res/sweep" 2>&1; } >> "$res/ddp.log" ;;
    study)
      stage study "${shares[1]}" $py -m pipeline.optimize "${study[@]}" paths.root="$res/study"
      { echo "== study"; grep -E '^\[study\]|^\[job\]|^\||best feasible|python -m pipeline.train|x the baseline|no speed-up|uses |the best on|scaling efficiency|none on|predictor|device time|confirmation|faster than|equal within' "$res/study.log"; } >> "$res/ddp.log" ;;
    *) say "unknown stage $name" ;;
  esac
  cp "$res/$name.log" "$res/ddp.log" "$out/" 2>/dev/null  # what a call cut short at its limit still brings back
done
say "done in $(( $(date +%s) - start )) s; $out/ddp.log, $out/ddp.tgz"
tar czf "$out/ddp.tgz" --exclude='compile-cache' --exclude='*.db-journal' -C "$(dirname "$res")" "$(basename "$res")"
cp "$res/ddp.log" "$out/ddp.log"
cat "$res/ddp.log"
