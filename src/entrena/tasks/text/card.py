"""The model card (``MODEL_CARD.md``) of a text classifier's or regressor's bundle: task,
base model, data, metrics, training time, export checks, intended use and limits, from the
run's own files (the shared parts: :mod:`entrena.exporting.card`)."""

from __future__ import annotations

from typing import Any

from entrena.exporting.bundle import RunModel
from entrena.exporting.card import data_lines, metric_rows, num, pct, weights_line
from entrena.units import format_bytes, format_duration

__all__ = ["text_card"]


def _text_columns(value: Any) -> str:
    """``the `review` column`` or ``the `subject` and `body` columns, joined (name: text per
    line)``."""
    if isinstance(value, list) and len(value) > 1:
        names = ", ".join(f"`{c}`" for c in value[:-1]) + f" and `{value[-1]}`"
        return f"the {names} columns, joined (`column: text`, one per line)"
    column = value[0] if isinstance(value, list) else value
    return f"the `{column}` column"


def _base_model(config: dict[str, Any]) -> str:
    model = config.get("model", {})
    if model.get("architecture"):
        shape = ", ".join(f"{k}={v}" for k, v in model["architecture"].items())
        return f"a BERT encoder built from a config with random initial weights ({shape})"
    return f"`{model.get('name')}`" if model.get("name") else "unknown"


def text_card(run: RunModel, manifest: dict[str, Any]) -> str:
    """The bundle's model card as Markdown.

    Args:
        run: The run the model comes from (config, metrics, data report).
        manifest: The bundle's ``export.json`` content.
    """
    config, metrics = run.config, run.metrics
    fit = metrics.get("fit", {})
    prep = manifest["preprocessing"]
    labels = prep["labels"]
    parity = manifest["parity"]
    latency = manifest["latency"]
    engines = [k for k in latency if isinstance(latency[k], dict) and "batch_1" in latency[k]]
    latency_rows = [
        f"| {engine} | {size} | {num(latency[engine][f'batch_{size}']['p50_ms'], '{:.2f}')} | "
        f"{num(latency[engine][f'batch_{size}']['p95_ms'], '{:.2f}')} |"
        for engine in engines for size in (1, 32) if f"batch_{size}" in latency[engine]]
    quant = f", quantised to int8 ({manifest['quantize']})" if manifest.get("quantize") else ""
    fallback = (f"\n- TorchScript failed for this model ({manifest['fallback_reason']}); this "
                "bundle holds a `torch.export` program instead." if manifest.get("fallback_reason")
                else "")
    test = metrics.get("test", {})
    values = "max_rel_diff" in parity  # a regressor (a number per text)
    headline = ("no test set was scored" if not test else
                f"test RMSE {num(test.get('rmse'))}, R² {num(test.get('r2'))}" if values else
                f"test accuracy {num(test.get('accuracy'))}, "
                f"macro-F1 {num(test.get('macro_f1'))}")
    task_line = (f"Text regression: predicts `{prep['label_column']}` (a number, in its own units) "
                 f"from {_text_columns(prep['text_column'])}." if values else
                 f"Text classification into {len(labels)} classes: "
                 f"{', '.join(f'`{label}`' for label in labels)}.\nThe model reads "
                 f"{_text_columns(prep['text_column'])} (labels came from "
                 f"`{prep['label_column']}`).")
    parity_line = (f"max |Δvalue| {parity['max_abs_diff']:.2e} (target units), max relative "
                   f"difference {parity['max_rel_diff']:.2e}" if values else
                   f"max |Δlogit| {parity['max_abs_diff']:.2e}, label agreement "
                   f"{pct(parity['label_agreement'])},\n  accuracy "
                   f"{num(parity.get('accuracy_pytorch'))} (PyTorch) vs "
                   f"{num(parity.get('accuracy_exported'))} (exported)")
    use = ("Estimating the number for texts like the training data" if values else
           "Sorting texts like the training data (the same source, language and length) into "
           "the labels\nabove")
    every = ("- Every input gets a number, even far from the training data; values outside the "
             "training range are extrapolations." if values else
             f"- Every input gets one of the {len(labels)} labels above, even when none fits; "
             "probabilities\n  are softmax outputs, not calibrated confidences.")
    sizes = manifest["size_bytes"]
    train_time = format_duration(fit["train_time_s"]) if "train_time_s" in fit else "n/a"
    wall_time = format_duration(fit["wall_time_s"]) if "wall_time_s" in fit else "n/a"
    return f"""# Model card: {config.get('name', run.paths.root.name)}

## Task
{task_line}
Base model: {_base_model(config)}; pooling `{run.meta.get('pooling', 'mean')}`, then a
linear head. Texts are cut to {prep['max_length']} tokens (the model accepts
{prep['length_limit']}).

## Data
{chr(10).join(data_lines(run))}

## Metrics
Measured by `entrena train` with the weights it saved ({headline}); from `metrics.json`.

| metric | value |
|---|---|
{chr(10).join(metric_rows(metrics))}

## Training
- Time in training steps: {train_time}; wall time (model built to testing done): {wall_time}
- {fit.get('epochs', 'n/a')} epoch(s), {fit.get('steps', 'n/a')} optimizer steps, stopped by
  `{fit.get('stop_reason', 'n/a')}`; {weights_line(fit)}
- Device `{fit.get('device', 'n/a')}`, precision `{fit.get('precision', 'n/a')}`,
  {fit.get('threads', 'n/a')} CPU threads; seed {config.get('train', {}).get('seed', 'n/a')}
- Cost: not recorded (entrena does not price runs yet)

## This export
- Format `{manifest['format']}` (`{manifest['file']}`, {manifest['program']}{quant}), opset
  {manifest.get('opset') or 'n/a'}; made by {manifest['exporter']}{fallback}
- Parity with the PyTorch model on {parity['examples']} {parity['dataset']} examples:
  {parity_line}; criteria `{parity['criteria']}`:
  **{'passed' if parity['passed'] else 'FAILED'}**
- Size: model file {format_bytes(sizes['model_file'])}, bundle {format_bytes(sizes['bundle'])}
  (PyTorch weights: {format_bytes(sizes['pytorch_weights'])})
- Latency on the exporting machine ({latency.get('threads')} threads; {latency.get('inputs')}):

| engine | batch | p50 (ms) | p95 (ms) |
|---|---|---|---|
{chr(10).join(latency_rows)}

## Intended use
{use}, in batch jobs or behind a service, with `entrena predict` or any ONNX Runtime / PyTorch
code that applies the tokenizer in this folder with truncation at {prep['max_length']} tokens.

## Limits
{every}
- Only the first {prep['max_length']} tokens of a text are read.
- The figures above come from the {metrics.get('data', {}).get('test_rows', 'n/a')} test rows of
  one data source; accuracy on other sources, languages or time periods is unknown.
- No check for bias or fairness across groups of people was run; do not use the labels for
  decisions about people without such a check and human review.
"""
