"""bf16 autocast against fp32 on this CPU: training-step time by model size.

    .venv/bin/python benchmarks/experiments/cpu_bf16.py [--pairs 3] [--steps 4] [--threads 2] [--write]

What ``train.precision: auto`` should pick on a CPU with native bf16 (AVX-512 BF16 or AMX).
For each model (BERT encoders built from a config with random weights, and MLPs of the
tabular task's shape), one process times training steps (forward, cross-entropy, backward,
AdamW step) on one fixed random batch, in fp32 and under ``torch.autocast("cpu",
dtype=torch.bfloat16)`` (what Fabric's ``bf16-mixed`` does on a CPU), alternating the arms
fp32, bf16, fp32, bf16 … so that drift of a shared machine hits both. Each arm: one untimed
step, then ``--steps`` timed steps; its figure is the median step time of the pair. Ratio =
fp32 / bf16 per pair (above 1: bf16 is faster). The linear-layer weights of each model are
printed beside it: they are the matrices autocast multiplies in bf16, and the size
``entrena.engine.backend.CPU_BF16_MIN_LINEAR_PARAMETERS`` is chosen from this table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _report, _stats …
from _report import machine, today, write_section  # noqa: E402
from _stats import ab_order, ratios, summary  # noqa: E402

SEQUENCE = 128
BATCH = 32
ENCODERS: dict[str, dict[str, int]] = {
    # layers, width, heads, feed-forward: the test model, two in between, MiniLM-L6's shape
    "bert-2x32 (tests' tiny model)": {"num_hidden_layers": 2, "hidden_size": 32,
                                      "num_attention_heads": 2, "intermediate_size": 64},
    "bert-2x128": {"num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 2,
                   "intermediate_size": 512},
    "bert-4x256": {"num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4,
                   "intermediate_size": 1024},
    "bert-6x384 (MiniLM-L6 shape)": {"num_hidden_layers": 6, "hidden_size": 384,
                                     "num_attention_heads": 12, "intermediate_size": 1536},
}
MLPS: dict[str, tuple[int, list[int], int]] = {
    # features, hidden sizes, batch
    "mlp 40→128→64 (credit example)": (40, [128, 64], 256),
    "mlp 256→1024→1024": (256, [1024, 1024], 256),
}


def build(name: str) -> tuple[Any, dict[str, Any]]:
    import torch

    generator = torch.Generator().manual_seed(0)
    if name in ENCODERS:
        from transformers import BertConfig, BertForSequenceClassification

        torch.manual_seed(0)
        model = BertForSequenceClassification(BertConfig(num_labels=2, vocab_size=30522,
                                                         **ENCODERS[name]))
        inputs = {"input_ids": torch.randint(1000, 30000, (BATCH, SEQUENCE),
                                             generator=generator),
                  "attention_mask": torch.ones(BATCH, SEQUENCE, dtype=torch.long)}
        labels = torch.randint(0, 2, (BATCH,), generator=generator)
        return model, {"inputs": inputs, "labels": labels}
    features, hidden, batch = MLPS[name]
    layers: list[Any] = []
    width = features
    for size in hidden:
        layers += [torch.nn.Linear(width, size), torch.nn.ReLU()]
        width = size
    torch.manual_seed(0)
    model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 2))
    return model, {"x": torch.randn(batch, features, generator=generator),
                   "labels": torch.randint(0, 2, (batch,), generator=generator)}


def linear_parameters(model: Any) -> int:
    import torch

    return sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))


def step_time(model: Any, optimizer: Any, batch: dict[str, Any], bf16: bool, steps: int) -> float:
    """Median seconds of ``steps`` training steps after one untimed step."""
    import contextlib

    import torch

    def one() -> None:
        context = (torch.autocast("cpu", dtype=torch.bfloat16) if bf16
                   else contextlib.nullcontext())
        with context:
            if "inputs" in batch:
                logits = model(**batch["inputs"]).logits
            else:
                logits = model(batch["x"])
            loss = torch.nn.functional.cross_entropy(logits.float(), batch["labels"])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    one()
    times = []
    for _ in range(steps):
        started = time.perf_counter()
        one()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def run(pairs: int, steps: int, threads: int) -> list[dict[str, Any]]:
    import torch

    torch.set_num_threads(threads)
    rows = []
    for name in [*ENCODERS, *MLPS]:
        model, batch = build(name)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
        fp32: list[float] = []
        bf16: list[float] = []
        for arm in ab_order(pairs, "fp32", "bf16"):
            (bf16 if arm == "bf16" else fp32).append(
                step_time(model, optimizer, batch, arm == "bf16", steps))
        row = {"model": name, "linear_parameters": linear_parameters(model),
               "fp32_s": fp32, "bf16_s": bf16, "ratio": ratios(fp32, bf16)}
        print(f"{name}: linear {row['linear_parameters']:,}  fp32 {summary(fp32, '{:.4f}')} s  "
              f"bf16 {summary(bf16, '{:.4f}')} s  fp32/bf16 {summary(row['ratio'])}", flush=True)
        rows.append(row)
    return rows


def markdown(rows: list[dict[str, Any]], pairs: int, steps: int, threads: int) -> str:
    lines = [
        "## bf16 autocast against fp32 on this CPU, by model size (`benchmarks/experiments/cpu_bf16.py`)",
        "",
        f"{today()}, {machine()}; `.venv/bin/python benchmarks/experiments/cpu_bf16.py --pairs {pairs} "
        f"--steps {steps} --threads {threads} --write`. One training step (forward, backward, "
        f"AdamW) on one fixed random batch ({BATCH} × {SEQUENCE} tokens for the encoders; 256 "
        "rows for the MLPs), fp32 and `torch.autocast('cpu', bfloat16)` alternated in one "
        f"process, {pairs} pairs, each figure the median of {steps} steps; median (min–max) "
        "over pairs.",
        "",
        "| model | nn.Linear weights | fp32 step (s) | bf16-mixed step (s) | fp32 / bf16 |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(f"| {row['model']} | {row['linear_parameters']:,} | "
                     f"{summary(row['fp32_s'], '{:.4f}')} | {summary(row['bf16_s'], '{:.4f}')} "
                     f"| {summary(row['ratio'], unit='×')} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--write", action="store_true", help="write docs/benchmarks-journal.md")
    args = parser.parse_args()
    rows = run(args.pairs, args.steps, args.threads)
    if args.write:
        write_section("cpu-bf16", markdown(rows, args.pairs, args.steps, args.threads))


if __name__ == "__main__":
    main()
