"""The LLM demo's LoRA steps with the frozen base stored in float32 and in bfloat16.

``model.base_dtype``: under ``bf16-mixed`` autocast computes the frozen base's matrix products
in bfloat16 either way; ``float32`` casts each weight (and each adapted projection's float32
input, twice) at every use, ``auto`` stores the base in bfloat16 once
(:mod:`entrena.engine.frozen`). Two copies of the reviews-chat model (same seed, same LoRA
initialisation, the attention kernel ``auto`` picks) take the same length-grouped training
batches in one process, alternating which goes first; the first ``--warmup`` steps of each
are not timed. Reports the median step time of each arm, the median of the per-step ratios,
and the two loss curves (the same batches: they should agree to bfloat16's precision).

Usage::

    python benchmarks/experiments/frozen_bf16.py [--steps 24] [--warmup 2] [--threads 2] [--no-write]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _report, _stats …
from _report import load_text, machine, today, write_section  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "reviews-chat" / "config.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    import tempfile

    import torch

    from entrena.engine.attention import apply_attention
    from entrena.engine.frozen import store_frozen_weights
    from entrena.tasks.llm_sft.task import LlmSftTask
    from entrena.tasks.registry import load_config

    torch.set_num_threads(args.threads)
    task = LlmSftTask()
    loaded = load_config(CONFIG, ["data.packing=false"])
    sources = task.model_sources(loaded)
    prepared = task.prepare(loaded, sources)
    cache = Path(tempfile.mkdtemp())
    arms: dict[str, tuple] = {}
    for setting in ("float32", "auto"):
        torch.manual_seed(0)
        model = task.build_model(loaded, sources, prepared).train()
        apply_attention(model, "auto", device="cpu", precision="bf16-mixed", batch_size=8,
                        max_length=int(prepared.max_length), threads=args.threads,
                        cache_dir=cache)
        store_frozen_weights(model, setting, "bf16-mixed")
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad],
                                      lr=float(loaded.config.train.learning_rate), fused=True)
        arms[setting] = (model, optimizer)
    training = task.batches(loaded, prepared, "train", batch_size=8, shuffle=True)
    plan = training.plan(0)

    def step(setting: str, index: int) -> tuple[float, float]:
        model, optimizer = arms[setting]
        batch = {k: v for k, v in training.collate(plan[index]).items() if k != "labels"}
        started = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(**batch)
        loss = out[:, 0].sum() / out[:, 1].sum()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - started, float(loss.detach())

    times: dict[str, list[float]] = {s: [] for s in arms}
    losses: dict[str, list[float]] = {s: [] for s in arms}
    load = [os.getloadavg()[0]]
    for index in range(args.warmup + args.steps):
        order = ("float32", "auto") if index % 2 == 0 else ("auto", "float32")
        for setting in order:
            seconds, loss = step(setting, index % len(plan))
            losses[setting].append(loss)
            if index >= args.warmup:
                times[setting].append(seconds)
        load.append(os.getloadavg()[0])
    ratio = statistics.median(a / b for a, b in zip(times["float32"], times["auto"],
                                                      strict=True))
    gap = max(abs(a - b) for a, b in zip(losses["float32"], losses["auto"], strict=True))
    shape = "×".join(str(n) for n in training.collate(plan[0])["input_ids"].shape)
    lines = [f"{today()}, {machine()}; {load_text(load)}.", "",
             f"`python benchmarks/experiments/frozen_bf16.py --steps {args.steps} --warmup {args.warmup} "
             f"--threads {args.threads}`: SmolLM2-135M, LoRA r 16 on all linear layers, "
             f"bf16 autocast, batches of 8 chats (the first {shape}), {args.steps} timed "
             "steps per arm, alternated in one process.", "",
             "| `model.base_dtype` | frozen base stored in | median step | steps, total |",
             "|---|---|---:|---:|"]
    for setting, stored in (("float32", "float32"), ("auto", "bfloat16")):
        lines.append(f"| {setting} | {stored} | {statistics.median(times[setting]):.2f} s | "
                     f"{sum(times[setting]):.1f} s |")
    lines += ["", f"float32 / bfloat16 step time, median of the per-step ratios: "
              f"**{ratio:.2f}×**. Losses of the same batches: largest gap {gap:.3f} nats "
              f"(float32 {losses['float32'][-1]:.3f}, bfloat16 {losses['auto'][-1]:.3f} at "
              "the last step)."]
    body = "\n".join(lines)
    print(body)
    if not args.no_write:
        write_section("frozen-bf16", "## The frozen LoRA base in bfloat16 (`model.base_dtype`)"
                      "\n\n" + body)


if __name__ == "__main__":
    main()
