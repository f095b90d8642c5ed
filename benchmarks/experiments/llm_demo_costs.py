"""What the LLM demo's steps cost, and what three choices save (issue 21's 10-minute demo).

On the reviews-chat example's chats (``examples/reviews-chat/config.yaml``: SmolLM2-135M,
LoRA r 16 on all linear layers, fp32, ``model.max_length`` 128), alternated ``--repeats``
times in one process, each arm on the same batch:

1. one LoRA training step (forward, backward, AdamW) of the first training batch (8 chats)
   with LoRA dropout 0.05 and 0 (``model.lora.dropout``; the shared prefix on in both);
2. the evaluation pass of one validation batch (16 chats: teacher-forced losses, then greedy
   decoding of the rows whose argmax left the reference: every row here, the adapters being
   fresh) with the shared prompt prefix decoded once and per row (``model.shared_prefix``);
3. greedy generation from those 16 prompts alone (what the zero-shot baseline runs), the
   prefix shared and not.

Ratios are medians over the repeats of (time with the choice) / (time without). Run it on
quiet cores: other jobs' load makes the two threads wait for each other.

Usage::

    python benchmarks/experiments/llm_demo_costs.py [--repeats 3] [--threads 2] [--no-write]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _report, _stats …
from _report import machine, today, write_section  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "reviews-chat" / "config.yaml"


def _timed(work: Any) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    import torch

    from entrena.tasks.llm_sft.model import greedy_generate
    from entrena.tasks.llm_sft.task import LlmSftTask
    from entrena.tasks.registry import load_config

    torch.set_num_threads(args.threads)
    load = [os.getloadavg()[0]]
    task = LlmSftTask()
    models = {}
    for dropout in (0.05, 0.0):
        loaded = load_config(CONFIG, [f"model.lora.dropout={dropout}", "data.packing=false"])
        if not models:
            sources = task.model_sources(loaded)
            prepared = task.prepare(loaded, sources)
        torch.manual_seed(0)
        models[dropout] = task.build_model(loaded, sources, prepared).train()
    training = task.batches(loaded, prepared, "train", batch_size=8, shuffle=True)
    train_batch = training.collate(training.plan(0)[0])
    validation = task.batches(loaded, prepared, "validation", batch_size=16, shuffle=False)
    eval_batch = validation.collate(validation.plan(0)[0])
    strip = {k: v for k, v in eval_batch.items() if k != "labels"}
    prompts = [row[:int(start)] for row, start in
               zip(strip["input_ids"], strip["target_mask"].argmax(1), strict=True)]
    evaluating = models[0.0]
    optimizers = {d: torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-4)
                  for d, m in models.items()}

    def train_step(dropout: float) -> None:
        model = models[dropout].train()
        out = model(**{k: v for k, v in train_batch.items() if k != "labels"})
        (out[:, 0].sum() / out[:, 1].sum()).backward()
        optimizers[dropout].step()
        optimizers[dropout].zero_grad(set_to_none=True)

    def evaluate(share: bool) -> None:
        evaluating.eval()
        evaluating.share_prefix = share
        with torch.no_grad():
            evaluating(**strip)

    def generate(share: bool) -> None:
        greedy_generate(evaluating.lm, prompts, max_new_tokens=evaluating.max_new_tokens,
                        eos_token_id=evaluating.eos_token_id,
                        pad_token_id=evaluating.pad_token_id, share_prefix=share)

    arms = {"training step, LoRA dropout": (lambda: train_step(0.05), lambda: train_step(0.0),
                                            "0.05", "0"),
            "evaluation pass, shared prefix": (lambda: evaluate(True), lambda: evaluate(False),
                                               "once", "per row"),
            "greedy generation, shared prefix": (lambda: generate(True),
                                                 lambda: generate(False), "once", "per row")}
    for first, second, *_ in arms.values():  # warm-up: first use of each shape
        first()
        second()
    timings: dict[str, list[tuple[float, float]]] = {name: [] for name in arms}
    for repeat in range(args.repeats):
        for name, (first, second, *_) in arms.items():
            pair = (_timed(first), _timed(second)) if repeat % 2 == 0 else \
                tuple(reversed((_timed(second), _timed(first))))
            timings[name].append(pair)  # type: ignore[arg-type]
        load.append(os.getloadavg()[0])
    shape = "×".join(str(n) for n in train_batch["input_ids"].shape)
    eval_shape = "×".join(str(n) for n in eval_batch["input_ids"].shape)
    lines = [f"{today()}, {machine()}; load average {min(load):.1f}–{max(load):.1f} during the "
             "runs.", "",
             f"`python benchmarks/experiments/llm_demo_costs.py --repeats {args.repeats} --threads "
             f"{args.threads}`: SmolLM2-135M, LoRA r 16 on all linear layers, fp32; a training "
             f"batch of {shape} tokens, a validation batch of {eval_shape} (the evaluation "
             "pass decodes every row: fresh adapters), greedy generation from its 16 prompts "
             f"({evaluating.max_new_tokens} new tokens at most); medians of "
             f"{args.repeats} alternated repeats after a warm-up.", "",
             "| what | with | time | without | time | ratio |", "|---|---|---:|---|---:|---:|"]
    for name, (_, _, with_, without) in arms.items():
        a = statistics.median(t[0] for t in timings[name])
        b = statistics.median(t[1] for t in timings[name])
        ratio = statistics.median(t[0] / t[1] for t in timings[name])
        lines.append(f"| {name} | {with_} | {a:.2f} s | {without} | {b:.2f} s | "
                     f"{ratio:.2f} |")
    body = "\n".join(lines)
    print(body)
    if not args.no_write:
        write_section("llm-demo-costs", "## What the LLM demo's steps cost (llm-sft)\n\n" + body)


if __name__ == "__main__":
    main()
