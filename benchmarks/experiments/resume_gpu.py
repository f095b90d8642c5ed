"""Resume on a CUDA GPU: SIGTERM at step 7, resume, compare with an uninterrupted run, under
bf16-mixed and 16-mixed (tiny BERT of tests/conftest.py on 96 generated rows, 3 epochs,
`train.deterministic: true`). Prints, per precision: the signal-to-saved time, the gradient
scaler's state in the checkpoint, whether CUDA RNG states were saved, whether the resumed run's
model/ files equal the uninterrupted run's byte for byte, and whether two uninterrupted runs do.

Usage (on a machine with a CUDA GPU):
    CUBLAS_WORKSPACE_CONFIG=:4096:8 .venv/bin/python benchmarks/experiments/resume_gpu.py

The figures in docs/benchmarks-journal.md (section resume-gpu) come from one run of this script.
"""

from __future__ import annotations

import io
import os
import signal
import sys
import time
from pathlib import Path

import torch
from rich.console import Console
from safetensors.torch import load_file

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))  # conftest's helpers
import entrena  # noqa: E402
from conftest import build_config, review_rows, write_csv  # noqa: E402
from entrena.core.callback import Callback  # noqa: E402
from entrena.engine.checkpointing import CheckpointStore  # noqa: E402
from entrena.errors import Interrupted  # noqa: E402


class SigtermAt(Callback):
    def __init__(self, step: int):
        self.step, self.done = step, False

    def on_batch_end(self, state) -> None:
        if state.step == self.step and not self.done:
            self.done = True
            os.kill(os.getpid(), signal.SIGTERM)


def files(run_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((run_dir / "model").iterdir())}


def quiet() -> Console:
    return Console(file=io.StringIO())


def main() -> None:
    work = Path("/tmp/gpucheck")
    work.mkdir(exist_ok=True)
    write_csv(work / "train.csv", review_rows(96, seed=1))
    write_csv(work / "test.csv", review_rows(32, seed=2))
    print("torch", torch.__version__, torch.cuda.get_device_name(), flush=True)
    for precision in ("bf16-mixed", "16-mixed"):
        cfg = build_config({"train.deterministic": True, "train.checkpoint.every_steps": 3,
                            "train.precision": precision, "train.accelerator": "cuda",
                            "train.max_epochs": 3},
                           train=str(work / "train.csv"), test=str(work / "test.csv"))
        ref = entrena.train(cfg, run_dir=work / f"ref-{precision}", console=quiet())
        run = work / f"cut-{precision}"
        try:
            entrena.train(cfg, run_dir=run, callbacks=[SigtermAt(7)], console=quiet())
        except Interrupted as exc:
            print(precision, "interrupted:", exc, flush=True)
        store = CheckpointStore(run / "checkpoints")
        info = store.latest_readable()
        payload = store.load(info)
        scaler = {k: (float(v) if hasattr(v, "item") else v)
                  for k, v in payload["precision"].items()}
        print(precision, "checkpoint", info.path.name, info.bytes, "bytes; scaler state:", scaler,
              "cuda rng saved:", "cuda" in payload["rng"], flush=True)
        console = Console(file=io.StringIO())
        started = time.perf_counter()
        res = entrena.train(cfg, run_dir=run, console=console)
        print(precision, "resume said:", console.file.getvalue().splitlines()[0],
              f"(resumed run took {time.perf_counter() - started:.1f}s)", flush=True)
        a = load_file(str(run / "model" / "model.safetensors"))
        b = load_file(str(ref.run_dir / "model" / "model.safetensors"))
        diff = max(float((a[k].float() - b[k].float()).abs().max()) for k in a)
        print(precision, "model files bitwise identical to uninterrupted:",
              files(run) == files(ref.run_dir), "max abs weight diff:", diff,
              "steps", res.metrics["fit"]["steps"], ref.metrics["fit"]["steps"],
              "test acc", res.metrics["test"]["accuracy"], ref.metrics["test"]["accuracy"],
              flush=True)
        ref2 = entrena.train(cfg, run_dir=work / f"ref2-{precision}", console=quiet())
        print(precision, "two uninterrupted runs identical:",
              files(ref2.run_dir) == files(ref.run_dir), flush=True)


if __name__ == "__main__":
    main()
