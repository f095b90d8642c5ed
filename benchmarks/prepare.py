"""Time `entrena prepare` on a generated CSV of short texts and record it in
docs/benchmarks-journal.md.

Usage: .venv/bin/python benchmarks/prepare.py [--rows 1000000] [--no-write]

Generates (seeded) a training CSV of ``--rows`` short reviews in three classes, with 1% exact
copies, 0.5% copies that differ only in case and punctuation, 0.1% empty texts, and a 20,000-row
test CSV of which 200 rows also sit in the training file. Then, in one process with the
default MiniLM tokenizer and a fresh cache folder:

1. ``entrena.prepare(config)``: read, check, split, encode, cache (cold);
2. ``entrena.prepare(config)`` again: unchanged data, from the cache (warm).

Start-up (imports, loading the tokenizer once) is excluded by a warm-up prepare of a tiny
file first. Peak memory is the process's peak resident set size (``ru_maxrss``), imports
included.
"""

from __future__ import annotations

import argparse
import csv
import os
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import machine, today, write_section  # noqa: E402

WORDS = ("the coffee tea box bag order taste price kids snack flavour arrived today would buy "
         "again really quite very bit too sweet salty fresh stale soft crunchy small large "
         "pack delivery gift family morning dog cat treat chocolate cookies").split()
CUES = {"great": "great excellent love perfect delicious amazing".split(),
        "ok": "fine okay decent average alright acceptable".split(),
        "bad": "awful terrible broken worst bland disappointing".split()}


def review(rng: random.Random, label: str) -> str:
    words = rng.choices(WORDS, k=rng.randint(4, 18)) + rng.sample(CUES[label], 2)
    rng.shuffle(words)
    return " ".join(words)


def generate(folder: Path, rows: int, seed: int = 0) -> tuple[Path, Path]:
    """Write ``train.csv`` (``rows`` rows) and ``test.csv`` (20,000 rows); returns both."""
    rng = random.Random(seed)
    labels = list(CUES)
    weights = [0.5, 0.3, 0.2]
    train, test = folder / "train.csv", folder / "test.csv"
    kept: list[tuple[str, str]] = []
    with train.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        for i in range(rows):
            roll = rng.random()
            if kept and roll < 0.01:
                text, label = rng.choice(kept)                       # exact copy
            elif kept and roll < 0.015:
                text, label = rng.choice(kept)
                text = text.capitalize() + "!"                       # normalised copy
            elif roll < 0.016:
                text, label = "", rng.choices(labels, weights)[0]    # empty text
            else:
                label = rng.choices(labels, weights)[0]
                text = review(rng, label)
            if i % 100 == 0 and text:
                kept.append((text, label))
            writer.writerow([text, label])
    with test.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        for i in range(20_000):
            if i < 200:
                writer.writerow(kept[i * 7 % len(kept)])             # leaked from train
            else:
                label = rng.choices(labels, weights)[0]
                writer.writerow([review(rng, label), label])
    return train, test


