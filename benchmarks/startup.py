"""Start-up: `entrena --help` and `python -c "import entrena"` in seconds; torch stays unimported.

    .venv/bin/python benchmarks/startup.py [--runs 5]   (benchmarks/bench.py calls :func:`run`)

Each command is a fresh process, timed from start to exit; the two take turns (help, import,
help, import …) after one untimed call of each (which loads the files into the page cache).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import ROOT  # noqa: E402
from _stats import ab_order, summary  # noqa: E402

TORCH_CHECK = ("import sys, entrena; loaded = sorted(m for m in ('torch', 'transformers', "
               "'lightning') if m in sys.modules); print(','.join(loaded))")


def commands() -> dict[str, list[str]]:
    entrena = Path(sys.executable).with_name("entrena")
    return {"entrena --help": [str(entrena), "--help"],
            "python -c 'import entrena'": [sys.executable, "-c", "import entrena"]}


def _time(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
                   cwd=ROOT)
    return time.perf_counter() - started


def heavy_modules_after_import() -> list[str]:
    """Which of torch, transformers, lightning ``import entrena`` loads (should be none)."""
    done = subprocess.run([sys.executable, "-c", TORCH_CHECK], capture_output=True, text=True,
                          check=True, cwd=ROOT)
    return [name for name in done.stdout.strip().split(",") if name]


def run(runs: int, progress: Any = print) -> dict[str, Any]:
    named = commands()
    first, second = named
    for command in named.values():
        _time(command)
    seconds: dict[str, list[float]] = {name: [] for name in named}
    for name in ab_order(runs, first, second):
        seconds[name].append(_time(named[name]))
    heavy = heavy_modules_after_import()
    progress(", ".join(f"{name}: {summary(values, unit=' s')}" for name, values in seconds.items())
             + f"; heavy modules after `import entrena`: {heavy or 'none'}")
    return {"runs": runs, "seconds": seconds, "heavy_modules": heavy,
            "torch_imported": "torch" in heavy}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    result = run(args.runs)
    if result["torch_imported"]:
        sys.exit("FAILED: `import entrena` imported torch")
    print("torch is not in sys.modules after `import entrena`")


if __name__ == "__main__":
    main()
