# Shared by the bench scripts that run in one device call: `say` logs a line, `machine` records and says the GPUs
# and the stack's versions, `stage` runs one command with a share of the call's time. Source it after setting NAME
# (the log's prefix and file), RES (the results folder), and, for a budget across stages, START (epoch seconds) and
# BUDGET (seconds; unset: shares alone). `queue_start` and `queue_follow` run a script's queue in a session that
# outlives a device call and collect it over later calls, `queue_enter` moves into its copy of the repository, and
# `queue_run` runs its stages there; they read `dir` (the queue's folder), `wait_s` and `stages`.
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

queue_start() {  # queue_start SCRIPT: once per $dir, a copy of the repository there and `SCRIPT queue` in its own session
  if [ ! -e "$dir/queue.started" ]; then
    mkdir -p "$dir/repo" && cp -r pipeline conf bench pyproject.toml "$dir/repo/" && date +%s > "$dir/queue.started" \
      || { echo "queue: the repository could not be copied to $dir/repo" >&2; return 2; }
    setsid bash "$dir/repo/bench/$1" queue < /dev/null > "$dir/queue.out" 2>&1 &
  fi
}

queue_enter() {  # queue_enter: the queue's session goes into the repository's copy in DIR, its code first on the path
  cd "$dir/repo" && export PYTHONPATH="$dir/repo:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
}

queue_run() {  # queue_run: each of $stages through the script's `stage`, its output to $dir/NAME.log, said in queue.log
  local s t0
  for s in $stages; do
    t0=$(date +%s)
    stage "$s" > "$dir/$s.log" 2>&1
    echo "$s: exit $? after $(($(date +%s) - t0)) s" >> "$dir/queue.log"
  done
  touch "$dir/queue.done"
}

queue_follow() {  # queue_follow COLLECT POLL_S: COLLECT at every look (a call cut short still brings back what ran)
  local deadline=$(($(date +%s) + wait_s))  # until the queue is done or wait_s is up; then what the queue logged
  if [ ! -e "$dir/queue.started" ]; then  # a fresh machine (the last one was given back): waiting would only spend time
    echo "queue: none was started on this machine (no $dir/queue.started): call the script with 'start' again" >&2
    return 3
  fi
  while "$1"; [ ! -e "$dir/queue.done" ] && [ "$(date +%s)" -lt "$deadline" ]; do
    sleep "$2"
  done
  echo "queue: $(tr '\n' ';' < "$dir/queue.log" 2>/dev/null) done: $([ -e "$dir/queue.done" ] && echo yes || echo no)"
}
