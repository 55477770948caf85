# Shared by the bench scripts that run in one device call: `say` logs a line, `machine` records and says the GPUs
# and the stack's versions, `stage` runs one command with a share of the call's time. Source it after setting NAME
# (the log's prefix and file), RES (the results folder), and, for a budget across stages, START (epoch seconds) and
# BUDGET (seconds; unset: shares alone).
say() { echo "[$NAME] $*" | tee -a "$RES/$NAME.log"; }

machine() {  # machine [COMMAND...]: GPUs, versions (and what COMMAND prints) into $RES/versions.txt, and said
  { nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "no GPU"
    "${py:-python3}" -c 'import torch, transformers, trl, peft; print(torch.__version__, transformers.__version__, trl.__version__, peft.__version__)'
    if [ $# -gt 0 ]; then "$@"; fi
  } > "$RES/versions.txt" 2>&1
  say "machine: $(tr '\n' ' ' < "$RES/versions.txt")"
}

stage() {  # stage LABEL SHARE COMMAND...: at most SHARE seconds (and what is left of BUDGET); output to LABEL.log
  local label=$1 share=$2 left t0 rc
  shift 2
  if [ -n "${BUDGET:-}" ]; then
    left=$(( START + BUDGET - $(date +%s) ))
    [ "$left" -lt "$share" ] && share=$left
    if [ "$share" -lt 30 ]; then say "$label: skipped, ${left} s of the budget left"; return; fi
  fi
  say "$label: at most ${share} s: $*"
  t0=$(date +%s)
  timeout -s INT -k 30 "$share" "$@" > "$RES/$label.log" 2>&1
  rc=$?
  say "$label: exit $rc after $(( $(date +%s) - t0 )) s$([ $rc = 124 ] && echo ' (interrupted at its share)')"
}
