"""MFU of a BERT-base-shaped encoder training step: eager SDPA, fused AdamW, compile, unpadded.

    python3 benchmarks/gpu_mfu.py OUT.json            # on a GPU (benchmarks/gpu_session.sh)
    .venv/bin/python benchmarks/gpu_mfu.py OUT.json --smoke   # the plumbing, on a CPU

Model: ``BertForSequenceClassification`` with BERT-base's shape (12 layers, width 768, 12
heads, FFN 3072, vocabulary 30,522), random weights (FLOPs and memory are the weights'
shape's), bf16 autocast, batch 32 x 512 tokens, AdamW. Variants, each timed over ``--steps``
steps after ``--warmup`` untimed ones (CUDA synchronised):

- ``eager_sdpa``: ``attn_implementation="sdpa"``, ``torch.optim.AdamW(fused=True)``;
- ``compiled``: the same model through ``torch.compile`` (inductor, default mode);
- ``unpadded``: the batch's real tokens only (lengths drawn uniformly in [128, 512]), packed
  into one row with ``position_ids`` restarting per example, through
  ``attn_implementation="flash_attention_2"`` (needs the ``flash-attn`` package; reported as
  unsupported otherwise); MFU counts the real tokens only.

MFU = model FLOPs per second / the device's dense bf16 peak (entrena's catalog). Model FLOPs per
token: ``6 N + 12 L d T`` (N non-embedding parameters, L layers, d width, T sequence length;
Chowdhery et al. 2022, "PaLM", appendix B). The issue's target on an H100/H200 is >= 45% MFU
(21.8% measured for entrena's MiniLM demo step on 2026-11-30).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

SHAPES = {
    "bert-base": {"layers": 12, "width": 768, "heads": 12, "ffn": 3072, "vocab": 30522,
                  "batch": 32, "tokens": 512},
    "smoke": {"layers": 2, "width": 64, "heads": 2, "ffn": 128, "vocab": 1000,
              "batch": 4, "tokens": 32},
}


def model_flops_per_token(shape: dict[str, int], non_embedding: int, tokens: int) -> float:
    """``6 N + 12 L d T`` (PaLM, appendix B)."""
    return 6.0 * non_embedding + 12.0 * shape["layers"] * shape["width"] * tokens


def build(shape: dict[str, int], attention: str, device: str) -> Any:
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(vocab_size=shape["vocab"], hidden_size=shape["width"],
                        num_hidden_layers=shape["layers"], num_attention_heads=shape["heads"],
                        intermediate_size=shape["ffn"], max_position_embeddings=shape["tokens"],
                        num_labels=2, attn_implementation=attention)
    torch.manual_seed(0)
    return BertForSequenceClassification(config).to(device)


def non_embedding_parameters(model: Any) -> int:
    return sum(p.numel() for n, p in model.named_parameters() if "embeddings" not in n)


def time_steps(model: Any, batches: list[dict[str, Any]], device: str, warmup: int,
               steps: int) -> float:
    """Mean seconds of a training step (forward under bf16 autocast, backward, AdamW)."""
    import torch

    fused = device == "cuda"
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=fused)
    model.train()

    def step(batch: dict[str, Any]) -> None:
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for i in range(warmup):
        step(batches[i % len(batches)])
    if device == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    for i in range(steps):
        step(batches[i % len(batches)])
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - started) / steps


def padded_batches(shape: dict[str, int], device: str, count: int = 4) -> list[dict[str, Any]]:
    import torch

    generator = torch.Generator().manual_seed(0)
    return [{"input_ids": torch.randint(0, shape["vocab"], (shape["batch"], shape["tokens"]),
                                        generator=generator).to(device),
             "attention_mask": torch.ones(shape["batch"], shape["tokens"], dtype=torch.long,
                                          device=device),
             "labels": torch.randint(0, 2, (shape["batch"],), generator=generator).to(device)}
            for _ in range(count)]


def packed_batches(shape: dict[str, int], device: str, count: int = 4
                   ) -> tuple[list[dict[str, Any]], list[list[int]]]:
    """One row per batch holding its examples back to back, ``position_ids`` restarting."""
    import torch

    generator = torch.Generator().manual_seed(1)
    batches, lengths = [], []
    for _ in range(count):
        sizes = torch.randint(shape["tokens"] // 4, shape["tokens"] + 1, (shape["batch"],),
                              generator=generator).tolist()
        total = sum(sizes)
        positions = torch.cat([torch.arange(n) for n in sizes]).unsqueeze(0)
        batches.append({"input_ids": torch.randint(0, shape["vocab"], (1, total),
                                                   generator=generator).to(device),
                        "position_ids": positions.to(device),
                        "labels": torch.randint(0, 2, (1,), generator=generator).to(device)})
        lengths.append(sizes)
    return batches, lengths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    import torch

    sys.path.insert(0, "src")
    from entrena.hardware.catalog import load_catalog
    from entrena.planning.options import peak_for_precision

    device = "cuda" if torch.cuda.is_available() else "cpu"
    shape = SHAPES["smoke" if args.smoke else "bert-base"]
    peak = None
    if device == "cuda":
        acc = load_catalog().accelerator_for_device(torch.cuda.get_device_name(0))
        peak = peak_for_precision(acc, "bf16-mixed") if acc else None
    results: dict[str, Any] = {"device": torch.cuda.get_device_name(0) if device == "cuda"
                               else "cpu", "shape": shape, "peak_flops": peak,
                               "torch": torch.__version__, "variants": {}}
    tokens = shape["batch"] * shape["tokens"]

    def record(name: str, seconds: float, flops: float, **extra: Any) -> None:
        rate = flops / seconds
        results["variants"][name] = {"step_s": seconds, "model_flops_per_s": rate,
                                     "mfu": rate / peak if peak else None, **extra}
        print(f"{name}: {seconds * 1000:.1f} ms/step, {rate / 1e12:.1f} TFLOP/s, MFU "
              f"{rate / peak:.1%}" if peak else f"{name}: {seconds * 1000:.1f} ms/step",
              flush=True)

    model = build(shape, "sdpa", device)
    n = non_embedding_parameters(model)
    flops = tokens * model_flops_per_token(shape, n, shape["tokens"])
    batches = padded_batches(shape, device)
    record("eager_sdpa", time_steps(model, batches, device, args.warmup, args.steps), flops,
           non_embedding_parameters=n)
    try:
        compiled = torch.compile(build(shape, "sdpa", device))
        started = time.perf_counter()
        seconds = time_steps(compiled, batches, device, args.warmup, args.steps)
        record("compiled", seconds, flops,
               warmup_and_compile_s=time.perf_counter() - started - seconds * args.steps)
    except Exception as exc:  # noqa: BLE001 - reported, the other variants still run
        results["variants"]["compiled"] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
    try:
        unpadded = build(shape, "flash_attention_2", device)
        packed, lengths = packed_batches(shape, device)
        real = sum(sum(sizes) for sizes in lengths) / len(lengths)
        mean_length = real / shape["batch"]
        flops_real = real * model_flops_per_token(shape, n, int(mean_length))
        record("unpadded", time_steps(unpadded, packed, device, args.warmup, args.steps),
               flops_real, real_tokens_per_step=real)
    except Exception as exc:  # noqa: BLE001 - flash-attn missing, or no varlen support
        results["variants"]["unpadded"] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
        print(f"unpadded: unsupported here ({type(exc).__name__})", flush=True)
    with open(args.out, "w") as handle:
        json.dump(results, handle, indent=1)


if __name__ == "__main__":
    main()
