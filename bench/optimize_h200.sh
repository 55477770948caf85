#!/usr/bin/env bash
# Optimize benchmark (GPU): the study on the Qwen3-1.7B shape, 512-token sequences, MEM_CAP=14GiB, effective batch 4,
# knobs gradient checkpointing x dtype, every config decided; then the seed's default (4x1, fp16, checkpointing)
# measured alone, for the tokens/s comparison (SEED=0 skips it). MEM_CAP (default 14GiB), STEPS (15); results go to
# ${OUT:-bench-out}.
set -euo pipefail
out="${OUT:-bench-out}"
mkdir -p "$out"
common=(model=qwen3-1.7b train.max_length=512 data.length=512 train.steps="${STEPS:-15}" measure.warmup_steps=5
        train.progress_bar=false paths.root="$out/mlruns")
python3 -m pipeline.optimize mem_cap="${MEM_CAP:-14GiB}" batch.effective=4 optimize.trials=12 optimize.sampler=tpe \
  optimize=ckpt-dtype "${common[@]}" \
  2>&1 | grep -v "Warning\|warn(\|examples/s" > "$out/optimize.log" || { tail -40 "$out/optimize.log"; exit 1; }
sed -n '/^| #/,$p' "$out/optimize.log"
[ "${SEED:-1}" = 1 ] && python3 -m pipeline.train batch.split=4x1 train.dtype=fp16 train.gradient_checkpointing=true "${common[@]}" \
  2>&1 | grep -v "Warning\|warn(\|examples/s" > "$out/seed.log"
[ "${SEED:-1}" = 1 ] && grep "\[job\]" "$out/seed.log" | tail -2
python3 - "$out/mlruns" <<'PY'
import sys
from mlflow.tracking import MlflowClient
c = MlflowClient(f"sqlite:///{sys.argv[1]}/mlflow.db")
for r in c.search_runs(["1"], order_by=["attributes.start_time ASC"]):
    m = r.data.metrics
    print(f"{r.info.run_name:60s} {r.data.tags.get('status', '-'):9s} step {m.get('step_time_median_s', float('nan')):.4f} s"
          f"  tokens/s {m.get('tokens_per_s', float('nan')):8.0f}  peak {m.get('peak_gib', float('nan')):.2f} GiB"
          f"  wall {m.get('wall_s', float('nan')):.1f} s  pred {r.data.tags.get('predicted_gib', '-')}")
PY
