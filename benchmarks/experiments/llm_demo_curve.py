"""The LLM demo's test exact match against the number of training chats, over seeds (issue 21).

Runs ``entrena train examples/reviews-chat/config.yaml`` (no export) once per
(``--samples`` N, ``--seeds`` S), each with ``data.max_train_samples=N`` and ``train.seed=S``
(the seed draws the validation split, the training subsample and the 300 test reviews, and
orders the batches), plus the ``--set`` values given after ``--`` (a variant to compare), in
a fresh run directory, tracking off. The converted model is taken from entrena's cache
(convert once with ``make llm-demo`` or any run of the config first). Prints, and with
``--write`` puts in docs/benchmarks-journal.md (``bench:llm-demo-curve``): per run the validation
and test exact match, the zero-shot test exact match, the training steps' seconds and the
process's wall time; per N the median and range over the seeds.

Usage::

    python benchmarks/experiments/llm_demo_curve.py --samples 400 800 --seeds 1 2 3 [--write] \\
        [-- train.learning_rate=3e-4 ...]

Run it on quiet cores: the wall times are the point of the demo's 10-minute target.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _report, _stats …
from _report import ROOT, publish_runs, run_all  # noqa: E402

CONFIG = ROOT / "examples" / "reviews-chat" / "config.yaml"
ENTRENA = Path(sys.executable).with_name("entrena")


def one_run(samples: int, seed: int, extra: list[str], folder: Path) -> dict:
    """Train once; return the metrics this benchmark reports."""
    run_dir = folder / f"n{samples}-s{seed}"
    sets = [f"data.max_train_samples={samples}", f"train.seed={seed}",
            "tracking.enabled=false", *extra]
    command = [str(ENTRENA), "train", str(CONFIG), "--run-dir", str(run_dir)]
    for value in sets:
        command += ["--set", value]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"N={samples} seed={seed} failed ({done.returncode}):\n"
                           f"{done.stderr[-3000:]}")
    metrics = json.loads((run_dir / "metrics.json").read_text())
    zero = metrics.get("baseline", {}).get("zero_shot", {})
    return {"samples": samples, "seed": seed, "wall_s": wall,
            "train_s": metrics["fit"]["train_time_s"],
            "validation": metrics["validation"]["exact_match"],
            "test": metrics["test"]["exact_match"],
            "test_eos": metrics["test"]["eos_share"],
            "zero_shot_test": zero.get("test", {}).get("exact_match")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, nargs="+", default=[400, 800])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--write", action="store_true")
    parser.add_argument("extra", nargs="*", help="more --set values (after --)")
    args = parser.parse_args()
    # Seeds outermost: each N sees the machine in the same state.
    jobs = [(samples, seed, args.extra) for seed in args.seeds for samples in args.samples]
    runs, load = run_all("bench-llm-curve-", jobs, one_run)
    lines = ["| training chats | seed | validation (100) | test (300) | test EOS | zero-shot "
             "test | training steps (s) | wall (s) |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(runs, key=lambda r: (r["samples"], r["seed"])):
        lines.append(f"| {r['samples']} | {r['seed']} | {r['validation']:.3f} | "
                     f"{r['test']:.3f} | {r['test_eos']:.2f} | {r['zero_shot_test']:.3f} | "
                     f"{r['train_s']:.0f} | {r['wall_s']:.0f} |")
    summary = []
    for samples in args.samples:
        tests = [r["test"] for r in runs if r["samples"] == samples]
        walls = [r["wall_s"] for r in runs if r["samples"] == samples]
        summary.append(f"- {samples} chats: test exact match median "
                       f"**{statistics.median(tests):.3f}** ({min(tests):.3f}–{max(tests):.3f}), "
                       "wall median "
                       f"{statistics.median(walls):.0f} s")
    command = ("python benchmarks/experiments/llm_demo_curve.py --samples "
               + " ".join(map(str, args.samples)) + " --seeds " + " ".join(map(str, args.seeds))
               + (" -- " + " ".join(args.extra) if args.extra else "") + " --write")
    publish_runs(
        "llm-demo-curve", "The LLM demo's accuracy against its training chats, over seeds",
        load=load, command=command, table=lines, summary=summary, write=args.write, about=[
            "(`entrena train examples/reviews-chat/config.yaml` with `data.max_train_samples`",
            "and `train.seed` set, no export; the seed also draws the 100 validation and 300",
            "test reviews, so each seed is scored on its own 300). Wall: the `entrena train`",
            "process, the converted model in the cache."])


if __name__ == "__main__":
    main()
