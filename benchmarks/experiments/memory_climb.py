"""Does a CPU fit's resident memory keep climbing, and does an allocator setting stop it?

Trains MiniLM-L6 (the demo's model) on the real reviews' token lengths with the demo's batch
size, length-grouped batches in the loader's order, AdamW, for ``--steps`` optimizer steps, and
records after every step the process's resident set (``VmRSS``) and its high-water mark
(``VmHWM``). Each allocator mode runs in a fresh process, one after the other (run it alone on
the machine: the figures are memory, but the step times are printed too):

- ``default``: glibc malloc as it comes (its mmap threshold adapts upwards, to 32 MiB, after
  large blocks are freed, so later blocks below it come from the heap and stay resident);
- ``fixed``: what ``entrena train`` does on Linux (:mod:`entrena.hardware.allocator`): a fixed
  mmap threshold, so large tensors are mapped and returned to the system when freed.

Output: one line per mode with the peak after the longest batch first appeared and at the end,
the growth between the two, and the mean step time; ``--json`` writes every step's figures.

``--alternate B T`` measures the time cost instead, in one process so both arms share the
machine's load: steps of batch B × T tokens alternate between a 1 MiB threshold and a 32 MiB
one (the adaptive threshold's ceiling), 8 pairs; it prints the median ratio of the pairs.

    .venv/bin/python benchmarks/experiments/memory_climb.py --steps 60
    .venv/bin/python benchmarks/experiments/memory_climb.py --alternate 32 64
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODES = ("default", "fixed")


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def worker(mode: str, steps: int, batch_size: int, max_length: int, seed: int) -> dict:
    import numpy as np
    import pandas as pd
    import torch

    if mode == "fixed":
        from entrena.hardware.allocator import configure_allocator

        configure_allocator()
    from entrena.config.models import resolve_model_name
    from entrena.data.batching import group_by_length
    from entrena.tasks.text.model import build_classifier, build_tokenizer

    torch.manual_seed(seed)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    source = resolve_model_name("minilm-l6")
    tokenizer = build_tokenizer(source)
    texts = pd.read_csv(ROOT / "examples/reviews/data/train.csv")["review"].astype(str).tolist()
    lengths = np.array([min(len(ids), max_length) for ids in
                        tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]])
    model = build_classifier(num_labels=2, pretrained=source, architecture=None,
                             vocab_size=tokenizer.vocab_size,
                             pad_token_id=tokenizer.pad_token_id, pooling="mean", dropout=0.1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    model.train()
    records = []
    epoch = 0
    batches: list = []
    longest = 0
    while len(records) < steps:
        if not batches:
            batches = list(group_by_length(lengths, batch_size, seed + epoch))
            epoch += 1
        batch = batches.pop(0)
        t = int(lengths[batch].max())
        ids = torch.randint(1000, 20000, (len(batch), t))
        mask = torch.ones_like(ids)
        for row, index in enumerate(batch):
            mask[row, int(lengths[index]):] = 0
        labels = torch.randint(0, 2, (len(batch),))
        started = time.perf_counter()
        logits = model(input_ids=ids, attention_mask=mask)
        torch.nn.functional.cross_entropy(logits, labels).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        seconds = time.perf_counter() - started
        longest = max(longest, t)
        records.append({"step": len(records) + 1, "tokens": t, "longest_so_far": longest,
                        "rss_bytes": _status_kib("VmRSS") * 1024,
                        "hwm_bytes": _status_kib("VmHWM") * 1024, "seconds": seconds})
    return {"mode": mode, "batch_size": batch_size, "max_length": max_length,
            "records": records}


def alternate(batch_size: int, tokens: int, pairs: int = 8) -> dict:
    """Median step time at a 1 MiB and a 32 MiB mmap threshold, alternated step by step."""
    import ctypes
    import statistics

    import torch

    from entrena.config.models import resolve_model_name
    from entrena.tasks.text.model import build_classifier

    libc = ctypes.CDLL("libc.so.6")
    torch.manual_seed(0)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    model = build_classifier(num_labels=2, pretrained=resolve_model_name("minilm-l6"),
                             architecture=None, vocab_size=30522, pad_token_id=0,
                             pooling="mean", dropout=0.1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)

    def step() -> float:
        ids = torch.randint(1000, 20000, (batch_size, tokens))
        started = time.perf_counter()
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids))
        torch.nn.functional.cross_entropy(
            logits, torch.zeros(batch_size, dtype=torch.long)).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - started

    times: dict[int, list[float]] = {1: [], 32: []}
    step()
    for _ in range(pairs):
        for mib in times:
            libc.mallopt(-3, mib * 2**20)  # M_MMAP_THRESHOLD
            step()  # the first step after a change settles the heap
            times[mib].append(step())
    return {"batch_size": batch_size, "tokens": tokens, "pairs": pairs,
            "median_s": {f"{k} MiB": round(statistics.median(v), 3) for k, v in times.items()},
            "ratio_1_to_32": round(statistics.median(
                a / b for a, b in zip(times[1], times[32], strict=True)), 3)}


def summarise(result: dict) -> dict:
    records = result["records"]
    final_longest = records[-1]["longest_so_far"]
    first = next(r for r in records if r["tokens"] == final_longest)
    gib = 2.0**30
    return {"mode": result["mode"], "steps": len(records),
            "longest_tokens": final_longest, "longest_at_step": first["step"],
            "hwm_at_longest_gib": round(first["hwm_bytes"] / gib, 2),
            "hwm_end_gib": round(records[-1]["hwm_bytes"] / gib, 2),
            "rss_end_gib": round(records[-1]["rss_bytes"] / gib, 2),
            "growth_after_longest": round(records[-1]["hwm_bytes"] / first["hwm_bytes"] - 1, 3),
            "mean_step_s": round(sum(r["seconds"] for r in records[1:])
                                 / max(1, len(records) - 1), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=272,
                        help="the demo's auto max_length on the bundled reviews")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--json", type=Path, help="write every step's figures here")
    parser.add_argument("--worker", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--alternate", nargs=2, type=int, metavar=("B", "T"))
    args = parser.parse_args()
    if args.alternate:
        print(json.dumps(alternate(*args.alternate)))
        return
    if args.worker:
        print(json.dumps(worker(args.worker, args.steps, args.batch_size, args.max_length,
                                args.seed)))
        return
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "unknown CPU")
    print(f"CPU: {cpu}; {os.cpu_count()} logical CPUs; load {os.getloadavg()[0]:.1f}")
    results = []
    for mode in args.modes:
        done = subprocess.run([sys.executable, __file__, "--worker", mode,
                               "--steps", str(args.steps), "--batch-size", str(args.batch_size),
                               "--max-length", str(args.max_length), "--seed", str(args.seed)],
                              capture_output=True, text=True, check=True)
        result = json.loads(done.stdout.strip().splitlines()[-1])
        results.append(result)
        print(json.dumps(summarise(result)))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
