"""`entrena predict` on one row from the shell: its wall time and where the seconds go.

Usage::

    .venv/bin/entrena train examples/tiny/config.yaml --run-dir runs/tiny   # once
    .venv/bin/python benchmarks/predict_startup.py --run runs/tiny [--runs 5] [--write]

- **Command**: ``entrena predict RUN --input one.csv --output out.csv`` (one row of the run's
  test file), ``--runs`` fresh processes after one untimed call (which loads the files into
  the page cache), each timed from start to exit.
- **Phases**, in ``--runs`` fresh interpreters each: the interpreter itself (``python -c
  pass``), then in one process, one after the other: ``import entrena.cli`` (what the console
  script imports first), ``import torch``, the task's prediction module (transformers …),
  locating the model, loading it (the task's frame predictor: weights, tokenizer), reading
  the row, the model call, writing the answer; then ``entrena.predict`` on the same row
  again in that warm process (its own cost once everything is loaded).

``--write`` puts the table in docs/benchmarks-journal.md (section ``bench:predict-startup``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import machine, today, write_section  # noqa: E402
from budget import cpu_kind  # noqa: E402

PHASES = r'''
import json, sys, time
marks = [("start", time.perf_counter())]
def mark(name):
    marks.append((name, time.perf_counter()))
import entrena.cli
mark("import entrena.cli")
import torch
mark("import torch")
from pathlib import Path
run, row, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
from entrena.exporting.prediction import (PredictOptions, locate_model, model_meta_file,
                                         model_task_name)
from entrena.tasks.registry import model_files, recorded_task
task = recorded_task(model_task_name(run), model_meta_file(run))
import importlib
importlib.import_module(type(task).__module__.rsplit(".", 1)[0] + ".predict")
mark("import the task's prediction code")
location = locate_model(run, None, model_files=model_files, formats=task.export_formats)
mark("locate the model")
predictor = task.frame_predictor(location, PredictOptions(progress=False))
mark("load the model")
import pandas as pd
frame = pd.read_csv(row)
mark("read the row")
answer = predictor.predict(frame)
mark("model call")
pd.concat([frame, answer], axis=1).to_csv(out, index=False)
mark("write the answer")
import entrena
started = time.perf_counter()
entrena.predict(run, row, output=out, progress=False)
warm = time.perf_counter() - started
print(json.dumps({"phases": [(b[0], b[1] - a[1]) for a, b in zip(marks, marks[1:])],
                  "warm_predict_s": warm}))
'''


def _wall(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def _load() -> str:
    import os

    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


def _measure(source: Path, row: Path, out: Path, runs: int) -> list[str]:
    """The command's wall times and the phases for ``source`` (a run or bundle)."""
    entrena = str(Path(sys.executable).with_name("entrena"))
    command = [entrena, "predict", str(source), "--input", str(row), "--output", str(out)]
    _wall(command)  # page cache
    walls, bare, phases, warm = [], [], [], []
    for _ in range(runs):
        walls.append(_wall(command))
        bare.append(_wall([sys.executable, "-c", "pass"]))
        done = subprocess.run([sys.executable, "-c", PHASES, str(source), str(row), str(out)],
                              check=True, capture_output=True, text=True)
        result = json.loads(done.stdout.strip().splitlines()[-1])
        phases.append(dict(result["phases"]))
        warm.append(result["warm_predict_s"])
    table = {"interpreter (python -c pass)": bare,
             **{name: [p[name] for p in phases] for name in phases[0]},
             "entrena.predict again, warm process": warm}
    lines = ["", f"`entrena predict {source} --input one.csv --output out.csv` (one row), "
             f"{runs} fresh processes: **median {statistics.median(walls):.2f} s** "
             f"({min(walls):.2f}–{max(walls):.2f} s).", "",
             "| phase (fresh interpreter, in order) | median s | min–max s |",
             "|---|---:|---:|"]
    for name, values in table.items():
        lines.append(f"| {name} | {statistics.median(values):.3f} | "
                     f"{min(values):.3f}–{max(values):.3f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--also", type=Path, nargs="*", default=[],
                        help="export bundles of the run to time the same way (e.g. "
                        "runs/tiny/export/onnx)")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    import pandas as pd
    import yaml

    config = yaml.safe_load((args.run / "config.yaml").read_text())
    data = config["data"]
    lines = [f"Measured {today()} on {machine()} ({cpu_kind()}); `python "
             f"benchmarks/predict_startup.py {' '.join(sys.argv[1:])}`; load average before "
             f"{_load()}."]
    with tempfile.TemporaryDirectory(prefix="bench-predict-") as folder:
        row = Path(folder) / "one.csv"
        frame = pd.read_csv(data["test"] or data["train"]).head(1)
        frame.drop(columns=[data["label_column"]], errors="ignore").to_csv(row, index=False)
        for source in [args.run, *args.also]:
            lines += _measure(source, row, Path(folder) / "out.csv", args.runs)
    lines[0] += f" Load average after {_load()}."
    print("\n".join(lines))
    if not args.write:
        return
    write_section("predict-startup", "\n".join(lines))


if __name__ == "__main__":
    main()
