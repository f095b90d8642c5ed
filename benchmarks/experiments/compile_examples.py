"""Does ``torch.compile`` pay for the small examples? Eager against compiled ``entrena train``.

For each example (``tiny``: a 2-layer BERT of width 32 on 400 reviews; ``digits``: the small
CNN on 8 x 8 images; ``credit``: the tabular MLP), trains it with ``train.compile=false`` and
``train.compile=true``, alternated (``--pairs`` of each), each run a fresh process with
inductor's caches in a fresh folder (``TORCHINDUCTOR_CACHE_DIR``: every compiled run pays a
cold compilation, as a user's first run does), tracking off, early stopping off and
``train.max_epochs`` fixed (``--epochs``), so both arms train the same number of steps on the
same seeded batches. The example's other settings stay as shipped (``num_threads``, batch
size, precision ``auto``).

From each run's ``events.jsonl`` (the ``epoch`` records' cumulative ``train_time_s``, the
seconds of training steps, evaluation excluded) and its wall time:

- **step speed-up**: the eager arm's median seconds of an epoch after the first over the
  compiled arm's (the first epoch holds the compilations: the training graph, and the
  recompile automatic dynamic shapes make when a second batch shape comes);
- **compile seconds** (an estimate): the compiled run's extra wall time over the eager run of
  its pair, plus the step time compiling saved in that run (``epochs`` x the per-epoch saving),
  so that it counts what compiling added (training and evaluation graphs), not its net cost;
- **pays after**: the seconds of eager training steps from which the speed-up repays the
  compile seconds with ``entrena.engine.compiling.REPAY_MARGIN``, the rule of
  ``train.compile: auto``.

Prints one JSON line per run and the summary; ``--write`` puts the section
``bench:compile-examples`` in docs/benchmarks-journal.md. Run it alone on the cores.

Usage::

    python benchmarks/experiments/compile_examples.py [--examples tiny digits credit] [--pairs 2]
        [--epochs 4] [--write]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _report, _stats …
from _report import ROOT, publish_runs, run_all  # noqa: E402

ENTRENA = Path(sys.executable).with_name("entrena")
EXAMPLES = {"tiny": ROOT / "examples" / "tiny" / "config.yaml",
            "digits": ROOT / "examples" / "digits" / "config.yaml",
            "credit": ROOT / "examples" / "credit" / "config.yaml"}
"""The examples measured, by name (``make digits-data`` and ``make credit-data`` first)."""


def one_run(example: str, compiled: bool, epochs: int, folder: Path) -> dict:
    """Train ``example`` once, eager or compiled; return what this benchmark reports."""
    arm = "compiled" if compiled else "eager"
    run_dir = folder / f"{example}-{arm}-{time.monotonic_ns()}"
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(run_dir) + "-inductor")
    command = [str(ENTRENA), "train", str(EXAMPLES[example]), "--run-dir", str(run_dir),
               "--set", f"train.compile={'true' if compiled else 'false'}",
               "--set", "tracking.enabled=false", "--set", "train.early_stopping.enabled=false",
               "--set", f"train.max_epochs={epochs}"]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env,
                          check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{example} {arm} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    if compiled and "compile: on" not in done.stderr:
        raise RuntimeError(f"{example}: train.compile=true did not compile (no 'compile: on' "
                           "in the log)")
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    cumulative = [e["train_time_s"] for e in events if e["type"] == "epoch"]
    per_epoch = [b - a for a, b in zip([0.0, *cumulative], cumulative, strict=False)]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    plan = json.loads((run_dir / "plan.json").read_text())
    return {"example": example, "arm": arm, "wall_s": round(wall, 2),
            "epoch_s": [round(s, 3) for s in per_epoch],
            "steps": metrics["fit"]["steps"], "precision": metrics["fit"]["precision"],
            "parameters": plan["model"]["parameters"],
            "test_accuracy": metrics.get("test", {}).get("accuracy")}


def summarise(runs: list[dict], example: str, margin: float) -> dict:
    """Per-pair figures of ``example`` (runs in pair order: eager and compiled alternate)."""
    eager = [r for r in runs if r["example"] == example and r["arm"] == "eager"]
    compiled = [r for r in runs if r["example"] == example and r["arm"] == "compiled"]
    speedups, compile_s, pays = [], [], []
    for e, c in zip(eager, compiled, strict=True):
        e_steady = statistics.median(e["epoch_s"][1:] or e["epoch_s"])
        c_steady = statistics.median(c["epoch_s"][1:] or c["epoch_s"])
        speedup = e_steady / c_steady
        saved = len(e["epoch_s"]) * (e_steady - c_steady)
        cost = c["wall_s"] - e["wall_s"] + saved
        speedups.append(speedup)
        compile_s.append(cost)
        # eager step seconds T repay compiling when T * (1 - 1/speedup) >= margin * cost
        pays.append(margin * cost / (1 - 1 / speedup) if speedup > 1 else float("inf"))
    return {"speedups": speedups, "compile_s": compile_s, "pays_after_s": pays,
            "eager_epoch_s": statistics.median(s for r in eager for s in r["epoch_s"][1:]),
            "compiled_epoch_s": statistics.median(s for r in compiled for s in r["epoch_s"][1:]),
            "eager_wall_s": statistics.median(r["wall_s"] for r in eager),
            "compiled_wall_s": statistics.median(r["wall_s"] for r in compiled),
            "parameters": eager[0]["parameters"], "precision": eager[0]["precision"],
            "steps": eager[0]["steps"]}


def _range(values: list[float], fmt: str, unit: str = "") -> str:
    if len(values) == 1:
        return fmt.format(values[0]) + unit
    return (f"{fmt.format(statistics.median(values))}{unit} ({fmt.format(min(values))}–"
            f"{fmt.format(max(values))}{unit})")


def main() -> None:
    from entrena.engine.compiling import REPAY_MARGIN

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", nargs="+", choices=sorted(EXAMPLES),
                        default=["tiny", "digits", "credit"])
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=4,
                        help="train.max_epochs of every run (at least 2: the first epoch "
                             "holds the compilations)")
    parser.add_argument("--runs", type=Path, default=None,
                        help="publish the runs printed earlier (their JSON lines) instead of "
                             "running")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    if args.epochs < 2:
        parser.error(f"--epochs must be at least 2 (the first holds the compilations), "
                     f"got {args.epochs}")
    for name in args.examples:
        if name != "tiny" and not (EXAMPLES[name].parent / "data").is_dir():
            parser.error(f"examples/{name}/data is missing: run `make {name}-data` first")
    # Alternate which arm goes first, so neither always meets a colder machine.
    jobs = [(name, compiled, args.epochs) for name in args.examples
            for pair in range(args.pairs)
            for compiled in ((False, True) if pair % 2 == 0 else (True, False))]
    if args.runs is not None:
        runs = [json.loads(line) for line in args.runs.read_text().splitlines()
                if line.startswith("{")]
        load: list[float] = []
    else:
        runs, load = run_all("bench-compile-examples-", jobs, one_run)
    table = ["| example | parameters | precision | steps | eager: s per epoch | compiled: s "
             "per epoch | step speed-up | compile (s) | wall eager / compiled (s) | pays "
             "after (s of steps) |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    summary = []
    for name in args.examples:
        s = summarise(runs, name, REPAY_MARGIN)
        pays = ("never" if any(p == float("inf") for p in s["pays_after_s"])
                else _range(s["pays_after_s"], "{:,.0f}"))
        table.append(f"| {name} | {s['parameters']:,} | {s['precision']} | "
                     f"{s['steps']} | {s['eager_epoch_s']:.2f} | {s['compiled_epoch_s']:.2f} "
                     f"| {_range(s['speedups'], '{:.2f}', '×')} | "
                     f"{_range(s['compile_s'], '{:.0f}')} | {s['eager_wall_s']:.0f} / "
                     f"{s['compiled_wall_s']:.0f} | {pays} |")
        repaid = ("never repaid: no step speed-up" if pays == "never" else
                  f"repaid (with the {REPAY_MARGIN:g}x margin) from {pays} s of eager "
                  "training steps")
        summary.append(f"- {name}: compiled steps {_range(s['speedups'], '{:.2f}', '×')} the "
                       f"eager ones; compiling ~{statistics.median(s['compile_s']):.0f} s, "
                       f"{repaid}")
    command = ("python benchmarks/experiments/compile_examples.py --examples " + " ".join(args.examples)
               + f" --pairs {args.pairs} --epochs {args.epochs} --write")
    if args.runs is not None:
        runs_path = args.runs.resolve()
        args.runs = runs_path.relative_to(ROOT) if runs_path.is_relative_to(ROOT) else runs_path
    publish_runs(
        "compile-examples", "torch.compile on the small examples (`compile_examples.py`)",
        load=load, command=command, table=table, summary=summary, write=args.write, about=[
            "(`entrena train` of each example, `train.compile` false and true alternated,",
            f"{args.epochs} epochs, early stopping and tracking off, a fresh inductor cache "
            "per run;",
            "\"s per epoch\": median seconds of training steps of the epochs after the first; "
            "\"compile\": the",
            "compiled run's extra wall time plus the step time it saved, an estimate; "
            "\"pays after\": the",
            "eager step seconds from which `train.compile: auto`'s rule would compile).",
            *([f"Raw lines: `{args.runs.as_posix()}`."] if args.runs else [])])


if __name__ == "__main__":
    main()
