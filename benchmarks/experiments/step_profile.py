"""Where a training step of the demo model spends its time, and what compiling could save.

    .venv/bin/python benchmarks/experiments/step_profile.py [--mode full|quick|smoke] [--no-write]

One process: MiniLM-L6 with entrena's mean-pooling head on the reviews' first training
batches as entrena's length-grouped loader cuts them (``benchmarks/step_throughput.py``'s
``build``), trained by the hand-written eager loop of that file (forward, cross-entropy,
backward, clipping, AdamW, schedule) at ``train.precision: auto`` for this CPU.

1. **Each step timed** from the first, with its padded token count: whether step 1 costs
   more than its size explains (first use of each kernel shape, first touch of the
   activation memory, AdamW's state allocated on the first ``optimizer.step``).
2. **One later step profiled** (``torch.profiler``, CPU self time per operator), split into
   matrix products (``mm``, ``addmm``, ``bmm``, ``linear``'s products and
   scaled-dot-product attention, which ``torch.compile``'s inductor hands to the same ATen
   / oneDNN kernels on a CPU) and everything else (elementwise, normalisation, softmax,
   embedding, optimizer, copies), which inductor can fuse. If compiling removed *all* of the
   rest, the step would take the products' time: ``step / products`` bounds the speed-up
   compiling can give (Amdahl's law), against issue 24's 1.2× target.
3. **AdamW's step alone** on the model's parameters, PyTorch's default against fused.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _report, _stats …
from _report import machine, today, write_section  # noqa: E402
from step_throughput import CLIP_NORM, MODES, build  # noqa: E402

PRODUCTS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm",
            "aten::_scaled_dot_product_flash_attention_for_cpu",
            "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
            "aten::_scaled_dot_product_attention_math", "aten::mkldnn_linear",
            "aten::_mkl_linear")
"""Operators counted as matrix products (self time)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=list(MODES), default="full")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    started = time.perf_counter()
    import torch
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile

    from entrena.engine.backend import auto_cpu_bf16, configure_threads, create_backend
    from entrena.recipes.training import build_optimizer

    imported_s = time.perf_counter() - started
    configure_threads(None)
    with tempfile.TemporaryDirectory() as folder:
        built = build(args.mode, Path(folder))
    # precision: auto, as `entrena train` resolves it for this model on this machine
    precision = create_backend(accelerator="auto", devices=1, precision="auto", seed=0,
                               deterministic=False,
                               cpu_bf16=auto_cpu_bf16(built["model"], "auto")).precision
    autocast = precision == "bf16-mixed"
    model = copy.deepcopy(built["model"]).train()
    optimizer = build_optimizer(model, built["learning_rate"], built["weight_decay"])
    batches = built["batches"][:args.steps]

    def step(batch: dict) -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logits = model(batch["input_ids"], batch["attention_mask"])
        F.cross_entropy(logits.float(), batch["labels"]).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP_NORM)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    rows = []
    for number, batch in enumerate(batches, start=1):
        began = time.perf_counter()
        step(batch)
        seconds = time.perf_counter() - began
        tokens = int(batch["attention_mask"].numel())
        rows.append((number, tuple(batch["input_ids"].shape), tokens, seconds))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        began = time.perf_counter()
        step(batches[1])
        profiled_s = time.perf_counter() - began
    # AdamW's step alone, PyTorch's default (a loop on a CPU) against fused, on these grads
    optimizer_ms = {}
    for param in model.parameters():
        param.grad = torch.full_like(param, 1e-3)
    for name, fused in (("default", False), ("fused", True)):
        timed = build_optimizer(model, built["learning_rate"], built["weight_decay"],
                                fused=fused)
        timed.step()  # allocates the state
        began = time.perf_counter()
        for _ in range(5):
            timed.step()
        optimizer_ms[name] = (time.perf_counter() - began) / 5 * 1000
    per_op = {e.key: e.self_cpu_time_total / 1e6 for e in prof.key_averages()}
    total = sum(per_op.values())
    products = sum(v for k, v in per_op.items() if k in PRODUCTS)
    top_rest = sorted(((v, k) for k, v in per_op.items() if k not in PRODUCTS), reverse=True)[:6]
    later = [r[3] / r[2] * 1000 for r in rows[2:]]
    lines = [f"{today()}, {machine()}; precision {precision}; torch threads "
             f"{torch.get_num_threads()}.", "",
             f"`python benchmarks/experiments/step_profile.py --mode {args.mode}`: MiniLM-L6 + mean pooling, "
             f"batch {built['batch_size']}, the reviews' first {len(batches)} length-grouped "
             f"training batches, the hand-written eager loop; imports took {imported_s:.1f} s.",
             "", "| step | batch (rows × tokens) | padded tokens | time | ms per 1,000 tokens |",
             "|---:|---|---:|---:|---:|"]
    for number, shape, tokens, seconds in rows:
        lines.append(f"| {number} | {shape[0]} × {shape[1]} | {tokens:,} | {seconds:.2f} s | "
                     f"{seconds / tokens * 1000 * 1000:.0f} |")
    step1 = rows[0][3] / rows[0][2] * 1000
    lines += ["", f"Step 1 costs {step1 / statistics.median(later):.2f}× the median of steps "
              f"3–{len(rows)} per token.", "",
              f"Profile of step 2 (wall {profiled_s:.2f} s under the profiler; operator self "
              f"time {total:.2f} s): matrix products {products:.2f} s "
              f"(**{products / total:.0%}**), the rest {total - products:.2f} s. Largest of the "
              "rest: " + ", ".join(f"`{k}` {v:.2f} s" for v, k in top_rest) + ".", "",
              f"Bound on compiling's speed-up if it removed all of the rest: "
              f"**{total / products:.2f}×** (target 1.2×).", "",
              f"AdamW's step over the model's {sum(p.numel() for p in model.parameters()):,} "
              f"parameters (mean of 5): PyTorch's default {optimizer_ms['default']:.0f} ms, "
              f"fused {optimizer_ms['fused']:.0f} ms (what `entrena train` uses on a CPU)."]
    body = "\n".join(lines)
    print(body)
    if not args.no_write:
        write_section("step-profile", "## Where a demo training step goes (`step_profile.py`)"
                      "\n\n" + body)


if __name__ == "__main__":
    main()
