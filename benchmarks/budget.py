"""Does ``train.budget`` beat cutting the fit off at the same time with ``train.max_time``?

Trains ``--config`` (default the shipped demo, ``examples/reviews/config.yaml``) with
``entrena train``, each run its own process in a fresh run directory, tracking as the config
has it:

1. **full**: once per seed (``train.seed=S``), the config as it is but for its own
   ``train.budget``, if any (``train.budget=null``); the script times the whole
   command (``time.perf_counter`` around the process) and reads the test accuracy.
2. For each ``--fractions`` F and seed, the budget B = F × the median full wall time (whole
   seconds):

   - **budget**: ``--budget {B}s``: the schedule laid over the steps the budget buys, decaying
     to zero at the deadline, re-planned from measured step times;
   - **cut-off**: ``--set train.max_time={T}s``, T the budgeted run's own fitting time (the
     last ``fit_end`` minus the first ``fit_start`` of its ``events.jsonl``) less one of its
     validation passes (``budget.eval_s``), since the cut-off evaluates once more after its
     time is up: both fits last as long and end with one evaluation; the schedule still
     planned over the full ``max_epochs`` and cut off where the time runs out (as Lightning's
     ``max_time`` does).

   The two arms of a fraction and seed run back to back (budget, then cut-off), so machine
   noise hits both alike. A budget entrena refuses as too small (exit 2) is recorded as
   refused, its cut-off arm skipped.

Goals (the issue's): the budgeted run's test accuracy ≥ the cut-off's at every budget; at 50%
of the full wall time, within 0.01 of the full run's; the overshoot (the command's wall time,
by this script's clock, minus B) ≤ max(5% of B, 15 s).

Every run is printed as a JSON line as it finishes and appended to
``benchmarks/results/budget-<cpu kind>-<date>.jsonl`` (``budget-quick-…`` with ``--quick``);
then a table and the per-fraction summary are printed and, with ``--write``, put in
docs/benchmarks-journal.md (section ``bench:budget``; ``bench:budget-quick`` with ``--quick``).
``--from FILE`` publishes the runs of such a file again without running anything;
``--full-from FILE`` takes the full runs of the same seeds from such a file instead of running
them again (their wall times then set the budgets: the same machine, as quiet).

Usage::

    .venv/bin/python benchmarks/budget.py [--seeds 42 43] [--fractions 0.25 0.5 1.0] [--write]
    .venv/bin/python benchmarks/budget.py --quick   # examples/tiny at 15 epochs: plumbing
    .venv/bin/python benchmarks/budget.py --from benchmarks/results/budget-….jsonl --write

The demo's 2 seeds take ~9 full-run lengths (~47 min at ~5 min a run on 2 EPYC cores; ~37
min with ``--full-from``). Run it alone on the cores: the budgets are wall time, and another
process's load is charged to them.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import ROOT, publish_runs, today  # noqa: E402

CONFIG = ROOT / "examples" / "reviews" / "config.yaml"
QUICK_CONFIG = ROOT / "examples" / "tiny" / "config.yaml"
QUICK_SETS = ["train.max_epochs=15", "train.early_stopping.enabled=false"]
"""``--quick``'s overrides of the tiny config (before ``--set``'s): its own 3 epochs fit in
2-3 s on 2 quiet cores, less than entrena's smallest budget, so no budget of a fraction of it
could bind; 15 epochs without early stopping (~30 s of fitting) leave the 25% budget below
the minimum (refused) and the 50% one binding."""
ENTRENA = Path(sys.executable).with_name("entrena")
RESULTS = ROOT / "benchmarks" / "results"

ACCURACY_GAP = 0.01
"""At 50% of the full wall time the budgeted run's test accuracy is at most this much below
the full run's (median over seeds)."""
OVERSHOOT_SHARE, OVERSHOOT_FLOOR_S = 0.05, 15.0
"""A budgeted command may end at most max(5% of the budget, 15 s) after the budget."""
FULL_SPREAD = 1.25
"""Full runs of different seeds whose wall times differ more than this factor were timed on
a busy machine: the budgets, fractions of their median, are then off (a warning)."""
REFUSED_EXIT = 2
"""``entrena train``'s exit status for a config error (a budget too small among them)."""
NO_BUDGET = ["--set", "train.budget=null"]
"""Given to the full and the cut-off runs: a config's own ``train.budget`` (the demo has
one, 6m, that does not bind on a fast CPU) would make the full run a budgeted one, and is
refused beside ``train.max_time``."""


