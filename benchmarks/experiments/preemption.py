"""Time from SIGTERM to a saved checkpoint on the demo model (MiniLM-L6 on the real reviews),
and record it in docs/benchmarks-journal.md.

Usage: .venv/bin/python benchmarks/experiments/preemption.py [--signals 3] [--no-write]
                                                 [--config examples/reviews/config.yaml]

One run of CONFIG (MLflow off, a step record per step), sent SIGTERM ``--signals`` times at
random steps of its first epoch and restarted after each; each time the figures are the
process's own "saved checkpoint at step N (SIGTERM), X s after the signal", the time to its
exit measured from outside, and the checkpoint's size. The last restart is stopped too
(nothing is trained to the end).
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _report, _stats …
import chaos  # noqa: E402
from _report import ROOT, machine, today, write_section  # noqa: E402
from chaos import SAVED, Process  # noqa: E402

SETTINGS = ["tracking.enabled=false", "train.log_every_steps=1"]


def session_times(run_dir: Path, since: float) -> tuple[float, float]:
    """(seconds to write the SIGTERM checkpoint, median seconds between steps) of one session."""
    records = []
    for line in (run_dir / "events.jsonl").read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record["time"] >= since:
            records.append(record)
    write_s = next(r["write_s"] for r in records
                   if r["type"] == "checkpoint" and r["reason"] == "SIGTERM")
    times = [r["time"] for r in records if r["type"] == "step"]
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    return write_s, statistics.median(gaps) if gaps else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--signals", type=int, default=3)
    parser.add_argument("--config", type=Path,
                        default=ROOT / "examples" / "reviews" / "config.yaml")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    chaos.CONFIG, chaos.SETTINGS = args.config.resolve(), SETTINGS
    rng = random.Random(args.seed)
    rows = []
    with tempfile.TemporaryDirectory(prefix="entrena-preempt-") as tmp:
        run_dir = Path(tmp) / "runs" / "run"
        run_dir.parent.mkdir(parents=True)
        for index in range(args.signals):
            process = Process(run_dir, Path(tmp) / f"attempt-{index}.log")
            if process.wait_for_fit() is None:
                sys.exit(f"the run ended before training:\n{process.finish()[1][-3000:]}")
            first = None
            while first is None or process.last_step() < first:
                if first is None and process.last_step() >= 0:
                    first = process.last_step() + rng.randint(1, 5)
                time.sleep(0.01)
            sent = time.monotonic()
            process.popen.send_signal(signal.SIGTERM)
            code, stderr = process.finish()
            exit_s = time.monotonic() - sent
            saved = SAVED.search(stderr)
            if code != 143 or not saved:
                sys.exit(f"SIGTERM gave exit {code}:\n{stderr[-3000:]}")
            step = int(saved.group(1))
            size = (run_dir / "checkpoints" / f"step-{step:06d}.pt").stat().st_size
            write_s, step_s = session_times(run_dir, process.launched)
            rows.append({"step": step, "saved_s": float(saved.group(3)), "exit_s": exit_s,
                         "bytes": size, "write_s": write_s, "step_s": step_s})
            print(f"SIGTERM {index + 1}: saved step {step} in {saved.group(3)}s (write "
                  f"{write_s:.2f}s, median step {step_s:.2f}s), exit after {exit_s:.2f}s, "
                  f"checkpoint {size / 2**20:.0f} MiB", file=sys.stderr)

    def stat(values: list[float]) -> str:
        middle = statistics.median(values)
        return f"{middle:.2f}" if len(values) == 1 else \
            f"{middle:.2f} (median; {min(values):.2f}–{max(values):.2f})"

    config = args.config.resolve().relative_to(ROOT) if args.config.resolve().is_relative_to(
        ROOT) else args.config
    figures = [
        ("SIGTERM to checkpoint on disk (s, as the process reports it)", "saved_s", 1),
        ("SIGTERM to process exit (s, measured outside)", "exit_s", 1),
        ("of which: writing the checkpoint (s: serialise, SHA-256, fsync, rename, marker)",
         "write_s", 1),
        ("time between optimizer steps in those sessions (s, median of each session)",
         "step_s", 1),
        ("checkpoint size (MiB: weights, AdamW moments, best weights unless current)",
         "bytes", 2**20),
    ]
    table = "\n".join(f"| {label} | {stat([r[key] / scale for r in rows])} |"
                      for label, key, scale in figures)
    body = f"""## Preemption: SIGTERM to saved checkpoint, `entrena train {config}`

- Date: {today()}; machine: {machine()}
- Command: `.venv/bin/python benchmarks/experiments/preemption.py --signals {args.signals}
  --seed {args.seed}` (`--set {' --set '.join(SETTINGS)}`; SIGTERM at a random step of the
  first epoch, restart, again)

| figure | value |
|---|---|
{table}

The time to saved is the rest of the current optimizer step (the signal waits for it) plus
one checkpoint write; on a CPU the step dominates. The machine was shared with other jobs
while this ran: see the step times.
"""
    if not args.no_write:
        write_section("preemption", body)
        print(f"wrote the preemption section of {ROOT / 'docs' / 'benchmarks-journal.md'}",
              file=sys.stderr)
    print(body)


if __name__ == "__main__":
    main()
