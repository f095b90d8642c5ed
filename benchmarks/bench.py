"""`make bench`: entrena side by side with the Hugging Face Trainer and a hand-written loop.

    .venv/bin/python benchmarks/bench.py             # full sizes (make bench; ~1.5 h, 2 cores)
    .venv/bin/python benchmarks/bench.py --quick     # subsample (make bench-quick; < 15 min)
    .venv/bin/python benchmarks/bench.py --smoke     # plumbing check, a few minutes; writes
                                                     # /tmp/bench-smoke.md, not the docs
    .venv/bin/python benchmarks/bench.py --quick --only step startup
    .venv/bin/python benchmarks/bench.py --threads 1   # on a shared machine: 1 torch thread
                                                     # for every competitor

Items, each writing its section of docs/benchmarks-journal.md (date, machine, command, mode); the
summary table keeps, marked, the earlier rows of items a run leaves out (``--only``):
1. ``tta``: time to the Trainer's 1-epoch test accuracy on the reviews (``tta.py``), and in
   full mode the best test accuracy within 3 epochs; ``tta-best``: the same against the
   Trainer at its best (``tta.py --trainer best``; ~35 min in full mode: with it ``make
   bench`` takes about 2 h 15 min on 2 cores, ``--only tta-best`` runs it alone);
2. ``step``: step throughput against a hand-written loop on identical batches
   (``step_throughput.py``);
3. ``plan``: the planner accuracy table (``plan_accuracy.py``; quick: its smallest setting);
4. ``data``: encoded-cache reuse and rows/s of hygiene + encoding (``data_speed.py``);
5. ``startup``: ``entrena --help`` and ``import entrena`` (``startup.py``);
6. ``gpu``: without a CUDA device, "not measured" and the command that measures it.
Needs ``make demo-data`` and the ``bench`` extra (``accelerate``); the Makefile does both.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

ITEMS = ("startup", "data", "step", "plan", "tta", "tta-best", "gpu")
SIZES: dict[str, dict[str, Any]] = {
    "full": {"tta_pairs": 3, "best": True, "step_pairs": 5, "data_rows": 1_000_000,
             "data_runs": 3, "startup_runs": 5, "plan": []},
    "quick": {"tta_pairs": 3, "best": False, "step_pairs": 5, "data_rows": 100_000,
              "data_runs": 3, "startup_runs": 5,
              "plan": ["--batch-sizes", "8", "--max-lengths", "128"]},
    "smoke": {"tta_pairs": 1, "best": False, "step_pairs": 1, "data_rows": 5_000,
              "data_runs": 1, "startup_runs": 1,
              "plan": ["--batch-sizes", "8", "--max-lengths", "64"]},
}
SMOKE_DOC = Path(tempfile.gettempdir()) / "bench-smoke.md"


def say(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


def run_plan(extra: list[str]) -> str:
    """``plan_accuracy.py`` (it writes the ``plan`` section); returns a one-line summary."""
    command = [sys.executable, str(HERE / "plan_accuracy.py"), "--threads", "1", "--force",
               *extra]
    subprocess.run(command, check=True, cwd=HERE.parent)
    rows = json.loads((Path(tempfile.gettempdir()) / "plan_accuracy.json").read_text())
    memory = sum(abs(r["memory_predicted"] / r["memory_actual"] - 1) <= 0.15 for r in rows)
    timing = sum(abs(r["time_predicted"] / r["time_actual"] - 1) <= 0.25 for r in rows)
    return f"memory within ±15%: {memory} of {len(rows)}; time within ±25%: {timing} of {len(rows)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="the subsample of make bench-quick")
    size.add_argument("--smoke", action="store_true", help="a plumbing check (figures mean "
                      f"nothing); writes {SMOKE_DOC} unless --doc is given")
    parser.add_argument("--only", nargs="+", choices=ITEMS, default=None,
                        help="run only these items (default: all; tta-best in full mode only)")
    parser.add_argument("--doc", type=Path, default=None, help="write the sections here "
                        "(default docs/benchmarks-journal.md)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads of every "
                        "competitor (default: entrena's, the physical cores); 1 keeps a shared "
                        "machine's contention from stalling both threads at every sync")
    args = parser.parse_args()
    mode = "quick" if args.quick else "smoke" if args.smoke else "full"
    default_items = [i for i in ITEMS if mode == "full" or i != "tta-best"]
    named = args.only is not None
    args.only = args.only or default_items
    doc = args.doc or (SMOKE_DOC if mode == "smoke" else None)
    if doc is not None:
        if not doc.exists():
            shutil.copyfile(HERE.parent / "docs" / "benchmarks-journal.md", doc)
        os.environ["ENTRENA_BENCH_DOC"] = str(doc.resolve())  # plan_accuracy.py's too
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if not (HERE.parent / "examples" / "reviews" / "data" / "train.csv").is_file():
        sys.exit("the reviews are missing: run `make demo-data` first")

    import _report
    import _sections as sections
    from _report import machine, today, write_section

    sizes = SIZES[mode]
    flag = {"full": "", "quick": " --quick", "smoke": " --smoke"}[mode]
    only = "" if not named else " --only " + " ".join(args.only)
    only += f" --threads {args.threads}" if args.threads else ""
    target = {"full": "make bench", "quick": "make bench-quick"}.get(mode)
    command = (f"{target}" if target and not only else
               f".venv/bin/python benchmarks/bench.py{flag}{only}")
    ctx = {"date": today(), "machine": machine(), "command": command, "mode": mode,
           "all_items": set(args.only) >= set(default_items)}
    started = time.perf_counter()
    done: dict[str, Any] = {}
    say(f"mode {mode}; items {', '.join(args.only)}; sections go to {_report.BENCHMARKS_MD}")

    if "startup" in args.only:
        import startup

        done["startup"] = startup.run(sizes["startup_runs"], progress=say)
        write_section("bench-startup", sections.startup_section(ctx, done["startup"]))
        if done["startup"]["torch_imported"]:
            say("FAILED: `import entrena` imports torch")
    if "data" in args.only:
        import data_speed

        result = data_speed.run(sizes["data_rows"], sizes["data_runs"], progress=say)
        done["data"] = data_speed.table(result)
        write_section("bench-data", sections.data_section(ctx, result, done["data"]))
    if "step" in args.only:
        import step_throughput

        done["step"] = step_throughput.run(mode, sizes["step_pairs"], threads=args.threads,
                                           progress=say)
        write_section("bench-step", sections.step_section(ctx, done["step"]))
        raw = Path(tempfile.gettempdir()) / f"bench-step-{mode}.json"
        raw.write_text(json.dumps(done["step"], default=str))
    if "plan" in args.only:
        say("planner accuracy: plan_accuracy.py " + " ".join(sizes["plan"]))
        done["plan"] = run_plan(sizes["plan"])
    if "tta" in args.only:
        import tta

        result = tta.run(mode, sizes["tta_pairs"], sizes["best"], threads=args.threads,
                         progress=say)
        done["tta"] = tta.analyse(result)
        write_section("bench-tta", sections.tta_section(ctx, result, done["tta"]))
        if result["best"]:
            write_section("bench-best", sections.best_section(ctx, result["best"]))
        raw = Path(tempfile.gettempdir()) / f"bench-tta-{mode}.json"
        raw.write_text(json.dumps(result, indent=1, default=str))
        say(f"raw time-to-accuracy runs: {raw}")
    if "tta-best" in args.only:
        import tta

        result = tta.run(mode, sizes["tta_pairs"], False, threads=args.threads,
                         progress=say, trainer="best")
        done["tta-best"] = tta.analyse(result)
        write_section("bench-tta-best", sections.tta_best_section(ctx, result,
                                                                  done["tta-best"]))
        raw = Path(tempfile.gettempdir()) / f"bench-tta-best-{mode}.json"
        raw.write_text(json.dumps(result, indent=1, default=str))
        say(f"raw runs against the Trainer at its best: {raw}")
    if "gpu" in args.only:
        import torch

        cuda = torch.cuda.is_available()
        if cuda:
            say("a CUDA device is present: run benchmarks/gpu_check.py for the GPU figures")
        write_section("bench-gpu", sections.gpu_section(ctx, cuda))
    elapsed = time.perf_counter() - started
    earlier = (sections.earlier_rows(_report.BENCHMARKS_MD.read_text())
               if _report.BENCHMARKS_MD.is_file() else {})
    write_section("bench-summary", sections.summary_section(ctx, done, elapsed, earlier))
    say(f"done in {elapsed / 60:.1f} min; sections written to {_report.BENCHMARKS_MD}")
    if done.get("startup", {}).get("torch_imported"):
        sys.exit("FAILED: `import entrena` imports torch (section 5)")
    if "startup" in done:
        say("checked: torch is not in sys.modules after `import entrena`")


if __name__ == "__main__":
    main()