def cpu_kind() -> str:
    """The CPU's kind as the result files name it: ``amx``, ``avx512-bf16``, ``avx512``,
    ``avx2`` (from ``/proc/cpuinfo``'s flags), else the machine's architecture."""
    try:
        flags: set[str] = set()
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        flags = set()
    for flag, kind in (("amx_bf16", "amx"), ("avx512_bf16", "avx512-bf16"),
                       ("avx512f", "avx512"), ("avx2", "avx2")):
        if flag in flags:
            return kind
    import platform

    return platform.machine() or "cpu"


def fit_seconds(run_dir: Path) -> float | None:
    """The fitting time of a run: its last ``fit_end`` minus its first ``fit_start`` (the
    ``time`` of the ``events.jsonl`` records), or ``None`` without both."""
    path = run_dir / "events.jsonl"
    if not path.is_file():
        return None
    start = end = None
    for line in path.read_text().splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("type") == "fit_start" and start is None:
            start = event["time"]
        elif event.get("type") == "fit_end":
            end = event["time"]
    return end - start if start is not None and end is not None else None


def one_run(config: Path, run_dir: Path, extra: list[str], sets: list[str]) -> dict[str, Any]:
    """``entrena train CONFIG --run-dir RUN_DIR --set … EXTRA`` timed from before its process
    starts to its exit: its figures, or the refusal / failure (exit status, last error line)."""
    command = [str(ENTRENA), "train", str(config), "--run-dir", str(run_dir),
               *[arg for item in sets for arg in ("--set", item)], *extra]
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)
    wall = time.perf_counter() - started
    row: dict[str, Any] = {"args": extra, "wall_s": round(wall, 2), "rc": done.returncode,
                           "load_before": round(load_before, 2),
                           "load_after": round(os.getloadavg()[0], 2), "run_dir": str(run_dir)}
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines() if line.startswith("error")]
        message = errors[-1] if errors else done.stderr.strip()[-2000:]
        row["refused"] = done.returncode == REFUSED_EXIT and "too small" in message
        row["error"] = message
        return row
    metrics = json.loads((run_dir / "metrics.json").read_text())
    fit, budget = metrics.get("fit", {}), metrics.get("budget") or {}
    row.update({
        "test_accuracy": metrics.get("test", {}).get("accuracy"),
        "steps": fit.get("steps"), "stop_reason": fit.get("stop_reason"),
        "train_time_s": fit.get("train_time_s"), "fit_wall_time_s": fit.get("wall_time_s"),
        "fit_s": fit_seconds(run_dir)})
    if budget:
        row["budget"] = {key: budget.get(key) for key in (
            "requested_s", "used_s", "overshoot_s", "trained_epochs", "binding",
            "planned_steps", "final_planned_steps", "refits", "spent_before_fit_s",
            "step_s", "eval_s", "finish_s", "finish_estimate_s")}
    return row


def remembered_tails() -> dict[str, float]:
    """The after-the-fit times earlier budgeted runs left in the cache for the next one
    (``<cache>/budget/tail-<task>.json``): the first budgeted run of a task on a machine plans
    with a default instead."""
    try:
        from entrena.data.remote import default_cache_dir

        folder = default_cache_dir() / "budget"
    except Exception:  # a description only: never stop the benchmark for it
        return {}
    tails = {}
    for path in sorted(folder.glob("tail-*.json")):
        try:
            tails[path.stem.removeprefix("tail-")] = json.loads(path.read_text())["tail_s"]
        except (OSError, ValueError, KeyError):
            continue
    return tails


