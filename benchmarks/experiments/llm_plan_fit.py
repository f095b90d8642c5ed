"""How right is the plan of an ``llm-sft`` run on this CPU? ``plan.json`` against the fit.

Usage: .venv/bin/python benchmarks/experiments/llm_plan_fit.py [--only NAME] [--chats 64] [--no-write]

For each configuration below, one ``entrena train examples/reviews-chat/config.yaml`` process
runs on ``--chats`` training chats (one epoch, so every batch, the longest included, is
trained), tracking off, no test set, 8 validation chats. ``train`` plans first, calibrated
by its probe (a measured forward and backward of the run's longest batch and timed first
training steps, as every fit on a CPU), writes ``plan.json`` and then fits; its
``metrics.json`` holds ``plan_vs_actual``. Compared here:

- peak memory: the plan's predicted peak resident set of the process against the fit's
  measured peak (VmHWM, reset just before the fit); target ±15% (issue 21). The error of the
  part above the process's base (imports and runtime, measured before the model is built) is
  shown beside it, as the base is most of a small model's process;
- time: the plan's epoch time against the measured one; target ±25%.

This is the planner a user meets before spending the time (``entrena plan --calibrate`` runs
the same probe). ``benchmarks/llm_plan_accuracy.py`` checks the formula alone (no probe),
for other machines' plans. Figures go to the ``llm-plan-fit`` section of docs/benchmarks-journal.md.
Timing needs the cores to itself: the script refuses to start above a load of 0.5 per core
(``--force`` runs anyway).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _report, _stats …
from _report import ROOT, load_text, machine, today, train_json, write_section  # noqa: E402

CONFIG = ROOT / "examples" / "reviews-chat" / "config.yaml"
CONFIGS = [  # (name, overrides)
    ("lora r16 b8 s128 (the demo's)", ["train.batch_size=8", "model.max_length=128"]),
    ("lora r16 b4 s256", ["train.batch_size=4", "model.max_length=256"]),
    ("lora r16 b4 s256 checkpointing", ["train.batch_size=4", "model.max_length=256",
                                        "model.gradient_checkpointing=true"]),
    ("lora r64 b2 s256", ["train.batch_size=2", "model.max_length=256", "model.lora.r=64",
                          "model.lora.alpha=128"]),
    ("full b2 s128", ["train.batch_size=2", "model.max_length=128", "model.finetuning=full",
                      "train.learning_rate=1e-5"]),
]
MEMORY_TARGET = 0.15
TIME_TARGET = 0.25
GIB = 2**30


def fixed(chats: int) -> list[str]:
    return ["tracking.enabled=false", "data.test=null", f"data.max_train_samples={chats}",
            "data.max_eval_samples=8", "train.max_epochs=1", "train.evals_per_epoch=1"]


def row_of(name: str, run_dir: Path, metrics: dict, wall: float) -> dict:
    plan = json.loads((run_dir / "plan.json").read_text())
    comparison = metrics["plan_vs_actual"]
    calibration = plan["calibration"]
    return {"name": name, "memory_predicted": comparison["peak_memory_bytes"]["predicted"],
            "memory_actual": comparison["peak_memory_bytes"]["actual"],
            "base_rss": calibration.get("base_rss_bytes") or 0,
            "time_predicted": comparison["epoch_time_s"]["predicted"],
            "time_actual": comparison["epoch_time_s"]["actual"],
            "memory_shape": calibration.get("memory_shapes", {}).get("train"),
            "precision": calibration.get("precision"), "steps": metrics["fit"].get("steps"),
            "timed_steps": calibration.get("steps"),
            "wall_s": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chats", type=int, default=64, help="training chats per run")
    parser.add_argument("--only", help="configurations whose name contains this "
                        "(implies --no-write)")
    parser.add_argument("--set", action="append", default=[], dest="sets",
                        help="one more override for every run (e.g. train.precision=32-true)")
    parser.add_argument("--force", action="store_true", help="run on a busy machine")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    if not (ROOT / "examples" / "reviews" / "data" / "train.csv").is_file():
        sys.exit("run `make demo-data` first")
    if os.getloadavg()[0] / (os.cpu_count() or 1) > 0.5 and not args.force:
        sys.exit("the machine is busy; try later or pass --force")
    configs = [c for c in CONFIGS if not args.only or args.only in c[0]]
    rows, load = [], [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        for index, (name, sets) in enumerate(configs):
            run_dir = Path(tmp) / f"run{index}"
            started = time.perf_counter()
            metrics = train_json(CONFIG, run_dir, [*fixed(args.chats), *sets, *args.sets])
            rows.append(row_of(name, run_dir, metrics, time.perf_counter() - started))
            load.append(os.getloadavg()[0])
            row = rows[-1]
            print(f"{name}: memory {row['memory_predicted'] / GIB:.2f} GiB planned, "
                  f"{row['memory_actual'] / GIB:.2f} measured; epoch {row['time_predicted']:.0f}"
                  f" s planned, {row['time_actual']:.0f} measured", flush=True)
    raw = Path(tempfile.gettempdir()) / "llm_plan_fit.json"
    raw.write_text(json.dumps(rows, indent=2))
    print(f"raw rows: {raw}")
    body = report(rows, args, load)
    print(body)
    if not (args.no_write or args.only):
        write_section("llm-plan-fit", body)


def report(rows: list[dict], args: argparse.Namespace, load: list[float]) -> str:
    def error(predicted: float, actual: float) -> float:
        return predicted / actual - 1

    lines = ["## LLM plan against the fit on this CPU (`plan.json`, probe-calibrated)", "",
             f"{today()}, {machine()}; {load_text(load)}.", "",
             f"`python benchmarks/experiments/llm_plan_fit.py --chats {args.chats}"
             + "".join(f" --set {s}" for s in args.sets)
             + f"`: `entrena train examples/reviews-chat/config.yaml` on {args.chats} training "
             "chats, one epoch, tracking off, 8 validation chats; precision "
             f"{', '.join(sorted({str(r['precision']) for r in rows}))}. Planned: `plan.json` "
             "(the probe's measured forward and backward of the longest batch, plus weights, "
             "gradients and optimizer states). Measured: the fit's peak resident set (VmHWM "
             "reset before the fit) and its epoch time. The plan's time comes from the first "
             "training steps, timed (their number in brackets) and counted in the epoch. "
             "\"Above base\": the same error on the "
             "memory above the process's base (imports, runtime), which is most of a small "
             "model's process.", "",
             "| configuration | steps (timed) | memory shape | peak planned | measured | error | "
             "above base | epoch planned | measured | error |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    memory_ok = time_ok = 0
    for row in rows:
        memory = error(row["memory_predicted"], row["memory_actual"])
        above = error(row["memory_predicted"] - row["base_rss"],
                      row["memory_actual"] - row["base_rss"])
        seconds = error(row["time_predicted"], row["time_actual"])
        memory_ok += abs(memory) <= MEMORY_TARGET
        time_ok += abs(seconds) <= TIME_TARGET
        shape = "×".join(str(v) for v in row["memory_shape"] or [])
        lines.append(
            f"| {row['name']} | {row['steps']} ({row['timed_steps']}) | {shape} | "
            f"{row['memory_predicted'] / GIB:.2f} GiB | {row['memory_actual'] / GIB:.2f} GiB | "
            f"{memory:+.0%} | {above:+.0%} | {row['time_predicted']:.0f} s | "
            f"{row['time_actual']:.0f} s | {seconds:+.0%} |")
    lines += ["", f"Memory within ±{MEMORY_TARGET:.0%}: {memory_ok} of {len(rows)}; time within "
              f"±{TIME_TARGET:.0%}: {time_ok} of {len(rows)}."]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
