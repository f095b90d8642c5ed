"""Does warming PyTorch's bf16 CPU kernels on the idle core, while the training process imports
transformers and Lightning Fabric, bring the demo's first training step sooner? (issue 24)

Step 1 of ``entrena train examples/reviews/config.yaml`` costs more than a later step of its
width (first use of each oneDNN kernel shape, first touch of memory). The imports before the
fit run Python on one core and leave the other idle, so a thread could run MiniLM-shaped
bf16 work there first (linear layers 384 -> 384 -> 1536 -> 384, batched attention products,
layer norm, forward and backward, at 32 x 64 and 32 x 128 tokens; PyTorch releases the
interpreter lock inside its operators).

Each run: ``entrena train`` in a fresh process through this file (``--worker``), which
imports torch, starts the warm-up thread or not, and runs the CLI; the run is stopped with
SIGTERM once its step-1 record is written. Warm data cache, tracking at its default; the arms
alternated, ``--pairs`` times. Prints, per run, the seconds from the process start to the
fit's start and to step 1. Run it alone on the cores.

    .venv/bin/python benchmarks/experiments/kernel_warmup.py [--pairs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _report, _stats …
from _report import ROOT  # noqa: E402

CONFIG = ROOT / "examples" / "reviews" / "config.yaml"


def _warm() -> None:
    """MiniLM-L6-shaped bf16 forward and backward on random tensors."""
    import torch
    import torch.nn.functional as F

    with torch.autocast("cpu", dtype=torch.bfloat16):
        for width in (64, 128):
            x = torch.randn(32 * width, 384, requires_grad=True)
            up = torch.randn(1536, 384, requires_grad=True)
            down = torch.randn(384, 1536, requires_grad=True)
            square = torch.randn(384, 384, requires_grad=True)
            h = F.linear(F.gelu(F.linear(F.linear(x, square), up)), down)
            q = h.view(32, width, 12, 32).transpose(1, 2)
            a = torch.softmax(q @ q.transpose(-1, -2), -1) @ q
            F.layer_norm(a.transpose(1, 2).reshape(32 * width, 384).float(), (384,)).sum(
            ).backward()


def worker(warm: bool, run_dir: str) -> None:
    import torch  # noqa: F401  (both arms import it first)

    if warm:
        threading.Thread(target=_warm, daemon=True).start()
    sys.argv = ["entrena", "train", str(CONFIG), "--run-dir", run_dir]
    runpy.run_module("entrena.cli", run_name="__main__")


def one(warm: bool) -> dict:
    run_dir = Path(tempfile.mkdtemp(prefix="kernel-warmup-")) / "run"
    events = run_dir / "events.jsonl"
    process = subprocess.Popen([sys.executable, __file__, "--worker",
                                "--warm" if warm else "--cold", str(run_dir)], cwd=ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not (events.is_file() and '"type": "step"' in events.read_text()):
        if process.poll() is not None:
            raise RuntimeError(f"the run ended before its first step (exit {process.returncode})")
        time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    process.wait()
    records = [json.loads(line) for line in events.read_text().splitlines()]
    fit = next(r for r in records if r["type"] == "fit_start")
    step = next(r for r in records if r["type"] == "step")
    start = step["time"] - step["since_process_start_s"]
    return {"warm": warm, "fit_start_s": round(fit["time"] - start, 2),
            "step1_s": step["since_process_start_s"],
            "load": os.getloadavg()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--warm", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cold", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("run_dir", nargs="?", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.warm, args.run_dir)
        return
    for pair in range(args.pairs):
        for warm in (False, True) if pair % 2 == 0 else (True, False):
            print(json.dumps(one(warm)), flush=True)


if __name__ == "__main__":
    main()
