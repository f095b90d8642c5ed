"""Export the demo model to ONNX fp32 and int8 and record parity, latency, size and the
accuracy of `entrena predict` from the ONNX bundles in docs/benchmarks-journal.md.

Usage: .venv/bin/python benchmarks/experiments/export.py [--run runs/reviews] [--latency-calls 100]
       [--threads N]

The run is the output of `make demo` (`entrena train examples/reviews/config.yaml`). Each
export writes its bundle to RUN/export/onnx and RUN/export/onnx-int8 (replacing them), checks
parity on the 1,000 test reviews and times both ONNX Runtime and PyTorch on the same inputs.
Then `entrena predict` runs each bundle on examples/reviews/data/test.csv, and its predicted
labels are scored against the file's `score` column.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _report, _stats …
from _report import ROOT, machine, today, write_section  # noqa: E402

TEST_CSV = ROOT / "examples" / "reviews" / "data" / "test.csv"


def cli_json(*args: str) -> tuple[dict, float]:
    """Run `entrena ARGS --json`; the parsed stdout and the wall time of the process (s)."""
    entrena = Path(sys.executable).with_name("entrena")
    start = time.perf_counter()
    done = subprocess.run([str(entrena), *args, "--json"], capture_output=True, text=True,
                          cwd=ROOT, check=False)
    wall = time.perf_counter() - start
    if done.returncode not in (0, 3):  # 3: a parity check failed; its JSON is still printed
        sys.exit(f"`entrena {' '.join(args)}` failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout), wall


def predict_accuracy(bundle: Path, out: Path) -> tuple[float, dict, float]:
    """Accuracy of `entrena predict BUNDLE` on the test reviews, its summary and wall time."""
    import pandas as pd

    summary, wall = cli_json("predict", str(bundle), "--input", str(TEST_CSV), "--output",
                             str(out))
    frame = pd.read_csv(out, dtype=str, keep_default_na=False)
    scored = frame[frame["status"] == "ok"]
    return float((scored["predicted_label"] == scored["score"]).mean()), summary, wall


def ms(stats: dict) -> str:
    return f"{stats['p50_ms']:.1f} / {stats['p95_ms']:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, default=ROOT / "runs" / "reviews")
    parser.add_argument("--latency-calls", type=int, default=100)
    parser.add_argument("--threads", type=int, default=None,
                        help="CPU threads for PyTorch and ONNX Runtime (default: PyTorch's)")
    args = parser.parse_args()
    run = args.run.resolve()
    if not (run / "metrics.json").is_file():
        sys.exit(f"{run} has no finished model; run `make demo` first")
    metrics = json.loads((run / "metrics.json").read_text())
    extra = ["--latency-calls", str(args.latency_calls)]
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)

    load_before = os.getloadavg()
    reports, export_wall = {}, {}
    for name, options in (("fp32", []), ("int8", ["--quantize", "int8"])):
        reports[name], export_wall[name] = cli_json("export", str(run), *options, *extra)
        parity = reports[name]["parity"]
        print(f"{name}: parity {'passed' if parity['passed'] else 'FAILED'}, max |dlogit| "
              f"{parity['max_abs_diff']:.2e}, agreement {parity['label_agreement']:.4f}")
    accuracy, summaries, predict_wall = {}, {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in reports:
            bundle = Path(reports[name]["bundle"])
            accuracy[name], summaries[name], predict_wall[name] = predict_accuracy(
                bundle, Path(tmp) / f"{name}.csv")
            print(f"{name}: predict accuracy {accuracy[name]:.4f} "
                  f"(metrics.json test.accuracy {metrics['test']['accuracy']:.4f})")
    load_after = os.getloadavg()

    fp32 = reports["fp32"]
    lat = {name: reports[name]["latency"] for name in reports}
    torch_lat = lat["fp32"]["pytorch"]
    rows = summaries["fp32"]["rows"]["read"]

    def each(get) -> list[str]:  # one cell per ONNX variant
        return [get(reports[name], name) for name in ("fp32", "int8")]

    def mb(n: int) -> str:
        return f"{n / 1e6:.1f}"

    def verdict(report: dict, _: str) -> str:
        return "passed" if report["parity"]["passed"] else "FAILED"

    table = [
        ("parity: max abs logit difference vs PyTorch", "–",
         *each(lambda r, _: f"{r['parity']['max_abs_diff']:.2e}")),
        ("parity: predicted label agreement with PyTorch", "–",
         *each(lambda r, _: f"{r['parity']['label_agreement']:.4f}")),
        ("parity check (fp32: ≤ 1e-4; int8: agreement ≥ 0.99, accuracy drop ≤ 0.01)", "–",
         *each(verdict)),
        ("test accuracy in the parity check", f"{fp32['parity']['accuracy_pytorch']:.4f}",
         *each(lambda r, _: f"{r['parity']['accuracy_exported']:.4f}")),
        ("latency batch 1, p50 / p95 (ms)", ms(torch_lat["batch_1"]),
         *each(lambda r, _: ms(r["latency"]["onnxruntime"]["batch_1"]))),
        ("latency batch 32, p50 / p95 (ms)", ms(torch_lat["batch_32"]),
         *each(lambda r, _: ms(r["latency"]["onnxruntime"]["batch_32"]))),
        ("size on disk: model file (MB)",
         f"{mb(fp32['size_bytes']['pytorch_weights'])} (safetensors)",
         *each(lambda r, _: mb(r["size_bytes"]["model_file"]))),
        ("size on disk: whole bundle (MB)", "–", *each(lambda r, _: mb(r["size_bytes"]["bundle"]))),
        ("`entrena export` wall time, process start to exit (s)", "–",
         *each(lambda _, name: f"{export_wall[name]:.0f}")),
        (f"`entrena predict` on the {rows} test reviews: accuracy",
         f"{metrics['test']['accuracy']:.4f} (metrics.json `test.accuracy`)",
         *each(lambda _, name: f"{accuracy[name]:.4f}")),
        ("`entrena predict` wall time, process start to exit (s)", "–",
         *each(lambda _, name: f"{predict_wall[name]:.0f}")),
    ]
    lines = "\n".join("| " + " | ".join(cells) + " |" for cells in table)
    where = run.relative_to(ROOT) if run.is_relative_to(ROOT) else run
    body = f"""## Export: the demo model to ONNX fp32 and int8 (`entrena export`, `entrena predict`)

