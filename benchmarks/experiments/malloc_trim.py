"""Does returning the heap's free pages to the system after training steps flatten a CPU fit's
memory, and what does it cost? (glibc ``malloc_trim(0)``.)

Trains the shipped demo (``entrena train examples/reviews/config.yaml``, tracking off) once per
``--every`` N, in a fresh process each, one after the other: a registered callback
(``train.callbacks``) calls glibc's ``malloc_trim(0)`` after every N-th optimizer step (0:
never). ``malloc_trim(0)`` gives back the free memory at the top of every arena and, since
glibc 2.8, ``madvise(MADV_DONTNEED)``\\ s the whole free pages inside it (``malloc_trim(3)``);
the next use of those pages faults them in again, zero-filled by the kernel. Same seed in
every arm, so the batches, the weights and the scores are identical: only memory and time can
differ.

Prints one JSON line per run (training-step seconds, the fit's peak resident memory, the plan's
peak, the seconds spent inside ``malloc_trim``, the peak every 30 steps from step 10) and,
with ``--write``, the table into docs/benchmarks-journal.md (section ``bench:malloc-trim``). Run it
alone on the cores.

    .venv/bin/python benchmarks/experiments/malloc_trim.py --every 0 1 10 [--write]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _report, _stats …
from _report import ROOT, publish_runs, run_all  # noqa: E402

CONFIG = ROOT / "examples" / "reviews" / "config.yaml"


def worker(every: int, run_dir: str) -> None:
    """One fit with ``malloc_trim(0)`` after every ``every``-th step; prints its JSON line."""
    import ctypes

    from entrena.callbacks.registry import register_callback
    from entrena.cli import main
    from entrena.core.callback import Callback

    libc = ctypes.CDLL("libc.so.6")
    spent = {"s": 0.0, "calls": 0}

    class Trim(Callback):
        def on_step_end(self, state):  # noqa: ANN001, ANN202
            if every and state.step % every == 0:
                started = time.perf_counter()
                libc.malloc_trim(0)
                spent["s"] += time.perf_counter() - started
                spent["calls"] += 1

    register_callback("malloc_trim", Trim)
    sys.argv = ["entrena", "train", str(CONFIG), "--run-dir", run_dir,
                "--set", "tracking.enabled=false", "--set", "train.callbacks=[malloc_trim]"]
    try:
        main()
    except SystemExit as exc:
        if exc.code:
            raise
    metrics = json.loads((Path(run_dir) / "metrics.json").read_text())
    events = [json.loads(line) for line in open(Path(run_dir) / "events.jsonl")]
    peaks = [(e["step"], round(e["peak_memory_bytes"] / 2**30, 2)) for e in events
             if e["type"] == "efficiency" and e["step"] % 30 == 10]
    print(json.dumps({
        "every": every, "train_s": round(metrics["fit"]["train_time_s"], 1),
        "peak_gib": round(metrics["fit"]["peak_memory_bytes"] / 2**30, 2),
        "planned_gib": round(metrics["plan_vs_actual"]["peak_memory_bytes"]["predicted"]
                             / 2**30, 2),
        "test_accuracy": metrics["test"]["accuracy"], "trim_s": round(spent["s"], 2),
        "trims": spent["calls"], "peak_by_step": peaks}))


def one_run(every: int, folder: Path) -> dict:
    done = subprocess.run([sys.executable, __file__, "--worker", str(every),
                           str(folder / f"every{every}")],
                          capture_output=True, text=True, cwd=ROOT, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"--every {every} failed ({done.returncode}):\n"
                           f"{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--every", type=int, nargs="+", default=[0, 1, 10])
    parser.add_argument("--runs", type=Path, default=None,
                        help="publish the runs printed earlier (their JSON lines)")
    parser.add_argument("--write", action="store_true")
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(int(args.worker[0]), args.worker[1])
        return
    if args.runs is not None:
        runs = [json.loads(line) for line in args.runs.read_text().splitlines()
                if line.startswith("{")]
        load: list[float] = []
    else:
        runs, load = run_all("bench-malloc-trim-", [(e,) for e in args.every], one_run)
    lines = ["| `malloc_trim(0)` | training steps (s) | inside malloc_trim (s) | fit's peak "
             "memory | plan's peak | peak at steps 40 / 100 / 160 / 220 | test accuracy |",
             "|---|---:|---:|---:|---:|---|---:|"]
    for r in runs:
        by_step = dict(r["peak_by_step"])
        steps = " / ".join(f"{by_step[s]:.2f}" if s in by_step else "–"
                           for s in (40, 100, 160, 220))
        arm = "never" if r["every"] == 0 else ("after every step" if r["every"] == 1
                                               else f"every {r['every']} steps")
        lines.append(f"| {arm} | {r['train_s']:.0f} | {r['trim_s']:.1f} | "
                     f"{r['peak_gib']:.2f} GiB | {r['planned_gib']:.2f} GiB | {steps} | "
                     f"{r['test_accuracy']:.3f} |")
    never = next((r for r in runs if r["every"] == 0), None)
    summary = [f"- every {r['every']} step(s): training steps "
               f"{r['train_s'] / never['train_s']:.2f}× and peak "
               f"{r['peak_gib'] / never['peak_gib']:.2f}× the untrimmed run's"
               for r in runs if never is not None and r is not never]
    publish_runs(
        "malloc-trim", "Giving the heap's free pages back after training steps "
        "(`malloc_trim`)", load=load,
        command="python benchmarks/experiments/malloc_trim.py --every "
                + " ".join(str(r["every"]) for r in runs) + " --write",
        table=lines, summary=summary, write=args.write, about=[
            "(`entrena train examples/reviews/config.yaml`, the demo with its defaults,",
            "tracking off, seed 42: identical batches and scores in every arm; peaks in GiB",
            "from `events.jsonl`.)"])


if __name__ == "__main__":
    main()
