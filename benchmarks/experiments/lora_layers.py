"""LoRA on the last N decoder layers (``model.lora.layers``) against every layer: the LLM
demo's training time and test exact match.

Trains ``examples/reviews-chat/config.yaml`` (SmolLM2-135M, LoRA r 16 on all linear layers,
800 review chats, one epoch of 100 steps) with ``entrena train``, each run its own process in
a fresh run directory, once per ``--layers`` value and ``--seeds`` seed, every layer count of a
seed back to back (machine noise hits them alike):

    entrena train examples/reviews-chat/config.yaml --run-dir DIR --restart \\
        --set model.lora.layers=N --set train.seed=S        # N = all: model.lora.layers=null

It reads each run's ``metrics.json``: the test and validation exact match (300 and 100 review
prompts: a standard error of ~0.023 at 0.8 on the test), ``fit.train_time_s`` (the optimizer
steps only) and ``cost.wall_time_s`` (the command). The time ratio is each run's training time
over the all-layers run of the same seed.

Every run is printed as a JSON line as it finishes and appended to
``benchmarks/results/lora-layers-<cpu kind>-<date>.jsonl``; ``--from FILE`` publishes such a
file again without running anything; ``--runs DIR ...`` reads finished run directories (their
``config.yaml`` names the layers and seed) instead of training. ``--write`` puts the table in
docs/benchmarks-journal.md (section ``bench:lora-layers``).

Usage::

    .venv/bin/python benchmarks/experiments/lora_layers.py [--layers all 15 8] [--seeds 42 43 44] [--write]

About 3–4 minutes a run on 2 AVX-512 BF16 EPYC cores. Run it alone on the cores.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _report, _stats …
from _report import ROOT, publish_runs, read_rows, run_all, today  # noqa: E402
from budget import cpu_kind  # noqa: E402

CONFIG = ROOT / "examples" / "reviews-chat" / "config.yaml"
ENTRENA = Path(sys.executable).with_name("entrena")


def read_run(run_dir: Path, wall_s: float | None = None) -> dict[str, Any]:
    """One result row from a finished run directory."""
    import yaml

    metrics = json.loads((run_dir / "metrics.json").read_text())
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    layers = ((config.get("model") or {}).get("lora") or {}).get("layers")
    return {"layers": layers if layers is not None else "all",
            "seed": (config.get("train") or {}).get("seed"),
            "test_exact_match": metrics["test"]["exact_match"],
            "validation_exact_match": metrics["validation"]["exact_match"],
            "train_time_s": metrics["fit"]["train_time_s"],
            "command_s": wall_s if wall_s is not None else metrics["cost"]["wall_time_s"],
            "precision": metrics["fit"].get("precision"),
            "cpu_kind": cpu_kind(), "run": str(run_dir)}


def one_run(layers: str, seed: int, folder: Path) -> dict[str, Any]:
    run_dir = folder / f"layers-{layers}-seed-{seed}"
    value = "null" if layers == "all" else layers
    command = [str(ENTRENA), "train", str(CONFIG), "--run-dir", str(run_dir), "--restart",
               "--set", f"model.lora.layers={value}", "--set", f"train.seed={seed}"]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n"
                         f"{done.stderr[-2000:]}")
    return read_run(run_dir, wall)


def table(rows: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """The per-run table and one summary line per layer count."""
    every = {r["seed"]: r["train_time_s"] for r in rows if r["layers"] == "all"}
    lines = ["| LoRA layers | seed | test exact match | validation | training | ratio | "
             "command |", "|---|---:|---:|---:|---:|---:|---:|"]
    order = sorted(rows, key=lambda r: (r["layers"] != "all", -int(r["layers"])
                                        if r["layers"] != "all" else 0, r["seed"]))
    for r in order:
        base = every.get(r["seed"])
        ratio = f"{r['train_time_s'] / base:.2f}" if base else "–"
        lines.append(f"| {r['layers']} | {r['seed']} | {r['test_exact_match']:.3f} | "
                     f"{r['validation_exact_match']:.2f} | {r['train_time_s']:.0f} s | "
                     f"{ratio} | {r['command_s']:.0f} s |")
    summary = []
    for layers in dict.fromkeys(r["layers"] for r in order):
        mine = [r for r in order if r["layers"] == layers]
        ems = [r["test_exact_match"] for r in mine]
        ratios = [r["train_time_s"] / every[r["seed"]] for r in mine if r["seed"] in every]
        summary.append(f"- **{layers} layers**: test exact match mean {statistics.mean(ems):.3f}"
                       f" over {len(ems)} seed(s) ({min(ems):.3f}–{max(ems):.3f})"
                       + (f"; training time {statistics.mean(ratios):.2f}× all layers'"
                          if ratios and layers != "all" else ""))
    return lines, summary


def publish(rows: list[dict[str, Any]], load: list[float], command: str, write: bool,
            order: str = "the layer counts of a seed back to back") -> None:
    lines, summary = table(rows)
    kind = rows[0]["cpu_kind"] if rows else "?"
    about = ["", f"(`entrena train examples/reviews-chat/config.yaml --set "
             f"model.lora.layers=N --set train.seed=S`, each run its own process, {order}; "
             f"CPU kind {kind}, precision "
             f"{rows[0].get('precision') if rows else '?'}. SmolLM2-135M has 30 decoder "
             "layers; LoRA r 16 on all 7 linear projections of each adapted layer. Training: "
             "`fit.train_time_s` (the 100 optimizer steps); command: the whole `entrena "
             "train` (load, plan, fit, validation, test on 300 prompts, zero-shot baseline, "
             "report). The test exact match on 300 prompts has a standard error of ~0.023.)"]
    publish_runs("lora-layers", "LoRA on the last layers only (`model.lora.layers`): the LLM "
                 "demo", load=load, command=command, about=about, table=lines,
                 summary=summary, write=write)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", nargs="+", default=["all", "15", "8"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[42, 43, 44])
    parser.add_argument("--from", dest="from_file", type=Path)
    parser.add_argument("--runs", nargs="+", type=Path)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    command = "python benchmarks/experiments/lora_layers.py " + " ".join(sys.argv[1:])
    if args.from_file:
        publish(read_rows(args.from_file), [], command, args.write)
        return
    out = ROOT / "benchmarks" / "results" / f"lora-layers-{cpu_kind()}-{today()}.jsonl"
    if args.runs:
        rows, load = [read_run(d) for d in args.runs], []
    else:
        rows, load = run_all("lora-layers-", [(layers, seed) for seed in args.seeds
                                              for layers in args.layers], one_run)
    with out.open("a") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")
    publish(rows, load, command, args.write,
            *(["finished run directories trained one after another on the quiet machine "
               "(read back with --runs)"] if args.runs else []))


if __name__ == "__main__":
    main()