- Date: {today()}; machine: {machine()}
- Command: `.venv/bin/python benchmarks/experiments/export.py --latency-calls {args.latency_calls}`
  {f'--threads {args.threads} ' if args.threads else ''}on `{where}` (the `make demo` run);
  exporter {fp32['exporter']}, opset {fp32['opset']}; ONNX Runtime
  {fp32['versions'].get('onnxruntime')}; {lat['fp32']['threads']} CPU thread(s) for both engines
- Load average (1 min) before / after: {load_before[0]:.2f} / {load_after[0]:.2f} on
  {os.cpu_count()} cores. The machine is shared: with a load above the core count, every
  latency here is inflated by other work, by several times and unevenly (the engines take
  turns call by call, so a row compares them fairly; absolute figures need a quiet machine).
- Parity set: the {fp32['parity']['examples']} test reviews, batched 32 at a time sorted by
  length, plus the first 8 one at a time. Latency inputs: {lat['fp32']['inputs']}.

| figure | PyTorch (eager) | ONNX fp32 | ONNX int8 |
|---|---|---|---|
{lines}

The PyTorch latency column is measured inside the fp32 export, on the same inputs and thread
count as ONNX Runtime (the int8 export measures it again: batch 1
{ms(lat['int8']['pytorch']['batch_1'])} ms, batch 32 {ms(lat['int8']['pytorch']['batch_32'])} ms).
Every figure comes from the `export.json` files the exports wrote, except the predict
accuracy, which this script scores from the predictions file against the test file's `score`
column.
"""
    write_section("export", body)
    print(f"wrote the export section of {ROOT / 'docs' / 'benchmarks-journal.md'}")


if __name__ == "__main__":
    main()
