"""Data: encoded-cache reuse (first vs cached `entrena prepare`), rows/s of hygiene + encoding.

    .venv/bin/python benchmarks/data_speed.py [--rows 100000] [--runs 3]
    (``benchmarks/bench.py`` calls :func:`run`)

The generated data of ``benchmarks/prepare.py`` (short reviews in three classes with exact and
normalised copies, empty texts, test rows leaked from training), prepared in one process after
a warm-up prepare of 200 rows (imports, first tokenizer load). Each run uses a fresh cache
folder: a first prepare (read, check, split, tokenize, write the Arrow cache), then the same
prepare again (unchanged data: from the cache). Runs alternate first, cached, first, cached.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _stats import summary  # noqa: E402
from prepare import config, generate  # noqa: E402


def run(rows: int, runs: int, progress: Any = print) -> dict[str, Any]:
    import os

    import entrena

    with tempfile.TemporaryDirectory(prefix="bench-data-") as tmp:
        folder = Path(tmp)
        train, test = generate(folder, rows)
        (folder / "warm-up").mkdir()
        small_train, small_test = generate(folder / "warm-up", 200, seed=1)
        entrena.prepare(config(folder, small_train, small_test, folder / "cache-warm-up"),
                        run_dir=folder / "runs" / "warm-up", quiet=True)
        load_before = os.getloadavg()[0]
        figures: dict[str, list[float]] = {"first_s": [], "cached_s": [], "check_s": [],
                                           "encode_s": []}
        report: dict[str, Any] = {}
        for i in range(runs):
            cfg = config(folder, train, test, folder / f"cache-{i}")
            started = time.perf_counter()
            first = entrena.prepare(cfg, run_dir=folder / "runs" / f"a{i}", quiet=True)
            figures["first_s"].append(time.perf_counter() - started)
            started = time.perf_counter()
            second = entrena.prepare(cfg, run_dir=folder / "runs" / f"b{i}", quiet=True)
            figures["cached_s"].append(time.perf_counter() - started)
            if first.data.from_cache or not second.data.from_cache:
                raise RuntimeError(f"run {i}: expected a cold then a cached prepare, got "
                                   f"from_cache {first.data.from_cache}, "
                                   f"{second.data.from_cache}")
            report = first.report
            figures["check_s"].append(report["timings_s"]["read_and_check"])
            figures["encode_s"].append(report["timings_s"]["encode"])
            progress(f"data run {i + 1}: first {figures['first_s'][-1]:.2f}s, cached "
                     f"{figures['cached_s'][-1]:.3f}s")
        size_mb = train.stat().st_size / 1e6
    splits = report["splits"]
    rows_read = splits["train"]["rows_read"] + splits["test"]["rows_read"]
    encoded = sum(splits[role]["rows_kept"] for role in ("train", "validation", "test"))
    return {"rows": rows, "runs": runs, "size_mb": size_mb, "rows_read": rows_read,
            "rows_encoded": encoded, "figures": figures,
            "load": (load_before, os.getloadavg()[0])}


def table(result: dict[str, Any]) -> list[tuple[str, str]]:
    """The figures as ``(name, "median (min–max)")`` rows."""
    f = result["figures"]
    share = [c / a for c, a in zip(f["cached_s"], f["first_s"], strict=True)]
    return [
        ("first prepare, cold cache (s)", summary(f["first_s"])),
        ("cached prepare, unchanged data (s)", summary(f["cached_s"], "{:.3f}")),
        ("cached / first", summary([100 * s for s in share], "{:.1f}", "%")),
        ("rows/s, whole first prepare (train + test rows read)",
         summary([result["rows_read"] / s for s in f["first_s"]], "{:,.0f}")),
        ("rows/s, hygiene: reading + checks + split (rows read)",
         summary([result["rows_read"] / s for s in f["check_s"]], "{:,.0f}")),
        ("rows/s, encoding: tokenizing + writing the cache (rows kept)",
         summary([result["rows_encoded"] / s for s in f["encode_s"]], "{:,.0f}")),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    for name, value in table(run(args.rows, args.runs)):
        print(f"{name}: {value}")


if __name__ == "__main__":
    main()