def run_all(args: argparse.Namespace, config: Path, runs_dir: Path, out: Path,
            meta: dict[str, Any]) -> tuple[list[dict[str, Any]], list[float]]:
    """Every run in order (full runs, then budget / cut-off per fraction and seed), each
    printed and appended to ``out`` as it finishes."""
    rows: list[dict[str, Any]] = []
    load = [os.getloadavg()[0]]
    out.parent.mkdir(parents=True, exist_ok=True)
    # read before ``out`` is opened: it may be the same file (the default of the same day)
    reused = ([json.loads(line) for line in args.full_from.read_text().splitlines()
               if '"arm": "full"' in line] if args.full_from else [])
    with out.open("w") as handle:
        def keep(row: dict[str, Any]) -> None:
            rows.append(row)
            load.append(os.getloadavg()[0])
            line = json.dumps(row)
            print(line, flush=True)
            handle.write(line + "\n")
            handle.flush()

        keep({"arm": "meta", **meta})
        for seed in args.seeds:
            earlier = [r for r in reused if r.get("seed") == seed and r.get("rc") == 0]
            if earlier:  # the same config and seed, run earlier: its record again
                keep({**earlier[0], "reused_from": str(args.full_from)})
                continue
            sets = [f"train.seed={seed}", *meta["sets"]]
            keep({"arm": "full", "seed": seed,
                  **one_run(config, runs_dir / f"full-{seed}", NO_BUDGET, sets)})
        walls = [r["wall_s"] for r in rows if r["arm"] == "full" and r["rc"] == 0]
        if not walls:
            sys.exit(f"every full run failed; see {out}")
        median_wall = statistics.median(walls)
        if max(walls) > FULL_SPREAD * min(walls):
            print(f"warning: the full runs took {min(walls):.0f}–{max(walls):.0f} s: a busy "
                  f"machine; the budgets ({', '.join(f'{f:g}' for f in args.fractions)} × "
                  f"{median_wall:.0f} s) are off", file=sys.stderr, flush=True)
        for fraction in args.fractions:
            budget_s = max(1, round(fraction * median_wall))
            for seed in args.seeds:
                sets = [f"train.seed={seed}", *meta["sets"]]
                tag = f"{fraction:g}-{seed}"
                common = {"fraction": fraction, "seed": seed, "budget_s": budget_s}
                budgeted = {"arm": "budget", **common,
                            **one_run(config, runs_dir / f"budget-{tag}",
                                      ["--budget", f"{budget_s}s"], sets)}
                budgeted["overshoot_clock_s"] = round(budgeted["wall_s"] - budget_s, 2)
                keep(budgeted)
                fit_s = budgeted.get("fit_s")
                # The cut-off's fit ends with one more validation pass after max_time (as
                # max_steps does): its max_time is the budgeted fit less one such pass, so that
                # both fits last as long and end with one evaluation.
                eval_s = (budgeted.get("budget") or {}).get("eval_s") or 0.0
                if fit_s is not None:
                    fit_s = max(1.0, fit_s - eval_s)
                if fit_s is None:
                    keep({"arm": "cutoff", **common, "skipped": "the budgeted run did not fit "
                          "(" + ("refused" if budgeted.get("refused") else "failed") + ")"})
                    continue
                keep({"arm": "cutoff", **common, "max_time_s": round(fit_s, 3),
                      **one_run(config, runs_dir / f"cutoff-{tag}",
                                [*NO_BUDGET, "--set", f"train.max_time={fit_s:.3f}s"],
                                sets)})
    return rows, load


def _num(value: Any, fmt: str) -> str:
    return "–" if value is None else fmt.format(value)


def allowed_overshoot_s(budget_s: float) -> float:
    return max(OVERSHOOT_SHARE * budget_s, OVERSHOOT_FLOOR_S)


def table(rows: list[dict[str, Any]]) -> list[str]:
    """The markdown table of every run."""
    lines = ["| fraction | seed | arm | test accuracy | steps | stop | fit (s) | wall (s) | "
             "overshoot (s) |", "|---:|---:|---|---:|---:|---|---:|---:|---:|"]
    for r in rows:
        if r["arm"] == "meta":
            continue
        fraction = "1 (full)" if r["arm"] == "full" else f"{r['fraction']:g}"
        arm = {"full": "full", "budget": f"`--budget {r.get('budget_s')}s`",
               "cutoff": "`max_time" + _num(r.get("max_time_s"), "={:.0f}s") + "`"}[r["arm"]]
        if r["arm"] == "budget" and r.get("budget", {}).get("binding") is False:
            arm += " (not binding)"
        if r.get("skipped") or r.get("rc"):
            why = (r.get("skipped") or ("refused: " if r.get("refused") else
                                         f"failed (exit {r['rc']}): ") + r.get("error", ""))
            wall = _num(r.get("wall_s"), "{:.0f}")
            lines.append(f"| {fraction} | {r['seed']} | {arm} | {why.replace('|', '/')} | – | "
                         f"– | – | {wall} | – |")
            continue
        over = "–"
        if r["arm"] == "budget":
            over = f"{r['overshoot_clock_s']:+.1f}"
            if r.get("budget", {}).get("overshoot_s") is not None:
                over += f" (entrena: {r['budget']['overshoot_s']:.1f})"
        lines.append(f"| {fraction} | {r['seed']} | {arm} | {_num(r['test_accuracy'], '{:.3f}')}"
                     f" | {_num(r['steps'], '{}')} | {r['stop_reason']} | "
                     f"{_num(r.get('fit_s'), '{:.0f}')} | {r['wall_s']:.0f} | {over} |")
    return lines


