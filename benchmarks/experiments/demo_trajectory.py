"""Validation against test accuracy at every evaluation of the demo: is the validation split
able to choose between checkpoints? (How the demo's `restore_best_weights: false` was chosen.)

Usage:
    .venv/bin/python benchmarks/experiments/demo_trajectory.py --seeds 42 43 [--evals-per-epoch 4]
    .venv/bin/python benchmarks/experiments/demo_trajectory.py --render FILE.jsonl ...

Each seed trains the shipped demo config with early stopping off; a callback scores the test
split at every evaluation point (the scoring draws no random numbers and is excluded from
nothing that matters here: the figures are accuracies, not times). Rows go to
``benchmarks/results/demo-trajectory/seed<S>.jsonl``; the "demo-trajectory" section of
docs/benchmarks-journal.md is rendered from them. Test accuracy is recorded to *judge* the selection
rule, never to select.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _report, _stats …
from _report import ROOT, machine, today, write_section  # noqa: E402

CONFIG = ROOT / "examples" / "reviews" / "config.yaml"
RESULTS = ROOT / "benchmarks" / "results" / "demo-trajectory"


def record_seed(seed: int, evals_per_epoch: int, out: Path) -> None:
    """Train seed ``seed`` and append one JSON row per evaluation to ``out``."""
    import entrena
    import entrena.recipes.training as fitting
    from entrena.core.callback import Callback
    from entrena.engine.loop import predict
    from entrena.tasks.metrics import classification_metrics, cross_entropy_loss
    from entrena.tasks.registry import get_task

    captured: dict[str, Any] = {}
    original = fitting.run_fit

    def run_fit(loaded: Any, paths: Any, sources: Any, prepared: Any, *args: Any,
                **kwargs: Any) -> Any:
        captured.update(loaded=loaded, prepared=prepared)
        return original(loaded, paths, sources, prepared, *args, **kwargs)

    class OnCpu:
        def to_device(self, batch: Any) -> Any:
            return batch

    class TestAtEachEvaluation(Callback):
        def on_eval_end(self, state: Any) -> None:
            loaded, prepared = captured["loaded"], captured["prepared"]
            task = get_task(loaded.config.task)
            source = task.batches(loaded, prepared, "test", batch_size=64, shuffle=False)
            logits, labels, loss = predict(OnCpu(), state.model, source, cross_entropy_loss)
            test = classification_metrics(labels, logits.argmax(-1), prepared.splits.labels)
            row = {"seed": seed, "step": state.step, "epoch": state.epoch,
                   "validation": state.eval_metrics, "test": {"loss": loss, **test}}
            with out.open("a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)

    fitting.run_fit = run_fit
    try:
        with tempfile.TemporaryDirectory() as tmp:
            entrena.train(CONFIG, run_dir=Path(tmp) / "run", restart=True,
                          callbacks=[TestAtEachEvaluation()],
                          overrides={"train.seed": seed, "train.early_stopping.enabled": False,
                                     "train.evals_per_epoch": evals_per_epoch,
                                     "tracking.enabled": False})
    finally:
        fitting.run_fit = original


def render(files: list[Path], command: str) -> str:
    """The docs section: one table per seed and what each selection rule would have kept."""
    lines = [
        "## Demo: can the validation split choose the checkpoint? (`demo-trajectory`)", "",
        f"- Date: {today()}; machine: {machine()}",
        f"- Command: `{command}`",
        "- The demo config with early stopping off; test accuracy scored at every evaluation "
        "only to judge the rules (the shipped config selects nothing).", ""]
    for file in files:
        rows = [json.loads(line) for line in file.read_text().splitlines() if line.strip()]
        if not rows:
            continue
        lines += [f"Seed {rows[0]['seed']} (`{file.relative_to(ROOT)}`):", "",
                  "| step | epoch | validation loss | validation accuracy | test accuracy |",
                  "|---|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {r['step']} | {r['epoch'] + 1} | {r['validation']['loss']:.4f} | "
                         f"{r['validation']['accuracy']:.4f} | {r['test']['accuracy']:.3f} |")
        by_loss = min(rows, key=lambda r: r["validation"]["loss"])
        by_accuracy = max(rows, key=lambda r: (r["validation"]["accuracy"], -r["step"]))
        last = rows[-1]
        lines += ["", f"Kept by best validation loss: step {by_loss['step']}, test "
                      f"{by_loss['test']['accuracy']:.3f}; by best validation accuracy: step "
                      f"{by_accuracy['step']}, test {by_accuracy['test']['accuracy']:.3f}; "
                      f"final weights: step {last['step']}, test "
                      f"{last['test']['accuracy']:.3f}.", ""]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="*", default=[42])
    parser.add_argument("--evals-per-epoch", type=int, default=4)
    parser.add_argument("--render", type=Path, nargs="*", default=None,
                        help="only render the section from saved rows")
    args = parser.parse_args()
    if args.render is not None:
        files = [p.resolve() for p in args.render]
        command = ("benchmarks/experiments/demo_trajectory.py --render "
                   + " ".join(str(p.relative_to(ROOT)) for p in files))
    else:
        RESULTS.mkdir(parents=True, exist_ok=True)
        files = []
        for seed in args.seeds:
            out = RESULTS / f"seed{seed}.jsonl"
            out.unlink(missing_ok=True)
            record_seed(seed, args.evals_per_epoch, out)
            files.append(out)
        command = (f"benchmarks/experiments/demo_trajectory.py --seeds {' '.join(map(str, args.seeds))} "
                   f"--evals-per-epoch {args.evals_per_epoch}")
    write_section("demo-trajectory", render(files, ".venv/bin/python " + command))
    print("wrote the demo-trajectory section of docs/benchmarks-journal.md")


if __name__ == "__main__":
    main()
