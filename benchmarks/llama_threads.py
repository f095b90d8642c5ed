"""llama.cpp's generation speed with entrena's default thread count against a fixed count,
while another process keeps one core busy (issue 44: on a busy 2-core machine one thread gave
36 tokens/s and two 0.3).

Usage::

    .venv/bin/python benchmarks/llama_threads.py \\
        --gguf runs/reviews-chat/export/gguf-q8_0/model.gguf \\
        [--against 2] [--pairs 3] [--tokens 64] [--busy 1] [--write]

- **Load**: ``--busy`` processes, each a Python busy loop at normal priority, started before
  the first measurement and kept running to the end.
- **Configurations**, side by side in ``--pairs`` alternating pairs (ABAB…, the order flipped
  every pair): *default*, ``GgufRunner(threads=None)``, whose count
  :func:`entrena.hardware.threads.choose_threads` measures at load time with the busy
  processes running; and *fixed*, ``threads=--against``. Each loads the file afresh and
  generates ``--tokens`` tokens greedily (no EOS stop) after one untimed warm-up answer;
  tokens/s is the generated tokens over the generation's wall time (prompt processing
  included, 16 prompt tokens).

``--write`` puts the table in docs/benchmarks-journal.md (section ``bench:llama-threads``, or
``--section NAME``; ``llama-threads-idle`` is the run with ``--busy 0``).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import machine, today, write_section  # noqa: E402

PROMPT = "<|im_start|>user\nWrite a long story about a cat and a lighthouse.<|im_end|>\n"


def measure(gguf: Path, threads: int | None, tokens: int) -> tuple[int, float]:
    """``(threads used, tokens/s)`` of one fresh load and one timed greedy answer."""
    from entrena.exporting.llama_runtime import GgufRunner

    runner = GgufRunner(gguf, context_tokens=512, threads=threads)
    prompt = runner.tokenize(PROMPT)
    _generate(runner, prompt, 8)  # warm-up
    started = time.perf_counter()
    count = _generate(runner, prompt, tokens)
    return runner.threads, count / (time.perf_counter() - started)


def _generate(runner, prompt: list[int], tokens: int) -> int:
    count = 0
    for _ in runner.llm.generate(prompt, top_k=1, top_p=1.0, min_p=0.0, temp=0.0,
                                 repeat_penalty=1.0, reset=True):
        count += 1
        if count >= tokens:
            break
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", type=Path, required=True)
    parser.add_argument("--against", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--busy", type=int, default=1)
    parser.add_argument("--write", action="store_true")
    parser.add_argument("--section", default="llama-threads")
    args = parser.parse_args()
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(args.busy)]
    rows: dict[str, list[tuple[int, float]]] = {"default": [], "fixed": []}
    try:
        time.sleep(1.0)
        for pair in range(args.pairs):
            order = ("default", "fixed") if pair % 2 == 0 else ("fixed", "default")
            for name in order:
                threads, speed = measure(args.gguf, None if name == "default" else
                                         args.against, args.tokens)
                rows[name].append((threads, speed))
                print(f"pair {pair + 1} {name}: {threads} threads, {speed:.1f} tokens/s",
                      flush=True)
    finally:
        for hog in hogs:
            hog.kill()
    median = {k: statistics.median(s for _, s in v) for k, v in rows.items()}
    ratio = median["default"] / median["fixed"]
    lines = [f"{machine()}; {today()}; `{args.gguf}` ({args.gguf.stat().st_size / 1e6:.0f} "
             f"MB), {args.busy} busy-loop process(es) at normal priority, {args.tokens} "
             f"greedy tokens after one warm-up answer, {args.pairs} alternating pairs.", "",
             "| threads | per pair (tokens/s) | median tokens/s |", "|---|---|---|"]
    for name, label in (("default", "default (measured)"), ("fixed", f"{args.against} (fixed)")):
        used = sorted({t for t, _ in rows[name]})
        lines.append(f"| {label}: {', '.join(map(str, used))} | "
                     f"{', '.join(f'{s:.1f}' for _, s in rows[name])} | {median[name]:.1f} |")
    lines += ["", f"Default / fixed: **{ratio:.1f}x**. Command: `python benchmarks/"
                  f"llama_threads.py --gguf {args.gguf} --against {args.against} --pairs "
                  f"{args.pairs} --tokens {args.tokens} --busy {args.busy} --write"
                  + (f" --section {args.section}" if args.section != "llama-threads" else "")
                  + "`."]
    print("\n".join(lines))
    if args.write:
        print(f"written: {write_section(args.section, chr(10).join(lines))}")


if __name__ == "__main__":
    main()
