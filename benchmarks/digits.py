"""Train the image example (`make digits`) from scratch and record it in docs/benchmarks-journal.md
(section `digits`).

Usage: .venv/bin/python benchmarks/digits.py [--run-dir DIR] [--export] [--threads 1 2]

Runs `entrena train examples/digits/config.yaml --run-dir DIR --restart` with an empty
prepared-data cache (so the images are read, checked and decoded as on a fresh clone) and times
the whole process; then reads `metrics.json`: test accuracy and macro-F1, the thumbnail
logistic-regression and majority baselines on the same split, the fit's time. `--threads N …`
runs the same command once per thread count (`--set train.num_threads=N`, each with a fresh
cache) and records the fit times side by side. With `--export` it also exports the first run
to ONNX and records the parity check. The data must exist first (`make digits-data`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import ROOT, machine, today, write_section  # noqa: E402

CONFIG = ROOT / "examples" / "digits" / "config.yaml"


def train(run: Path, threads: int | None) -> dict[str, Any]:
    """One `entrena train` of the example in a fresh cache; its metrics, wall time, load."""
    entrena = str(Path(sys.executable).with_name("entrena"))
    extra = ["--set", f"train.num_threads={threads}"] if threads else []
    env = {**os.environ, "ENTRENA_CACHE_DIR": tempfile.mkdtemp(prefix="digits-cache-")}
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    done = subprocess.run([entrena, "train", "examples/digits/config.yaml", "--run-dir",
                           str(run), "--restart", *extra], cwd=ROOT, capture_output=True,
                          text=True, check=False, env=env)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"training failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return {"metrics": json.loads((run / "metrics.json").read_text()), "wall_s": wall,
            "load": (load_before, os.getloadavg()[0]),
            "report": json.loads((run / "data_report.json").read_text())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", type=Path, default=None)
    parser.add_argument("--export", action="store_true")
    parser.add_argument("--threads", type=int, nargs="*", default=[])
    args = parser.parse_args()
    if not (CONFIG.parent / "data" / "train").is_dir():
        sys.exit("no examples/digits/data/train: run `make digits-data` first")
    base = args.run_dir or Path(tempfile.mkdtemp(prefix="digits-")) / "digits"
    first = train(base, None)
    metrics, report = first["metrics"], first["report"]
    test, fit, baseline = metrics["test"], metrics["fit"], metrics["baseline"]
    logreg, majority = baseline["thumbnail_logreg"], baseline["majority"]
    import yaml

    config = yaml.safe_load((base / "config.yaml").read_text())
    seed, threads = config["train"]["seed"], fit["threads"]
    rows = [
        (f"`small-cnn` (entrena; {fit['epochs']} epochs, {fit['stop_reason']})",
         test["accuracy"], test["macro_f1"],
         f"{fit['train_time_s']:.1f} s in training steps, {threads} thread(s)"),
        ("logistic regression on 8 x 8 thumbnails (the baseline)",
         logreg["test"]["accuracy"], logreg["test"]["macro_f1"],
         f"{logreg['time_s']:.2f} s to fit and score"),
        ("majority class", majority["test"]["accuracy"], majority["test"]["macro_f1"], "-"),
    ]
    table = "\n".join(f"| {name} | {acc:.4f} | {f1:.4f} | {cost} |"
                      for name, acc, f1, cost in rows)
    images = report["images"]
    lines = [
        "## Images: handwritten digits, a small CNN (`make digits`)",
        "",
        f"{today()}, {machine()}; load average {first['load'][0]:.1f} before and "
        f"{first['load'][1]:.1f} after (the machine was shared).",
        "",
        "Command: `entrena train examples/digits/config.yaml` (what `make digits` runs; here "
        "with a fresh `--run-dir`, `--restart` and an empty prepared-data cache), seed "
        f"{seed}. Data (`make digits-data`): scikit-learn's `load_digits`, 1,437 training and "
        "360 test PNGs (8 x 8 grayscale, a seeded stratified 80/20 split); 10% of the training "
        "images held out for validation (no validation folder). Images: "
        f"{images['channels']} channel(s) at {images['image_size']} x {images['image_size']} "
        f"({images['image_size_from']}), decoded cache "
        f"{'on' if images['decoded_cache'] else 'off'}; data read, checked and decoded in "
        f"{report['prepare_time_s']:.1f} s. Whole command: {first['wall_s']:.0f} s wall time.",
        "",
        "| model | test accuracy | test macro-F1 | time |",
        "|---|---|---|---|",
        table,
        "",
        "One run, one seed; 360 test images: one image is 0.28 points.",
    ]
    if args.threads:
        lines += ["", "Thread counts (`--set train.num_threads=N`, same seed, fresh cache each):",
                  "", "| threads | training steps | whole command | test accuracy | load before |",
                  "|---|---|---|---|---|"]
        for n in args.threads:
            result = train(base.with_name(f"digits-threads-{n}"), n)
            f = result["metrics"]["fit"]
            lines.append(f"| {n} | {f['train_time_s']:.1f} s | {result['wall_s']:.0f} s | "
                         f"{result['metrics']['test']['accuracy']:.4f} | "
                         f"{result['load'][0]:.1f} |")
    if args.export:
        entrena = str(Path(sys.executable).with_name("entrena"))
        out = subprocess.run([entrena, "export", str(base), "--json"], cwd=ROOT,
                             capture_output=True, text=True, check=False)
        if out.returncode not in (0, 3):
            sys.exit(f"export failed ({out.returncode}):\n{out.stderr[-3000:]}")
        parity = json.loads(out.stdout)["parity"]
        lines += ["", f"`entrena export RUN` (ONNX): parity on {parity['examples']} test "
                      f"images, max |Δlogit| {parity['max_abs_diff']:.1e}, label agreement "
                      f"{parity['label_agreement']:.4f}: "
                      f"{'passed' if parity['passed'] else 'FAILED'}."]
    body = "\n".join(lines) + "\n"
    write_section("digits", body)
    print(body)


if __name__ == "__main__":
    main()