def config(folder: Path, train: Path, test: Path, cache: Path) -> dict:
    return {"name": "prepare-bench",
            "data": {"train": str(train), "test": str(test), "cache_dir": str(cache)},
            "model": {"name": "minilm-l6", "max_length": "auto"},
            "tracking": {"enabled": False}}


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--no-write", action="store_true", help="print, do not update the docs")
    args = parser.parse_args()

    import entrena

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        started = time.perf_counter()
        train, test = generate(folder, args.rows)
        print(f"generated {args.rows:,} rows ({train.stat().st_size / 1e6:.1f} MB) in "
              f"{time.perf_counter() - started:.0f}s", flush=True)
        (folder / "warm-up").mkdir()
        small_train, small_test = generate(folder / "warm-up", 200, seed=1)
        entrena.prepare(config(folder, small_train, small_test, folder / "cache-warm-up"),
                        run_dir=folder / "runs" / "warm-up", quiet=True)
        rss_before = peak_rss_bytes()
        load_before = os.getloadavg()[0]

        cfg = config(folder, train, test, folder / "cache")
        started = time.perf_counter()
        first = entrena.prepare(cfg, run_dir=folder / "runs" / "a", quiet=True)
        first_s = time.perf_counter() - started
        peak = peak_rss_bytes()
        print(f"first prepare: {first_s:.1f}s, peak RSS {peak / 2**30:.2f} GiB", flush=True)
        started = time.perf_counter()
        second = entrena.prepare(cfg, run_dir=folder / "runs" / "b", quiet=True)
        second_s = time.perf_counter() - started
        print(f"second prepare: {second_s:.2f}s ({second_s / first_s:.1%} of the first), "
              f"from cache: {second.data.from_cache}", flush=True)
        assert not first.data.from_cache and second.data.from_cache
        report = first.report
        load_after = os.getloadavg()[0]
        size_mb = train.stat().st_size / 1e6
        cache_mb = sum(p.stat().st_size for p in Path(report["cache"]).iterdir()) / 1e6

    train_split, test_split = report["splits"]["train"], report["splits"]["test"]
    removed = train_split["rows_removed"]
    timings = report["timings_s"]
    rows_total = train_split["rows_read"] + test_split["rows_read"]
    near = train_split["normalised_duplicates"] - train_split["exact_duplicates"]
    rows = [
        ("first prepare, cold cache (s)", f"{first_s:.1f}"),
        ("of which reading + checks + split (s)", f"{timings['read_and_check']:.1f}"),
        ("of which tokenizing + writing the Arrow cache (s)", f"{timings['encode']:.1f}"),
        ("rows per second, first prepare (train + test rows read)",
         f"{rows_total / first_s:,.0f}"),
        ("second prepare, unchanged data (s)", f"{second_s:.2f}"),
        ("second / first", f"{second_s / first_s:.1%} (target ≤ 5%)"),
        ("peak resident memory of the process (GiB, imports included)",
         f"{peak / 2**30:.2f} (target < 4); {rss_before / 2**30:.2f} before the first prepare"),
        ("cache entry on disk (MB)", f"{cache_mb:.0f}"),
        ("training rows kept", f"{train_split['rows_kept']:,}"),
        ("training rows removed: empty text / exact copies / leaked / held out for validation",
         f"{removed['empty_text']:,} / {removed['exact_duplicates']:,} / "
         f"{removed['leakage']:,} / {removed.get('held_out_for_validation', 0):,}"),
        ("normalised (not exact) copies found, warned and kept", f"{near:,}"),
        ("test rows with a copy in training", f"{test_split['leaked_rows']:,}"),
    ]
    table = "\n".join(f"| {name} | {value} |" for name, value in rows)
    body = f"""## Prepare: {args.rows:,} generated short texts (`entrena prepare`)

- Date: {today()}; machine: {machine()}
- Command: `.venv/bin/python benchmarks/prepare.py --rows {args.rows}` (in one process, after
  a warm-up prepare of 200 rows that pays for imports and the first tokenizer load; MiniLM-L6
  tokenizer, `max_length: auto`, a fresh cache folder)
- Load average (1 min) before / after: {load_before:.1f} / {load_after:.1f} on
  {os.cpu_count()} cores (other work on the machine slows every figure but the memory)
- Data: `train.csv` {size_mb:.0f} MB, {train_split['rows_read']:,} rows (1% exact copies,
  0.5% case/punctuation copies, 0.1% empty texts, 3 classes); `test.csv` 20,000 rows, 200 of
  them copied from training

| figure | value |
|---|---|
{table}

The second prepare hashes the files (SHA-256), checks their encoding, loads the tokenizer and
maps the cached Arrow files; it parses, checks and tokenizes nothing.
"""
    print(body)
    if not args.no_write:
        write_section("prepare", body)
        print("wrote the prepare section of docs/benchmarks-journal.md")


if __name__ == "__main__":
    main()