def summary(rows: list[dict[str, Any]], fractions: list[float]) -> tuple[list[str], dict]:
    """Per fraction: budgeted minus cut-off test accuracy, against the full runs; the goals."""
    ok = [r for r in rows if r["arm"] != "meta" and not r.get("rc") and not r.get("skipped")]
    full = [r["test_accuracy"] for r in ok if r["arm"] == "full"]
    full_median = statistics.median(full) if full else None
    goals: dict[str, bool | None] = {"budget_beats_cutoff": None, "half_within": None,
                                     "overshoot": None}
    lines = []
    walls = [r["wall_s"] for r in ok if r["arm"] == "full"]
    lines.append("- full runs: test accuracy median " + _num(full_median, "**{:.3f}**")
                 + ", wall time median " + _num(statistics.median(walls) if walls else None,
                                                "{:.0f} s"))
    if walls and max(walls) > FULL_SPREAD * min(walls):
        lines.append(f"- WARNING: the full runs' wall times differ more than "
                     f"{FULL_SPREAD:g}× ({min(walls):.0f}–{max(walls):.0f} s): the machine was "
                     f"not quiet, and every budget is a fraction of their median")
    for fraction in fractions:
        at = [r for r in rows if r.get("fraction") == fraction]
        budget_s = next((r["budget_s"] for r in at), None)
        pairs = []
        for seed in sorted({r["seed"] for r in at}):
            b = next((r for r in ok if r in at and r["arm"] == "budget" and r["seed"] == seed),
                     None)
            c = next((r for r in ok if r in at and r["arm"] == "cutoff" and r["seed"] == seed),
                     None)
            if b and c and b["test_accuracy"] is not None and c["test_accuracy"] is not None:
                pairs.append((seed, b["test_accuracy"], c["test_accuracy"]))
        refused = [r["seed"] for r in at if r["arm"] == "budget" and r.get("refused")]
        failed = [r["seed"] for r in at if r.get("rc") and not r.get("refused")]
        over = [(r["seed"], r["overshoot_clock_s"]) for r in at
                if r["arm"] == "budget" and not r.get("rc")]
        text = (f"- {fraction:.0%} of the full wall time ("
                + (f"budget {budget_s} s): " if budget_s is not None else "not run): "))
        if pairs:
            diffs = [b - c for _, b, c in pairs]
            median_b = statistics.median(b for _, b, _ in pairs)
            beats = statistics.median(diffs) >= 0
            goals["budget_beats_cutoff"] = goals["budget_beats_cutoff"] is not False and beats
            text += ("budgeted − cut-off test accuracy "
                     + ", ".join(f"{d:+.3f} (seed {s})" for d, (s, _, _) in zip(diffs, pairs,
                                                                              strict=True))
                     + f", median **{statistics.median(diffs):+.3f}** "
                     + ("(budgeted ≥ cut-off: met" if beats else "(budgeted ≥ cut-off: MISSED")
                     + f"; {sum(d < 0 for d in diffs)} of {len(diffs)} pairs below); budgeted "
                     f"median {median_b:.3f}")
            if full_median is not None:
                text += f" against the full runs' {full_median:.3f} ({median_b - full_median:+.3f})"
                if abs(fraction - 0.5) < 1e-9:
                    within = median_b >= full_median - ACCURACY_GAP
                    goals["half_within"] = within
                    text += (f": within {ACCURACY_GAP} of the full run: "
                             + ("met" if within else "MISSED"))
        else:
            if failed:  # a refusal is a budget below the minimum: nothing to compare
                goals["budget_beats_cutoff"] = False
            text += "no pair of budgeted and cut-off runs to compare"
        if over and budget_s is not None:
            allowed = allowed_overshoot_s(budget_s)
            within = all(o <= allowed for _, o in over)
            goals["overshoot"] = goals["overshoot"] is not False and within
            text += ("; overshoot by this script's clock "
                     + ", ".join(f"{o:+.1f} s" for _, o in over)
                     + f" (allowed {allowed:.0f} s: " + ("met" if within else "MISSED") + ")")
        loose = [r["seed"] for r in at if r["arm"] == "budget"
                 and r.get("budget", {}).get("binding") is False]
        if loose:
            text += (f"; the budget was NOT BINDING for seed(s) {', '.join(map(str, loose))} "
                     f"(the config's whole run fit inside it: that pair compares nothing)")
        if refused:
            text += (f"; budget refused as too small for seed(s) "
                     f"{', '.join(map(str, refused))}")
        if failed:
            text += f"; runs FAILED for seed(s) {', '.join(map(str, sorted(set(failed))))}"
        lines.append(text)
    gaps = [r["wall_s"] - r["budget"]["used_s"] for r in ok
            if r["arm"] == "budget" and r.get("budget", {}).get("used_s") is not None]
    if gaps:
        lines.append(f"- the command's wall time minus entrena's own `budget.used_s`: "
                     f"{min(gaps):.1f}–{max(gaps):.1f} s (what entrena's clock does not see: "
                     f"the interpreter before it, and what follows its reading)")
    verdict = {True: "met", False: "MISSED", None: "not measured"}
    loose = sum(1 for r in ok if r["arm"] == "budget"
                and r.get("budget", {}).get("binding") is False)
    lines.append(f"- goals: budgeted ≥ cut-off at every budget: "
                 f"**{verdict[goals['budget_beats_cutoff']]}**; at 50% within "
                 f"{ACCURACY_GAP} of the full run: **{verdict[goals['half_within']]}**; "
                 f"overshoot ≤ max({OVERSHOOT_SHARE:.0%} of the budget, "
                 f"{OVERSHOOT_FLOOR_S:.0f} s): **{verdict[goals['overshoot']]}**"
                 + (f" (but {loose} budgeted run(s) were not binding: a verdict resting on "
                    f"them is empty)" if loose else ""))
    return lines, goals


