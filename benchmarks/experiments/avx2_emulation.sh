#!/bin/bash
# `make demo` (fresh clone, install included) or the LLM demo's two commands on this CPU held
# to AVX2/FMA and to N cores: an emulation of a CPU without AVX-512 or native bf16 (fp32), for
# when no such CPU is at hand. Not that CPU: its clock, caches and memory differ; on an Intel
# Xeon with AMX one core came out slower than the team's AMD EPYC with AVX2 only and two cores
# faster (docs/benchmarks-journal.md, "AVX2 emulation").
#
#   benchmarks/experiments/avx2_emulation.sh demo 1        # make demo on core 0
#   benchmarks/experiments/avx2_emulation.sh llm-demo 2    # train + export on cores 0-1
#
# What holds each library to AVX2: ATen's vector kernels (ATEN_CPU_CAPABILITY), oneDNN's
# (ONEDNN_MAX_CPU_ISA: also hides native bf16 from entrena, so precision auto is 32-true), MKL's
# fp32 products (MKL_ENABLE_INSTRUCTIONS); llama.cpp is built for AVX2 by `make install-llm`.
# The demo runs in a fresh clone at $CLONE (default /tmp/avx2-clone); the LLM demo in the same
# clone (run the demo first: it writes the data) with this checkout's .venv. Empty data cache.
set -euo pipefail
target=${1:?demo or llm-demo}; cores=${2:-1}
repo=$(cd "$(dirname "$0")/../.." && pwd)
clone=${CLONE:-/tmp/avx2-clone}
cpus=$(seq -s, 0 $((cores - 1)))
export ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2
export ENTRENA_CACHE_DIR
ENTRENA_CACHE_DIR=$(mktemp -d)
date -u
if [ "$target" = demo ]; then
  rm -rf "$clone" && git clone -q "$repo" "$clone" && cd "$clone"
  /usr/bin/time -v taskset -c "$cpus" make demo
else
  cd "$clone"
  export PYTHONPATH="$clone/src"
  /usr/bin/time -v taskset -c "$cpus" bash -c "$repo/.venv/bin/entrena train \
    examples/reviews-chat/config.yaml && $repo/.venv/bin/entrena export runs/reviews-chat \
    --format gguf --quantize q8_0"
fi
date -u
