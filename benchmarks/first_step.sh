#!/usr/bin/env bash
# Time to the first training step of `entrena train examples/reviews/config.yaml` (warm data
# cache, tracking at its default), and time to the fit's start against an older checkout.
#
#   benchmarks/first_step.sh [RUNS]                 # since_process_start_s of step 1, RUNS times
#   benchmarks/first_step.sh --against DIR [PAIRS]  # seconds to fit_start: DIR/src vs ./src,
#                                                   # alternated (DIR: a checkout, e.g. a worktree)
# Each run is stopped with SIGTERM once its record is written (a checkpoint is saved).
set -u
cd "$(dirname "$0")/.."
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
    rm -rf "$RUN"; start=$(date +%s.%N)
    PYTHONPATH=$2 $PY -m entrena.cli train examples/reviews/config.yaml --run-dir "$RUN" \
      > /dev/null 2>&1 & pid=$!
    wait_for fit_start $pid || return
    t=$($PY -c "import json,sys;print(next(json.loads(l)['time'] for l in open(sys.argv[1]) if '\"fit_start\"' in l))" "$RUN/events.jsonl")
    kill -TERM $pid; wait $pid
    echo "$1 $($PY -c "print(round($t - $start, 1))") s to fit_start (load $(cut -d' ' -f1 /proc/loadavg))"
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