def publish(rows: list[dict[str, Any]], load: list[float], write: bool,
            section: str | None = None) -> dict:
    rows = [r for r in rows if r.get("arm") in ("meta", "full", "budget", "cutoff")]
    meta = next((r for r in rows if r["arm"] == "meta"), {})
    quick = meta.get("quick", False)
    fractions = meta.get("fractions") or sorted({r["fraction"] for r in rows
                                                 if "fraction" in r})
    lines, goals = summary(rows, fractions)
    tails = meta.get("remembered_tails") or {}
    config = meta.get("config", "?")
    sets = meta.get("sets") or []
    fits = {(r["fraction"], r["seed"]): r.get("fit_s") for r in rows if r["arm"] == "budget"}
    less_eval = any(r.get("max_time_s") is not None
                    and fits.get((r["fraction"], r["seed"])) is not None
                    and r["max_time_s"] < fits[(r["fraction"], r["seed"])] - 0.01
                    for r in rows if r["arm"] == "cutoff")
    about = [
        f"(`entrena train {config}`"
        + ("".join(f" `--set {s}`" for s in sets) + " on every run" if sets else "")
        + "; each run its own process in a fresh run directory, tracking as the config has "
        "it. Full runs at `train.seed=S`; then per fraction F of their median wall time the "
        "budget B = F × that median, whole seconds: `--budget {B}s` (the schedule laid over "
        "the steps the budget buys, decaying to zero at the deadline), then the cut-off "
        "`--set train.max_time={T}s` with T the budgeted run's own fitting time (first "
        "`fit_start` to last `fit_end` of its events.jsonl)"
        + (" less one of its validation passes (the cut-off evaluates once more when its time "
           "is up" if less_eval else " (the cut-off evaluates once more when its time is up, "
           "so its fit lasts a validation pass longer")
        + "; the schedule planned over the full `max_epochs`), back to back for each seed; "
        "the full and cut-off runs with `train.budget=null`. Wall: the whole command, by the "
        "script's clock; overshoot: wall − B (in brackets entrena's own `budget.overshoot_s`)."
        f" CPU kind {meta.get('cpu_kind', '?')}; the after-the-fit time remembered from "
        "earlier budgeted runs when this started: "
        + (", ".join(f"{k} {v:.1f} s" for k, v in tails.items()) if tails else
           "none (the first budgeted run planned with the default)") + ".)"]
    if quick:
        about.insert(0, "**QUICK (`--quick`, examples/tiny): a plumbing check of the "
                        "benchmark; its figures mean nothing.**")
    publish_runs(section or ("budget-quick" if quick else "budget"),
                 "Training to a wall-time budget against cutting the fit off"
                 + (" (quick: plumbing check)" if quick else ""),
                 load=load, command=meta.get("command", "?"), about=about,
                 table=table(rows), summary=lines, write=write)
    return goals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, default=None,
                        help="the config to train (default examples/reviews/config.yaml)")
    parser.add_argument("--quick", action="store_true",
                        help="examples/tiny/config.yaml at 15 epochs (under a minute a run): "
                             "a plumbing check")
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43])
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.25, 0.5, 1.0])
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="passed to every run (repeatable)")
    parser.add_argument("--section", default=None,
                        help="the docs/benchmarks-journal.md section to write (default budget, or "
                             "budget-quick with --quick)")
    parser.add_argument("--full-from", type=Path, default=None,
                        help="reuse the full runs (same seeds) recorded in this results file")
    parser.add_argument("--runs-dir", type=Path, default=None,
                        help="where the run directories go (default: a new temporary folder "
                             "under runs/bench-budget, kept)")
    parser.add_argument("--out", type=Path, default=None,
                        help="the JSON-lines file (default benchmarks/results/"
                             "budget[-quick]-<cpu kind>-<date>.jsonl)")
    parser.add_argument("--from", dest="from_file", type=Path, default=None,
                        help="publish the runs of this JSON-lines file instead of running")
    parser.add_argument("--write", action="store_true",
                        help="put the section in docs/benchmarks-journal.md")
    args = parser.parse_args()
    if args.from_file is not None:
        rows = [json.loads(line) for line in args.from_file.read_text().splitlines()
                if line.startswith("{")]
        load = [v for r in rows if r["arm"] != "meta"
                for v in (r.get("load_before"), r.get("load_after")) if v is not None]
        publish(rows, load, args.write, args.section)
        return
    if any(f <= 0 for f in args.fractions):
        parser.error(f"--fractions must be positive, got {args.fractions}")
    if args.config is not None and args.quick:
        parser.error("--quick trains examples/tiny/config.yaml: give --config or --quick")
    config = (args.config or (QUICK_CONFIG if args.quick else CONFIG)).resolve()
    if not config.is_file():
        parser.error(f"no config at {config}")
    kind = cpu_kind()
    out = (args.out or RESULTS / f"budget{'-quick' if args.quick else ''}-{kind}-{today()}"
           ".jsonl").resolve()
    if args.runs_dir is None:
        parent = ROOT / "runs" / "bench-budget"
        parent.mkdir(parents=True, exist_ok=True)
        runs_dir = Path(tempfile.mkdtemp(prefix=dt.datetime.now().strftime("%Y%m%d-%H%M%S-"),
                                         dir=parent))
    else:
        runs_dir = args.runs_dir.resolve()
        runs_dir.mkdir(parents=True, exist_ok=True)
    cores = os.cpu_count() or 1
    if os.getloadavg()[0] > cores / 2:
        print(f"warning: 1-minute load average {os.getloadavg()[0]:.1f} on {cores} cores: "
              f"other work is running, and a budget is wall time", file=sys.stderr)
    try:
        shown = config.relative_to(ROOT)
    except ValueError:
        shown = config
    meta = {"date": today(), "cpu_kind": kind, "config": str(shown), "quick": args.quick,
            "seeds": args.seeds, "fractions": args.fractions,
            "sets": [*(QUICK_SETS if args.quick else []), *args.set],
            "runs_dir": str(runs_dir), "remembered_tails": remembered_tails(),
            "command": "python benchmarks/budget.py " + shlex.join(sys.argv[1:])}
    print(f"runs in {runs_dir}; results to {out}", flush=True)
    started = time.perf_counter()
    rows, load = run_all(args, config, runs_dir, out, meta)
    elapsed = time.perf_counter() - started
    goals = publish(rows, load, args.write, args.section)
    with out.open("a") as handle:
        handle.write(json.dumps({"arm": "summary", "elapsed_s": round(elapsed, 1),
                                 "goals": goals}) + "\n")
    print(f"\n{len(rows) - 1} runs in {elapsed / 60:.1f} min; results: {out}; "
          f"run directories: {runs_dir}")


if __name__ == "__main__":
    main()
