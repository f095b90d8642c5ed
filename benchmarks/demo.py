"""Time the demo and check its accuracy target; record both in docs/benchmarks-journal.md.

Usage:
    .venv/bin/python benchmarks/demo.py [--seeds 42 43] [--fresh-clone]

- Each seed trains from scratch (`entrena train examples/reviews/config.yaml --restart
  --set train.seed=S`) into a temporary run directory; wall time is the whole process,
  start-up included. The seed moves the validation split, the shuffling and the dropout.
- ``--fresh-clone`` first measures the issue's own criterion: `git clone` of this repository
  into a temporary folder, then `make demo` there (install from the package registries or
  pip's cache, data preparation, training), timed end to end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import ROOT, machine, today, write_section  # noqa: E402

CONFIG = ROOT / "examples" / "reviews" / "config.yaml"
TARGET_ACCURACY = 0.85  # issue "The main job …": test accuracy on the 1,000 test reviews
TARGET_WALL_S = 600.0  # ... and `make demo` from a fresh clone in under 10 minutes


def one_run(run_dir: Path, seed: int) -> tuple[float, dict]:
    entrena = Path(sys.executable).with_name("entrena")
    command = [str(entrena), "train", str(CONFIG), "--run-dir", str(run_dir), "--restart",
               "--json", "--set", f"train.seed={seed}"]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"demo run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return wall, json.loads(done.stdout)


def fresh_clone_make_demo(folder: Path) -> tuple[float, dict]:
    """`git clone` + `make demo` in ``folder``; returns (wall seconds, the run's metrics)."""
    clone = folder / "entrena"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    start = time.perf_counter()
    done = subprocess.run(["make", "demo"], cwd=clone, capture_output=True, text=True, env=env,
                          check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"make demo failed ({done.returncode}):\n{done.stderr[-3000:]}")
    metrics = json.loads((clone / "runs" / "reviews" / "metrics.json").read_text())
    return wall, metrics


def metrics_seed(metrics: dict) -> int:
    """The seed a run used (``metrics.json`` does not hold the config: read the shipped one)."""
    import yaml

    return int(yaml.safe_load(CONFIG.read_text())["train"]["seed"])


def load_average() -> str:
    try:
        return " / ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="*", default=None,
                        help="seeds to train with (default: 42, or none beside --fresh-clone)")
    parser.add_argument("--fresh-clone", action="store_true",
                        help="also time `make demo` in a fresh clone (install included)")
    args = parser.parse_args()
    if not (ROOT / "examples" / "reviews" / "data" / "train.csv").is_file():
        sys.exit("run `make demo-data` first")
    seeds = args.seeds if args.seeds is not None else ([] if args.fresh_clone else [42])
    clone_line = "not measured in this invocation (`--fresh-clone`)"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.fresh_clone:
            load_before = load_average()
            wall, metrics = fresh_clone_make_demo(Path(tmp))
            verdict = "meets" if wall < TARGET_WALL_S else "MISSES"
            clone_line = (f"{wall:.0f} s ({verdict} the {TARGET_WALL_S:.0f} s target; load "
                          f"average before: {load_before}, after: {load_average()}); its test "
                          f"accuracy {metrics['test']['accuracy']:.3f}, training steps "
                          f"{metrics['fit']['train_time_s']:.0f} s")
            print(f"fresh clone + make demo: {clone_line}")
            rows.append((metrics_seed(metrics), wall, metrics))
        for seed in seeds:
            wall, metrics = one_run(Path(tmp) / f"seed{seed}", seed)
            rows.append((seed, wall, metrics))
            print(f"seed {seed}: {wall:.0f}s, test accuracy {metrics['test']['accuracy']:.4f}")

    def med(values: list[float]) -> str:
        lo, hi = min(values), max(values)
        middle = statistics.median(values)
        return f"{middle:.3g}" if len(values) == 1 else f"{middle:.3g} ({lo:.3g}–{hi:.3g})"

    fits = [m["fit"] for _, _, m in rows]
    per_seed = "; ".join(
        f"seed {s}{' (make demo)' if i == 0 and args.fresh_clone else ''}: "
        f"{m['test']['accuracy']:.3f} (macro-F1 {m['test']['macro_f1']:.3f}, "
        f"validation {m['validation']['accuracy']:.3f}; best baseline "
        f"{m['baseline']['comparison']['best']} {m['baseline']['comparison']['best_score']:.3f})"
        for i, (s, _, m) in enumerate(rows))
    reached = sum(m["test"]["accuracy"] >= TARGET_ACCURACY for _, _, m in rows)
    body = f"""## Demo: MiniLM-L6 on the 4,000 real reviews (`make demo`)

- Date: {today()}; machine: {machine()}; load average at the end: {load_average()}
- Command: `.venv/bin/python benchmarks/demo.py{' --fresh-clone' if args.fresh_clone else ''}\
{' --seeds ' + ' '.join(map(str, seeds)) if seeds else ''}` (each seed run is
  `entrena train examples/reviews/config.yaml --restart --set train.seed=S`; the shipped config
  has seed 42)
- `make demo` from a fresh clone (clone excluded; install, data and training included):
  {clone_line}
- Test accuracy per seed (target ≥ {TARGET_ACCURACY}; {reached} of {len(rows)} seeds reach it):
  {per_seed}

| figure (median over seeds, min–max) | value |
|---|---|
| wall time (s; `make demo` for the fresh clone) | {med([w for _, w, _ in rows])} |
| time in training steps (s) | {med([f['train_time_s'] for f in fits])} |
| epochs / optimizer steps | {fits[0]['epochs']} / {fits[0]['steps']} ({fits[0]['stop_reason']}) |
| training throughput (samples/s) | {med([f['throughput_samples_per_s'] for f in fits])} |
| training throughput (real tokens/s) | {med([f['throughput_tokens_per_s'] for f in fits])} |
| padding fraction (length-grouped batches) | {med([f['padding_fraction'] for f in fits])} |
| max_length (auto) | {', '.join(str(f['max_length']) for f in fits)} |
| precision | {fits[0]['precision']} |
| test accuracy (1,000 reviews) | {med([m['test']['accuracy'] for _, _, m in rows])} |
| test macro-F1 | {med([m['test']['macro_f1'] for _, _, m in rows])} |

For scale (from the issue, same machine class): the Hugging Face Trainer with its defaults,
same model, 1 epoch, about 10 minutes of training, test accuracy 0.841; TF-IDF + logistic
regression about 0.81.
"""
    write_section("demo", body)
    print(f"wrote the demo section of {ROOT / 'docs' / 'benchmarks-journal.md'}")


if __name__ == "__main__":
    main()
