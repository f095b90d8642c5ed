"""The efficiency monitor on a CUDA GPU: MFU against the catalog peak, NVML utilisation, the
diagnosis, and throughput with the monitor on and off (alternating pairs).

Usage (on a machine with a CUDA GPU; no network, no data files needed):

    OUT=/some/folder python benchmarks/experiments/monitor_gpu.py [TOKENIZER_DIR] [--pairs 2]

TOKENIZER_DIR: a folder with MiniLM's tokenizer files (default: the ``minilm-l6`` alias). The
model is a 4-layer BERT of width 256 built from a config (random weights), trained in
bf16-mixed on 2,000 generated reviews (``tests/conftest.py``), batch 64, 2 epochs. Writes
``$OUT/monitor_gpu.json`` (efficiency, diagnosis, throughputs) and ``$OUT/report.html``.
Throughput of a pair's runs: samples / fit wall time (see ``monitor_overhead.py``); the first
run (CUDA start-up) is not in the pairs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))
from conftest import review_rows, write_csv  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("tokenizer", nargs="?", default="minilm-l6")
    parser.add_argument("--pairs", type=int, default=2)
    args = parser.parse_args()
    import entrena
    from entrena.callbacks.efficiency import EfficiencyMonitor

    out = Path(os.environ.get("OUT", "."))
    work = Path(tempfile.mkdtemp(prefix="monitor-gpu-"))
    write_csv(work / "data" / "train.csv", review_rows(2000, seed=1))
    write_csv(work / "data" / "test.csv", review_rows(400, seed=2))
    config = {
        "name": "gpu", "task": "text-classification",
        "data": {"train": str(work / "data" / "train.csv"),
                 "test": str(work / "data" / "test.csv"), "text_column": "text",
                 "label_column": "label", "validation_fraction": 0.1},
        "model": {"architecture": {"num_hidden_layers": 4, "hidden_size": 256,
                                   "num_attention_heads": 4, "intermediate_size": 1024},
                  "tokenizer": args.tokenizer, "max_length": 128},
        "train": {"max_epochs": 2, "batch_size": 64, "learning_rate": 1e-3, "seed": 0,
                  "accelerator": "cuda", "precision": "bf16-mixed"},
        "tracking": {"enabled": False},
    }
    original = EfficiencyMonitor.on_batch_end

    from monitor_overhead import fit_throughput

    def run(name: str, monitor: bool) -> dict:
        if not monitor:
            EfficiencyMonitor.on_batch_end = lambda self, state: None
        try:
            return entrena.train(config, run_dir=work / "runs" / name, restart=True).metrics
        finally:
            EfficiencyMonitor.on_batch_end = original

    first = run("first", True)
    shutil.copy(work / "runs" / "first" / "report.html", out / "report.html")
    pairs = []
    for i in range(args.pairs):
        order = (True, False) if i % 2 == 0 else (False, True)
        got = {on: fit_throughput(work / "runs" / f"p{i}{on}", run(f"p{i}{on}", on))
               for on in order}
        pairs.append({"on": got[True], "off": got[False], "off_over_on": got[False] / got[True]})
        print(pairs[-1], flush=True)
    result = {"efficiency": first["efficiency"], "diagnosis": first["diagnosis"],
              "baseline": first.get("baseline"), "fit": first["fit"], "pairs": pairs,
              "median_off_over_on": statistics.median(p["off_over_on"] for p in pairs)
              if pairs else None}
    (out / "monitor_gpu.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
