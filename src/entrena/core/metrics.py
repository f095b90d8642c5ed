"""The one table of metric keys: name, unit, and whether higher is better.

Logs, ``metrics.json``, MLflow and the docs read this table; a key used anywhere else must be
listed here (a test checks that ``metrics.json`` of a real run uses only these keys).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MetricKey", "METRIC_KEYS", "higher_is_better"]


@dataclass(frozen=True)
class MetricKey:
    """One metric: its dotted key in ``metrics.json``, unit and meaning."""

    key: str
    unit: str
    description: str
    higher_is_better: bool | None = None


_TABLE = [
    MetricKey("validation.loss", "nats", "mean cross-entropy on the validation set", False),
    MetricKey("validation.accuracy", "fraction", "share of validation examples right", True),
    MetricKey("validation.macro_f1", "fraction", "unweighted mean of per-class F1", True),
    MetricKey("test.loss", "nats", "mean cross-entropy on the test set", False),
    MetricKey("test.accuracy", "fraction", "share of test examples right", True),
    MetricKey("test.macro_f1", "fraction", "unweighted mean of per-class F1 on test", True),
    MetricKey("test.per_class", "fraction", "precision, recall, F1 and support per class"),
    MetricKey("test.confusion_matrix", "count", "rows: true label, columns: predicted label"),
    MetricKey("fit.epochs", "epoch", "epochs started"),
    MetricKey("fit.steps", "step", "optimizer steps taken"),
    MetricKey("fit.best_step", "step", "step of the best evaluation (by the early-stopping "
              "monitor); its weights were restored unless fit.restored_best_weights is false"),
    MetricKey("fit.restored_best_weights", "", "whether the best weights were loaded back "
              "(train.restore_best_weights); false: the final weights were tested and saved"),
    MetricKey("fit.stop_reason", "", "why training ended"),
    MetricKey("fit.skipped_steps", "step", "optimizer steps skipped for a non-finite loss or "
              "gradient norm (train.on_nonfinite: skip_batch)", False),
    MetricKey("fit.resumes", "count", "times the fit was resumed from a checkpoint"),
    MetricKey("fit.train_time_s", "s", "time in training steps, evaluation excluded"),
    MetricKey("fit.wall_time_s", "s", "time from device set-up to the end of the fit, "
              "evaluation included (reading data and saving the model excluded)"),
    MetricKey("fit.threads", "threads", "CPU threads torch used"),
    MetricKey("fit.world_size", "processes", "processes that trained together (devices x nodes)"),
    MetricKey("fit.throughput_samples_per_s", "samples/s", "training samples per second", True),
    MetricKey("fit.throughput_tokens_per_s", "tokens/s", "real (unpadded) tokens per second", True),
    MetricKey("fit.padding_fraction", "fraction", "share of token slots that were padding", False),
    MetricKey("fit.max_length", "tokens", "truncation length used"),
    MetricKey("fit.precision", "", "numeric precision used"),
    MetricKey("fit.device", "", "device trained on"),
    MetricKey("fit.peak_memory_bytes", "B", "peak resident memory (CPU RSS or CUDA allocator)"),
    MetricKey("data.train_rows", "rows", "training rows used"),
    MetricKey("data.validation_rows", "rows", "validation rows used"),
    MetricKey("data.test_rows", "rows", "test rows used"),
    MetricKey("data.labels", "", "the label map, index order"),
    MetricKey("history", "", "one entry per evaluation: epoch, step and validation metrics"),
    MetricKey("baseline.majority.validation", "fraction", "majority-class baseline: "
              "accuracy and macro-F1 on validation"),
    MetricKey("baseline.majority.test", "fraction", "majority-class baseline on test"),
    MetricKey("baseline.majority.time_s", "s", "majority baseline: fit and score time"),
    MetricKey("baseline.tfidf_logreg.validation", "fraction", "TF-IDF (word 1-2 grams) + "
              "logistic regression on the training split: accuracy and macro-F1 on validation"),
    MetricKey("baseline.tfidf_logreg.test", "fraction", "TF-IDF + logistic regression on test"),
    MetricKey("baseline.tfidf_logreg.time_s", "s", "TF-IDF + logistic regression: fit and "
              "score time"),
    MetricKey("baseline.comparison", "", "model vs the best baseline on test (else "
              "validation) accuracy: split, metric, model, best, best_score, "
              "model_beats_baseline"),
    MetricKey("efficiency.mfu", "fraction", "model FLOPs utilisation: useful training FLOPs "
              "(planner's per-sample count at real lengths, padding excluded) / training time "
              "/ device peak (GPU: catalog; CPU: measured matmul peak)", True),
    MetricKey("efficiency.padding_fraction", "fraction", "share of token slots that were "
              "padding", False),
    MetricKey("efficiency.data_wait_fraction", "fraction", "share of training-step time spent "
              "building and moving batches (waiting for data)", False),
    MetricKey("efficiency.throughput_samples_per_s", "samples/s", "training samples per second "
              "of training-step time", True),
    MetricKey("efficiency.throughput_tokens_per_s", "tokens/s", "real tokens per second", True),
    MetricKey("efficiency.throughput_padded_tokens_per_s", "tokens/s", "token slots "
              "(padding included) per second"),
    MetricKey("efficiency.achieved_flops_per_s", "FLOP/s", "useful training FLOPs per second"),
    MetricKey("efficiency.useful_flops", "FLOP", "useful training FLOPs over the fit"),
    MetricKey("efficiency.useful_flops_per_step", "FLOP", "useful training FLOPs per step"),
    MetricKey("efficiency.peak_flops_per_s", "FLOP/s", "the MFU denominator"),
    MetricKey("efficiency.peak_source", "", "where the peak comes from"),
    MetricKey("efficiency.data_wait_s", "s", "time waiting for data in training steps"),
    MetricKey("efficiency.compute_s", "s", "training-step time minus data wait"),
    MetricKey("efficiency.peak_memory_bytes", "B", "peak memory (CPU RSS or CUDA allocator)"),
    MetricKey("efficiency.memory_capacity_bytes", "B", "the device's memory (GPU) or RAM"),
    MetricKey("efficiency.memory_share", "fraction", "peak memory / capacity"),
    MetricKey("efficiency.cpu_utilisation", "fraction", "process CPU time / (threads x wall "
              "time of the fit, evaluation included)"),
    MetricKey("efficiency.gpu_utilisation", "fraction", "mean NVML GPU utilisation at the "
              "monitor's intervals (null without NVML)"),
    MetricKey("efficiency.threads", "threads", "CPU threads torch used"),
    MetricKey("efficiency.monitor_time_s", "s", "time inside the monitor's per-batch hook "
              "(this session)", False),
    MetricKey("efficiency.monitor_time_fraction", "fraction", "monitor time / this "
              "session's training-step time", False),
    MetricKey("efficiency.cores", "cores", "physical cores of the machine"),
    MetricKey("efficiency.device", "", "device trained on"),
    MetricKey("efficiency.precision", "", "numeric precision used"),
    MetricKey("diagnosis", "", "findings: code, the figure that triggered it, message, the "
              "change to make"),
    MetricKey("plan_vs_actual.peak_memory_bytes", "B", "predicted (plan.json) and actual peak "
              "memory of the fit: CPU resident set or CUDA allocator peak"),
    MetricKey("plan_vs_actual.epoch_time_s", "s", "predicted (plan.json) and actual time in "
              "training steps per epoch (actual: per-sample training time x training rows)"),
]

METRIC_KEYS: dict[str, MetricKey] = {m.key: m for m in _TABLE}


def higher_is_better(key: str) -> bool:
    """Whether a larger value of ``key`` is an improvement.

    Raises:
        KeyError: The key is not in the table or has no direction.
    """
    direction = METRIC_KEYS[key].higher_is_better
    if direction is None:
        raise KeyError(f"metric {key!r} has no better direction")
    return direction
