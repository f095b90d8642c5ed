"""A request answered by the model loaded once against today's-before per-request reload.

The MLflow ``pyfunc`` model used to run ``entrena predict`` per request: write the rows to a
temporary CSV, load the model, tokenizer and config from disk, predict, write Parquet, read it
back (the "reload" path, reproduced here as it was). It now loads the model once
(``entrena.api.predicting.load_predictor``) and answers each DataFrame in memory ("loaded").
Both answer 1-, 32- and 512-row requests of the run's own test texts in turn, in one process,
``--repeats`` times each (alternating, so a busy spell hits both); the table gives the median
latency of each and their ratio pair by pair, and checks the two answer alike.

Usage::

    .venv/bin/python benchmarks/serving.py --run runs/reviews [--repeats 7] [--write]

``--run``: a finished run directory (the demo's MiniLM run: ``make demo``). Prints a JSON line
per size; ``--write`` puts the table in docs/benchmarks.md (section ``bench:serving``).
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import machine, today, write_section  # noqa: E402
from budget import cpu_kind  # noqa: E402

SIZES = (1, 32, 512)


def reload_predict(run: Path, frame: pd.DataFrame) -> pd.DataFrame:
    """The per-request path the pyfunc model had before: a temporary CSV through
    ``entrena predict`` (model loaded from disk), Parquet read back."""
    import entrena

    with tempfile.TemporaryDirectory(prefix="bench-serving-") as folder:
        data, output = Path(folder) / "input.csv", Path(folder) / "output.parquet"
        frame.reset_index(drop=True).to_csv(data, index=False, quoting=csv.QUOTE_ALL)
        result = entrena.predict(run, data, output=output, progress=False)
        return pd.read_parquet(output, columns=result.summary["columns_added"])


def rows_of(run: Path, n: int) -> pd.DataFrame:
    """``n`` input rows (the run's test file, repeated when shorter), input columns only."""
    import yaml

    config = yaml.safe_load((run / "config.yaml").read_text())
    data = config["data"]
    frame = pd.read_csv(data["test"] or data["train"])
    frame = frame.drop(columns=[data["label_column"]], errors="ignore")
    return pd.concat([frame] * (n // len(frame) + 1), ignore_index=True).head(n)


def measure(run: Path, repeats: int) -> list[dict[str, Any]]:
    from entrena.api.predicting import load_predictor

    started = time.perf_counter()
    predictor = load_predictor(run)
    load_s = time.perf_counter() - started
    out = []
    for size in SIZES:
        frame = rows_of(run, size)
        loaded, reload = [], []
        a = predictor.predict(frame)
        b = reload_predict(run, frame)  # warm both once
        same = bool((a["predicted_label"].to_numpy() == b["predicted_label"].to_numpy()).all())
        for _ in range(repeats):
            t = time.perf_counter()
            predictor.predict(frame)
            loaded.append(time.perf_counter() - t)
            t = time.perf_counter()
            reload_predict(run, frame)
            reload.append(time.perf_counter() - t)
        ratios = [r / max(x, 1e-9) for r, x in zip(reload, loaded, strict=True)]
        row = {"rows": size, "loaded_ms": 1000 * statistics.median(loaded),
               "reload_ms": 1000 * statistics.median(reload),
               "ratio_median": statistics.median(ratios),
               "ratio_range": [min(ratios), max(ratios)], "same_labels": same,
               "repeats": repeats, "load_s": load_s, "cpu": cpu_kind()}
        print(json.dumps(row), flush=True)
        out.append(row)
    return out


def publish(rows: list[dict[str, Any]], run: Path, command: str) -> None:
    lines = [f"Measured {today()} on {machine()} ({rows[0]['cpu']}); `{command}`; the model "
             f"of `{run}` loaded once in {rows[0]['load_s']:.1f} s.", "",
             "| rows per request | loaded once (median ms) | reload per request (median ms) "
             "| reload / loaded, pair by pair (median, range) | same labels |",
             "|---:|---:|---:|---:|:---:|"]
    for r in rows:
        lo, hi = r["ratio_range"]
        lines.append(f"| {r['rows']} | {r['loaded_ms']:.1f} | {r['reload_ms']:.1f} | "
                     f"{r['ratio_median']:.1f}x ({lo:.1f}–{hi:.1f}) | "
                     f"{'yes' if r['same_labels'] else 'NO'} |")
    write_section("serving", "\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    np.random.seed(0)
    rows = measure(args.run, args.repeats)
    if args.write:
        publish(rows, args.run, "python benchmarks/serving.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
