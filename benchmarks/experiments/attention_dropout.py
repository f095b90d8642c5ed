"""What attention dropout costs the demo on a CPU, in time and in accuracy (issue 24).

Runs ``entrena train examples/reviews/config.yaml`` (the shipped demo: MiniLM-L6, 2 epochs,
the final weights scored on the 1,000 test reviews) once per (``--seeds`` S, ``--values`` V),
with ``train.seed=S`` and ``model.attention_dropout=V``, tracking off, each in a fresh run
directory, the values alternated inside each seed. A seed fixes the split, the
initialisation and the batch order, so the two values of one seed train on identical batches:
the ratio of their training-step seconds (``fit.train_time_s``) is a step-time ratio on the
same work. Prints, and with ``--write`` puts in docs/benchmarks-journal.md
(``bench:attention-dropout``): per run the test accuracy and macro-F1, the last validation
accuracy and the training-step seconds; per value the median test accuracy; per seed the
time ratio.

Why it matters: PyTorch's fused scaled-dot-product attention kernel on a CPU has no dropout,
so a checkpoint's ``attention_probs_dropout_prob: 0.1`` sends every layer through the
unfused path (the (B, heads, T, T) probabilities built, softmaxed and masked by a Bernoulli
draw). ``model.attention_dropout: auto`` is 0 on a CPU because of this measurement.

``--key model.attn_implementation --values sdpa auto`` compares the attention kernels the
same way (:mod:`entrena.engine.attention`; section ``bench:attention-kernel-demo``), and with
``--config examples/reviews-chat/config.yaml`` on the LLM demo (SmolLM2-135M with LoRA;
scored by exact match; section ``bench:attention-kernel-llm-demo``).
``--key model.base_dtype --values float32 auto --config examples/reviews-chat/config.yaml``
compares the LLM demo's frozen base stored in float32 and in bfloat16
(:mod:`entrena.engine.frozen`; section ``bench:base-dtype-llm-demo``);
``--key data.pad_to_multiple_of --values 1 32 --config examples/reviews-chat/config.yaml``
the LLM demo's batches padded to their longest example or to a multiple of 32 tokens
(section ``bench:pad-multiple-llm-demo``). ``--section-suffix=-avx512-bf16 --title-suffix
' (AMD EPYC, AVX-512 BF16)'`` writes a measurement on another CPU kind to a section of its
own, beside the first (section ``bench:pad-multiple-demo-avx512-bf16``).

Usage::

    python benchmarks/experiments/attention_dropout.py --seeds 42 43 44 [--values 0.1 0] [--write]
    python benchmarks/experiments/attention_dropout.py --key model.attn_implementation --values sdpa auto
    python benchmarks/experiments/attention_dropout.py --key model.attn_implementation --values sdpa auto \
        --config examples/reviews-chat/config.yaml --seeds 42

Run it alone on the cores: the seconds are half of the point.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _report, _stats …
from _report import ROOT, publish_runs, run_all  # noqa: E402

CONFIG = ROOT / "examples" / "reviews" / "config.yaml"
ENTRENA = Path(sys.executable).with_name("entrena")


SECTIONS = {"model.attention_dropout": ("attention-dropout", "attention dropout",
                                         "Attention dropout on a CPU: time and accuracy of the "
                                         "demo"),
            "model.attn_implementation": ("attention-kernel-demo", "attention kernel",
                                          "Attention kernel on a CPU: time and accuracy of the "
                                          "demo"),
            "model.base_dtype": ("base-dtype-demo", "frozen base dtype",
                                 "The frozen LoRA base in float32 or bfloat16: time and "
                                 "accuracy of the demo"),
            "data.pad_to_multiple_of": ("pad-multiple-demo", "padding multiple",
                                        "Padding batches to a multiple of tokens: time, memory "
                                        "and accuracy of the demo")}
"""Per ``--key``: the docs section, the table's column label and the section's title."""
KEY = "model.attention_dropout"
LLM_CONFIG = ROOT / "examples" / "reviews-chat" / "config.yaml"
SCORES = ("accuracy", "exact_match")
"""The test score reported, the first a run has: a classifier's accuracy, an LLM's exact
match of the generated answer."""


def _score(split: dict) -> tuple[str, float]:
    name = next(n for n in SCORES if n in split)
    return name, split[name]


def one_run(seed: int, value: str, folder: Path) -> dict:
    """Train the demo once; return what this benchmark reports."""
    run_dir = folder / f"s{seed}-p{value}"
    command = [str(ENTRENA), "train", str(CONFIG), "--run-dir", str(run_dir),
               "--set", f"train.seed={seed}", "--set", f"{KEY}={value}",
               "--set", "tracking.enabled=false"]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"seed={seed} {KEY}={value} failed "
                           f"({done.returncode}):\n{done.stderr[-3000:]}")
    metrics = json.loads((run_dir / "metrics.json").read_text())
    score, test = _score(metrics["test"])
    return {"seed": seed, "value": value, "wall_s": round(wall, 1),
            "train_s": metrics["fit"]["train_time_s"], "score": score,
            "test_accuracy": test, "test_macro_f1": metrics["test"].get("macro_f1"),
            "validation_accuracy": _score(metrics["validation"])[1],
            "peak_gib": round(metrics["fit"]["peak_memory_bytes"] / 2**30, 2)}


def main() -> None:
    global KEY, CONFIG
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44])
    parser.add_argument("--values", nargs="+", default=["0.1", "0"])
    parser.add_argument("--key", choices=sorted(SECTIONS), default=KEY)
    parser.add_argument("--runs", type=Path, default=None,
                        help="publish the runs printed earlier (their JSON lines) instead of "
                             "running")
    parser.add_argument("--config", type=Path, default=CONFIG,
                        help="the demo to train (default: the reviews demo; "
                             "examples/reviews-chat/config.yaml: the LLM demo)")
    parser.add_argument("--section-suffix", default="",
                        help="appended to the docs section's name and title, so that a "
                             "measurement on another CPU kind is kept beside the first "
                             "(e.g. '-avx512-bf16' with ' (AMD EPYC, AVX-512 BF16)')")
    parser.add_argument("--title-suffix", default="",
                        help="appended to the section's title (the CPU kind, in words)")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    KEY, CONFIG = args.key, args.config.resolve()
    section, label, title = SECTIONS[args.key]
    llm = CONFIG == LLM_CONFIG
    if llm:
        section, title = section.replace("-demo", "-llm-demo"), title + " (LLM, LoRA)"
    section, title = section + args.section_suffix, title + args.title_suffix
    # Alternate which value goes first, so neither always meets a colder machine.
    jobs = [(seed, value) for index, seed in enumerate(args.seeds)
            for value in (args.values if index % 2 == 0 else list(reversed(args.values)))]
    if args.runs is not None:
        runs = [json.loads(line) for line in args.runs.read_text().splitlines()
                if line.startswith("{")]
        load: list[float] = []
    else:
        runs, load = run_all("bench-attention-dropout-", jobs, one_run)
    score = "exact match" if llm else "accuracy"
    lines = [f"| {label} | seed | test {score} | test macro-F1 | validation {score} "
             "| training steps (s) | wall (s) | fit's peak memory |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(runs, key=lambda r: (args.values.index(r["value"]),
                                         r["seed"])):
        f1 = "–" if r.get("test_macro_f1") is None else f"{r['test_macro_f1']:.3f}"
        lines.append(f"| {r['value']} | {r['seed']} | {r['test_accuracy']:.3f} | "
                     f"{f1} | {r['validation_accuracy']:.3f} | "
                     f"{r['train_s']:.0f} | {r['wall_s']:.0f} | "
                     + (f"{r['peak_gib']:.2f} GiB |" if r.get("peak_gib") else "– |"))
    summary = []
    for value in args.values:
        accs = [r["test_accuracy"] for r in runs if r["value"] == value]
        times = [r["train_s"] for r in runs if r["value"] == value]
        summary.append(f"- {label} {value}: test {score} median "
                       f"**{statistics.median(accs):.3f}** ({min(accs):.3f}–{max(accs):.3f}); "
                       f"training steps median {statistics.median(times):.0f} s")
    if len(args.values) == 2:
        first, second = args.values
        ratios = []
        for seed in args.seeds:
            a = next(r for r in runs if r["seed"] == seed and r["value"] == first)
            b = next(r for r in runs if r["seed"] == seed and r["value"] == second)
            ratios.append(a["train_s"] / b["train_s"])
        summary.append(f"- training-step time, {first} over {second}, same seed (identical "
                       f"batches): " + ", ".join(f"{x:.2f}×" for x in ratios)
                       + f"; median **{statistics.median(ratios):.2f}×**")
    command = ("python benchmarks/experiments/attention_dropout.py "
               + (f"--key {args.key} " if args.key != "model.attention_dropout" else "")
               + ("--config examples/reviews-chat/config.yaml " if llm else "")
               + "--seeds "
               + " ".join(map(str, args.seeds)) + " --values " + " ".join(args.values)
               + (f" --section-suffix={args.section_suffix}" if args.section_suffix else "")
               + (f" --title-suffix '{args.title_suffix}'" if args.title_suffix else "")
               + " --write")
    publish_runs(
        section, title,
        load=load, command=command, table=lines, summary=summary, write=args.write, about=[
            "(`entrena train examples/reviews-chat/config.yaml` with `train.seed` and",
            f"`{args.key}` set, tracking off; SmolLM2-135M with LoRA, 1 epoch of 800",
            "chats, the best weights' greedy answers scored on 300 test reviews; a seed's",
            "runs train on identical batches)."] if llm else [
            "(`entrena train examples/reviews/config.yaml` with `train.seed` and",
            f"`{args.key}` set, tracking off; 2 epochs, the final weights scored",
            "on the 1,000 test reviews; a seed's runs train on identical batches)."])


if __name__ == "__main__":
    main()
