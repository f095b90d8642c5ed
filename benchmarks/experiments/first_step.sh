#!/usr/bin/env bash
# Time to the first training step of `entrena train examples/reviews/config.yaml` (warm data
# cache, tracking at its default), alone or against an older checkout.
#
#   benchmarks/experiments/first_step.sh [RUNS]                 # since_process_start_s of step 1, RUNS times
#   benchmarks/experiments/first_step.sh --against DIR [PAIRS]  # DIR/src vs ./src, alternated: seconds from
#                                                   # the process start to the fit's start and
#                                                   # to step 1 (DIR: a checkout, e.g. a worktree)
# Each run is stopped with SIGTERM once its record is written (a checkpoint is saved).
set -u
cd "$(dirname "$0")/../.."
PY=.venv/bin/python
RUN=$(mktemp -d)/run

wait_for() {  # $1 record type, $2 pid
  while ! grep -q "\"type\": \"$1\"" "$RUN/events.jsonl" 2>/dev/null; do
    kill -0 "$2" 2>/dev/null || { echo "the run ended before its $1 record" >&2; return 1; }
    sleep 0.2
  done
}

if [ "${1:-}" = "--against" ]; then
  old=$2; pairs=${3:-2}
  one() {  # $1 label, $2 PYTHONPATH
    rm -rf "$RUN"
    PYTHONPATH=$2 $PY -m entrena.cli train examples/reviews/config.yaml --run-dir "$RUN" \
      > /dev/null 2>&1 & pid=$!
    wait_for step $pid || return
    kill -TERM $pid; wait $pid
    $PY - "$RUN/events.jsonl" "$1" "$(cut -d' ' -f1 /proc/loadavg)" <<'PY'
import json, sys
events = [json.loads(line) for line in open(sys.argv[1])]
fit = next(e for e in events if e["type"] == "fit_start")
step = next(e for e in events if e["type"] == "step")
start = step["time"] - step["since_process_start_s"]
print(f"{sys.argv[2]}: fit_start at {fit['time'] - start:.2f} s, step 1 at "
      f"{step['since_process_start_s']:.2f} s (the step itself {step['time'] - fit['time']:.2f}"
      f" s; load {sys.argv[3]})")
PY
  }
  for _ in $(seq "$pairs"); do one before "$old/src"; one after "$PWD/src"; done
else
  for _ in $(seq "${1:-3}"); do
    rm -rf "$RUN"
    $PY -m entrena.cli train examples/reviews/config.yaml --run-dir "$RUN" > /dev/null 2>&1 &
    pid=$!
    wait_for step $pid || continue
    kill -TERM $pid; wait $pid
    echo "first step at $(grep -o '"since_process_start_s": [0-9.]*' "$RUN/events.jsonl" | cut -d' ' -f2) s (load $(cut -d' ' -f1 /proc/loadavg))"
  done
fi
