"""What glibc's mmap threshold costs a CPU training step: time, system time and page faults.

Each arm is a fresh process (a threshold, once fixed, stays for the process): MiniLM-L6 (the
demo's model, ``AutoModelForSequenceClassification`` from the package), fused AdamW, batch B ×
T random token ids, 2 threads, 12 steps under ``--precision`` (``bf16``: CPU autocast; ``fp32``),
the median of steps 3–12 reported: wall seconds, system seconds and minor page faults per step,
and the peak resident set of the steps above the process's before them (GiB).
Thresholds: ``adaptive`` (glibc's default, what a plain PyTorch script gets) or a fixed size
in MiB (``mallopt(M_MMAP_THRESHOLD)``, what ``entrena train`` sets on a CPU:
:mod:`entrena.hardware.allocator`); a ``+thp`` suffix (``16+thp``) also starts the process with
PyTorch's ``THP_MEM_ALLOC_ENABLE=1``: tensor blocks of at least 2 MiB aligned to 2 MiB and
advised as transparent huge pages (``madvise``). Arms run in turn, ``--repeats`` rounds.

    .venv/bin/python benchmarks/experiments/allocator_faults.py [--thresholds adaptive 1 16 16+thp]
        [--precision bf16 fp32] [--tokens 160] [--repeats 2]

Run it alone on the machine: it times steps.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _report, _stats …
from _report import load_text, machine  # noqa: E402


def worker(threshold: str, precision: str, batch: int, tokens: int) -> dict:
    import resource
    import time

    import torch

    torch.set_num_threads(2)
    if threshold.removesuffix("+thp") != "adaptive":
        from entrena.hardware.allocator import configure_allocator

        configure_allocator(int(float(threshold.removesuffix("+thp")) * 2**20))
    from transformers import AutoModelForSequenceClassification

    from entrena.config.models import MODEL_ALIASES

    model = AutoModelForSequenceClassification.from_pretrained(
        str(MODEL_ALIASES["minilm-l6"].path()), num_labels=2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 20000, (batch, tokens), generator=generator)
    labels = torch.randint(0, 2, (batch,), generator=generator)
    model.train()
    status = Path("/proc/self/status")

    def rss(field: str) -> int:
        line = next(x for x in status.read_text().splitlines() if x.startswith(field + ":"))
        return int(line.split()[1]) * 1024

    base = rss("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # the peak starts again here
    rows = []
    for step in range(12):
        before, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        after = resource.getrusage(resource.RUSAGE_SELF)
        if step >= 2:
            rows.append((time.perf_counter() - started, after.ru_stime - before.ru_stime,
                         after.ru_minflt - before.ru_minflt))
    return {"threshold": threshold, "precision": precision,
            "step_s": statistics.median(r[0] for r in rows),
            "system_s": statistics.median(r[1] for r in rows),
            "page_faults": statistics.median(r[2] for r in rows),
            "peak_gib": (rss("VmHWM") - base) / 2**30}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        print(json.dumps(worker(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--thresholds", nargs="+", default=["adaptive", "1", "16"])
    parser.add_argument("--precision", nargs="+", default=["bf16", "fp32"])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=160)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    load, results = [os.getloadavg()[0]], []
    for _ in range(args.repeats):
        for precision in args.precision:
            for threshold in args.thresholds:
                env = {**os.environ, **({"THP_MEM_ALLOC_ENABLE": "1"}
                                        if threshold.endswith("+thp") else {})}
                done = subprocess.run([sys.executable, __file__, "worker", threshold, precision,
                                       str(args.batch), str(args.tokens)],
                                      capture_output=True, text=True, check=True, env=env)
                results.append(json.loads(done.stdout.strip().splitlines()[-1]))
                load.append(os.getloadavg()[0])
                print(json.dumps(results[-1]), flush=True)
    print(f"\n{machine()}; {load_text(load)}; batch {args.batch} x {args.tokens} tokens")
    print("| precision | mmap threshold | step (s) | system time (s) | page faults per step "
          "| peak above start (GiB) |")
    print("|---|---|---|---|---|---|")
    for precision in args.precision:
        for threshold in args.thresholds:
            rows = [r for r in results if r["precision"] == precision
                    and r["threshold"] == threshold]
            cells = [", ".join(fmt.format(r[key]) for r in rows) for key, fmt in
                     (("step_s", "{:.2f}"), ("system_s", "{:.2f}"), ("page_faults", "{:,.0f}"),
                      ("peak_gib", "{:.2f}"))]
            label = threshold if threshold == "adaptive" else \
                f"{threshold.removesuffix('+thp')} MiB" + (" + THP" if "+thp" in threshold else "")
            print(f"| {precision} | {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
