"""The bundled examples' verdicts against their baselines, with the paired bootstrap interval.

Trains each example config as it is shipped (``entrena train examples/<name>/config.yaml``,
each its own process in a fresh run directory; the data made first by ``make <name>-data``)
and reads ``metrics.json``'s ``baseline.comparison``: the metric, the model's and the best
baseline's score on the test split, the difference and its 95% paired bootstrap interval over
the test rows, the outcome (``beats`` / ``ties`` / ``loses``), and for a regressor the model's
R² interval. Every run is printed as a JSON line and appended to
``benchmarks/results/verdicts-<cpu kind>-<date>.jsonl``; ``--from FILE`` publishes such a file
again; ``--write`` puts the table in docs/benchmarks-journal.md (section ``bench:verdicts``).

Usage::

    .venv/bin/python benchmarks/verdicts.py [--examples credit concrete tate digits reviews]
        [--set KEY=VALUE ...] [--write]

About 15 minutes for the five on 2 AVX-512 BF16 EPYC cores (the reviews demo alone ~5).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import ROOT, publish_runs, read_rows, run_all, today  # noqa: E402
from budget import cpu_kind  # noqa: E402

ENTRENA = Path(sys.executable).with_name("entrena")
DATA_TARGETS = {"credit": "credit-data", "concrete": "concrete-data", "tate": "tate-data",
                "digits": "digits-data", "reviews": "demo-data", "reviews-chat": "demo-data"}


def one_run(name: str, sets: list[str], folder: Path) -> dict[str, Any]:
    if name in DATA_TARGETS:
        subprocess.run(["make", "-s", DATA_TARGETS[name]], cwd=ROOT, check=True,
                       capture_output=True)
    run_dir = folder / name
    command = [str(ENTRENA), "train", str(ROOT / "examples" / name / "config.yaml"),
               "--run-dir", str(run_dir), "--restart"]
    for item in sets:
        command += ["--set", item]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n"
                         f"{done.stderr[-2000:]}")
    metrics = json.loads((run_dir / "metrics.json").read_text())
    verdict = metrics["baseline"]["comparison"]
    findings = [f["code"] for f in metrics.get("diagnosis") or []
                if f.get("code") in ("baseline_ties", "baseline_wins", "no_better_than_mean",
                                     "trees_enough", "one_class")]
    return {"example": name, "split": verdict["split"],
            "metric": verdict["metric"], "model": verdict["model"], "best": verdict["best"],
            "best_score": verdict["best_score"], "difference": verdict.get("difference"),
            "difference_ci": verdict.get("difference_ci"), "rows": verdict.get("rows"),
            "outcome": verdict["outcome"], "model_r2_ci": verdict.get("model_r2_ci"),
            "findings": findings, "command_s": wall, "cpu_kind": cpu_kind(), "sets": sets}


def _interval(row: dict[str, Any]) -> str:
    ci = row.get("difference_ci")
    return f"{ci[0]:+.4f} to {ci[1]:+.4f}" if ci else "–"


def table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| example | test metric | model | best baseline | difference (95% interval) | "
             "rows | verdict | findings |", "|---|---|---:|---|---|---:|---|---|"]
    for r in rows:
        r2 = r.get("model_r2_ci")
        extra = f"; model R² {r2[0]:+.3f} to {r2[1]:+.3f}" if r2 else ""
        lines.append(
            f"| {r['example']} | {r['metric']} | {r['model']:.4f} | {r['best']} "
            f"{r['best_score']:.4f} | {r['difference']:+.4f} ({_interval(r)}){extra} | "
            f"{r['rows'] or '–'} | {r['outcome']} | {', '.join(r['findings']) or '–'} |"
            if r.get("difference") is not None else
            f"| {r['example']} | {r['metric']} | {r['model']:.4f} | {r['best']} "
            f"{r['best_score']:.4f} | – | – | {r['outcome']} | "
            f"{', '.join(r['findings']) or '–'} |")
    return lines


def publish(rows: list[dict[str, Any]], load: list[float], command: str, write: bool) -> None:
    kind = rows[0]["cpu_kind"] if rows else "?"
    about = ["", f"(Each example's shipped config, `entrena train examples/<name>/config.yaml`, "
             f"its own process; CPU kind {kind}. The difference is model − best baseline on "
             "the test split's rows, its interval the 2.5th–97.5th percentiles of 1,000 paired "
             "bootstrap resamples (seed 0); for a lower-is-better metric (rmse) a negative "
             "difference favours the model. `beats`/`loses` only when the interval lies "
             "wholly on one side of 0.)"]
    summary = [f"- {r['example']}: {r['outcome']} ({r['command_s']:.0f} s)" for r in rows]
    publish_runs("verdicts", "The bundled examples' verdicts, with their intervals",
                 load=load, command=command, about=about, table=table(rows), summary=summary,
                 write=write)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", nargs="+",
                        default=["credit", "concrete", "tate", "digits", "reviews"])
    parser.add_argument("--set", dest="sets", action="append", default=[])
    parser.add_argument("--from", dest="from_file", type=Path)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    command = "python benchmarks/verdicts.py " + " ".join(sys.argv[1:])
    if args.from_file:
        publish(read_rows(args.from_file), [], command, args.write)
        return
    out = ROOT / "benchmarks" / "results" / f"verdicts-{cpu_kind()}-{today()}.jsonl"
    rows, load = run_all("verdicts-", [(name, args.sets) for name in args.examples], one_run)
    with out.open("a") as handle:
        handle.writelines(json.dumps(row) + "\n" for row in rows)
    publish(rows, load, command, args.write)


if __name__ == "__main__":
    main()
