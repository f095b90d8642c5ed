"""The efficiency monitor's cost: training throughput with and without it on examples/tiny.

Alternating A/B pairs (on, off, on, off …, the order flipped every other pair) in one process,
so that drift of a shared machine hits both arms alike. "Off" replaces the monitor's per-step
and per-window work (``on_batch_end``) with nothing; its start and end (one cached peak read,
one summary) are outside the training-step time that throughput divides by.

    .venv/bin/python benchmarks/experiments/monitor_overhead.py [--pairs 5] [--threads 1] [--write]

Throughput is samples / the fit's wall time (``fit_start`` to ``fit_end`` in events.jsonl,
callbacks and evaluation included): ``fit.throughput_samples_per_s`` divides by the time in
training steps, which by construction leaves out callback time (and on a GPU is shortened
when a callback's CPU work overlaps the asynchronous optimizer step). The ratio is off / on
per pair: 1.02 would mean the monitor costs 2%. Each "on" run also reports the monitor's own
timed share of the training-step time (``efficiency.monitor_time_fraction``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _report, _stats …

from _report import ROOT, machine, today, write_section  # noqa: E402

TINY = ROOT / "examples" / "tiny" / "config.yaml"


def fit_throughput(run_dir: Path, metrics: dict) -> float:
    """Samples per second of the fit's wall time (fit_start to fit_end of events.jsonl)."""
    import json

    records = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    start = next(r["time"] for r in records if r["type"] == "fit_start")
    end = next(r["time"] for r in records if r["type"] == "fit_end")
    fit = metrics["fit"]
    samples = fit["throughput_samples_per_s"] * fit["train_time_s"]
    return samples / (end - start)


def one_run(run_dir: Path, threads: int, monitor: bool) -> tuple[float, float | None]:
    import entrena
    from entrena.callbacks.efficiency import EfficiencyMonitor

    original = EfficiencyMonitor.on_batch_end
    if not monitor:
        EfficiencyMonitor.on_batch_end = lambda self, state: None  # type: ignore[method-assign]
    try:
        result = entrena.train(TINY, run_dir=run_dir, restart=True,
                               overrides={"train.num_threads": threads,
                                          "tracking.enabled": False})
    finally:
        EfficiencyMonitor.on_batch_end = original  # type: ignore[method-assign]
    own = result.metrics.get("efficiency", {}).get("monitor_time_fraction")
    return fit_throughput(run_dir, result.metrics), (own if monitor else None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks-journal.md")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="monitor-overhead-"))
    one_run(work / "warmup", args.threads, True)  # fills the prepared-data and peak caches
    pairs = []
    owns: list[float] = []
    for i in range(args.pairs):
        order = (True, False) if i % 2 == 0 else (False, True)
        runs = {on: one_run(work / f"p{i}-{'on' if on else 'off'}", args.threads, on)
                for on in order}
        got = {on: r[0] for on, r in runs.items()}
        owns.append(runs[True][1] or 0.0)
        pairs.append((got[True], got[False]))
        print(f"pair {i + 1}: on {got[True]:.1f} samples/s, off {got[False]:.1f} samples/s, "
              f"off/on {got[False] / got[True]:.3f}", flush=True)
    ratios = [off / on for on, off in pairs]
    median = statistics.median(ratios)
    lines = [
        "## Efficiency monitor overhead (`benchmarks/experiments/monitor_overhead.py`)",
        "",
        f"`.venv/bin/python benchmarks/experiments/monitor_overhead.py --pairs {args.pairs} --threads "
        f"{args.threads} --write`, {today()}; {machine()}. `examples/tiny` (3 epochs, 75 "
        f"steps of 16), tracking off, {args.threads} torch thread(s), one process, A/B "
        f"order alternating per pair. Throughput = samples / fit wall time (`fit_start` to "
        f"`fit_end` in events.jsonl: callbacks and evaluation included).",
        "",
        "| pair | monitor on (samples/s) | off (samples/s) | off / on |",
        "|---|---|---|---|",
        *[f"| {i + 1} | {on:.1f} | {off:.1f} | {off / on:.3f} |"
          for i, (on, off) in enumerate(pairs)],
        "",
        f"Median off/on ratio **{median:.3f}** (min {min(ratios):.3f}, max "
        f"{max(ratios):.3f}): the monitor costs {100 * (median - 1):+.1f}% of throughput "
        f"by the median. The monitor's own timed hook took a median "
        f"{100 * statistics.median(owns):.2f}% (max {100 * max(owns):.2f}%) of the training-"
        f"step time of the 'on' runs (`efficiency.monitor_time_fraction`): the direct measure; "
        f"the A/B spread is the noise of a 2-core machine shared with other work.",
    ]
    print("\n".join(lines))
    if args.write:
        write_section("monitor", "\n".join(lines))


if __name__ == "__main__":
    main()
