"""The one table of metric keys: name, unit, and whether higher is better.

Logs, ``metrics.json``, MLflow and the docs read this table; a key used anywhere else must be
listed here (a test checks that ``metrics.json`` of a real run uses only these keys).
``docs/reference/metrics.md`` is rendered from it by :func:`metrics_reference_markdown`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["MetricKey", "METRIC_KEYS", "higher_is_better", "metrics_reference_markdown",
           "split_scores"]


@dataclass(frozen=True)
class MetricKey:
    """One metric: its dotted key in ``metrics.json``, unit and meaning."""

    key: str
    unit: str
    description: str
    higher_is_better: bool | None = None


_TABLE = [
    MetricKey("validation.loss", "nats", "mean cross-entropy on the validation set, scored "
              "again with the weights the run keeps (the best ones unless "
              "train.restore_best_weights: false)", False),
    MetricKey("validation.accuracy", "fraction", "share of validation examples right", True),
    MetricKey("validation.macro_f1", "fraction", "unweighted mean of per-class F1 (multi-label: "
              "of per-tag F1)", True),
    MetricKey("validation.micro_f1", "fraction", "multi-label (data.multi_label): F1 over "
              "every tag decision pooled, at the per-tag thresholds tuned on validation; "
              "validation.accuracy is then subset accuracy (the whole tag set right)", True),
    MetricKey("test.loss", "nats", "mean cross-entropy on the test set", False),
    MetricKey("test.accuracy", "fraction", "share of test examples right", True),
    MetricKey("test.macro_f1", "fraction", "unweighted mean of per-class F1 on test", True),
    MetricKey("validation.rmse", "target units", "regression: root mean squared error on "
              "validation, in the target's units", False),
    MetricKey("validation.mae", "target units", "regression: mean absolute error", False),
    MetricKey("validation.r2", "", "regression: coefficient of determination, 1 - SSE/SST "
              "(0: no better than the mean; 1: perfect)", True),
    MetricKey("validation.median_absolute_error", "target units", "regression: median of "
              "the absolute errors (robust to a few large misses)", False),
    MetricKey("test.rmse", "target units", "regression: root mean squared error on test",
              False),
    MetricKey("test.mae", "target units", "regression: mean absolute error on test", False),
    MetricKey("test.r2", "", "regression: coefficient of determination on test", True),
    MetricKey("test.median_absolute_error", "target units", "regression: median absolute "
              "error on test", False),
    MetricKey("test.micro_f1", "fraction", "multi-label: micro-F1 on test at the thresholds "
              "tuned on validation", True),
    MetricKey("validation.exact_match", "fraction", "LLM fine-tuning: share of greedy "
              "generations equal to the reference after lower-casing and collapsing spaces",
              True),
    MetricKey("validation.eos_share", "fraction", "LLM fine-tuning: share of generations "
              "that ended with EOS within max_new_tokens", True),
    MetricKey("validation.perplexity", "", "LLM fine-tuning: exp(validation.loss), the loss "
              "being the mean NLL of the answer tokens and their EOS", False),
    MetricKey("validation.answers", "", "LLM fine-tuning: how the greedy generations spread: "
              "rows, distinct (normalised answers), commonest, commonest_share and "
              "reference_share (the share of references that are the commonest answer); the "
              "one_answer finding reads it"),
    MetricKey("test.exact_match", "fraction", "LLM fine-tuning: exact match on test", True),
    MetricKey("test.answers", "", "LLM fine-tuning: how the test generations spread (the "
              "same keys)"),
    MetricKey("test.eos_share", "fraction", "LLM fine-tuning: EOS share on test", True),
    MetricKey("test.perplexity", "", "LLM fine-tuning: exp(test.loss)", False),
    MetricKey("test.per_class", "fraction", "per class on the test set: "
              "test.per_class.<label>.precision, .recall, .f1 and .support (a count)"),
    MetricKey("test.confusion_matrix", "count", "rows: true label, columns: predicted label"),
    MetricKey("fit.epochs", "epoch", "epochs started"),
    MetricKey("fit.steps", "step", "optimizer steps taken"),
    MetricKey("fit.best_step", "step", "step of the best evaluation (by the early-stopping "
              "monitor); its weights were restored unless fit.restored_best_weights is false"),
    MetricKey("fit.restored_best_weights", "", "whether the best weights were loaded back "
              "(train.restore_best_weights); false: the final weights were tested and saved"),
    MetricKey("fit.stop_reason", "", "why training ended: max_epochs, max_steps, "
              "early_stopping, max_time or budget (train.budget's planned last step)"),
    MetricKey("fit.skipped_steps", "step", "optimizer steps skipped for a non-finite loss or "
              "gradient norm (train.on_nonfinite: skip_batch)", False),
    MetricKey("fit.resumes", "count", "times the fit was resumed from a checkpoint"),
    MetricKey("fit.micro_batch_size", "samples", "examples per forward pass after out-of-memory "
              "errors halved it (gradients accumulated over the parts keep the batch); null: "
              "the whole batch"),
    MetricKey("fit.out_of_memory_retries", "step", "steps run again with smaller micro-batches "
              "after an out-of-memory error", False),
    MetricKey("fit.train_time_s", "s", "time in training steps, evaluation excluded; summed "
              "over the sessions of a resumed run"),
    MetricKey("fit.wall_time_s", "s", "time from building the model to the end of testing "
              "(encoding and evaluation included; reading the data and saving the model "
              "excluded); this session only"),
    MetricKey("fit.threads", "threads", "CPU threads torch used"),
    MetricKey("fit.world_size", "processes", "processes that trained together (devices x nodes)"),
    MetricKey("fit.throughput_samples_per_s", "samples/s", "training samples per second", True),
    MetricKey("fit.throughput_tokens_per_s", "tokens/s", "real (unpadded) tokens per second", True),
    MetricKey("fit.padding_fraction", "fraction", "share of token slots that were padding", False),
    MetricKey("fit.max_length", "tokens", "truncation length used"),
    MetricKey("fit.precision", "", "numeric precision used"),
    MetricKey("fit.device", "", "device trained on"),
    MetricKey("fit.peak_memory_bytes", "B", "peak resident memory of the process (CPU) or of "
              "the CUDA allocator, from the start of the fit to the end of testing"),
    MetricKey("budget.requested_s", "s", "train.budget in seconds (a money budget through "
              "cost.usd_per_hour)"),
    MetricKey("budget.used_s", "s", "wall time from launch to the finished run (model "
              "registered), earlier sessions of a resumed run included up to their last "
              "checkpoint"),
    MetricKey("budget.overshoot_s", "s", "budget.used_s beyond budget.requested_s (0 when "
              "within)", False),
    MetricKey("budget.binding", "", "whether the budget, not max_epochs or max_steps, set "
              "the run's length"),
    MetricKey("budget.planned_steps", "step", "optimizer steps the budget bought before the "
              "first step (budget.planned_epochs: the same in epochs)"),
    MetricKey("budget.final_planned_steps", "step", "optimizer steps of the last re-plan"),
    MetricKey("budget.trained_steps", "step", "optimizer steps taken (budget.trained_epochs: "
              "the same in epochs)"),
    MetricKey("budget.refits", "count", "re-plans from the fit's measured times (after its "
              "first steps, at each evaluation, every tenth of the run)"),
    MetricKey("budget.spent_before_fit_s", "s", "budget spent before the first step "
              "(reading the data, building the model, planning)"),
    MetricKey("budget.step_s", "s", "wall time of an optimizer step at the last re-plan"),
    MetricKey("budget.eval_s", "s", "wall time of a validation pass at the last re-plan"),
    MetricKey("budget.finish_estimate_s", "s", "the last re-plan's estimate of the time after "
              "the last step"),
    MetricKey("budget.finish_s", "s", "the time after the last step (final validation, test, "
              "baselines, saving, report, model registration)"),
    MetricKey("budget.tail_s", "s", "the part of budget.finish_s after the test pass"),
    MetricKey("data.train_rows", "rows", "training rows used"),
    MetricKey("data.validation_rows", "rows", "validation rows used"),
    MetricKey("data.test_rows", "rows", "test rows used"),
    MetricKey("data.labels", "", "the model's outputs in order, after the label clean-up "
              "(data.label_map, data.normalise_labels): the classes, or a multi-label "
              "model's tags"),
    MetricKey("predictions.validation", "", "predictions/validation.csv, one row per "
              "validation example (row, inputs, label, predicted_label, prob_<label>, "
              "correct): file, rows, mistakes (a count) and most_confident_mistakes (up to 10 "
              "wrong rows, surest first: row, inputs cut to 200 characters, label, "
              "predicted_label, confidence, label_probability)"),
    MetricKey("predictions.test", "", "the same for predictions/test.csv, when there is a "
              "test split"),
    MetricKey("history", "", "a list, one entry per evaluation: epoch, step and the "
              "validation metrics (loss, accuracy, macro_f1)"),
    MetricKey("baseline.majority.validation", "fraction", "majority-class baseline: "
              "accuracy and macro-F1 on validation"),
    MetricKey("baseline.majority.test", "fraction", "majority-class baseline on test"),
    MetricKey("baseline.majority.time_s", "s", "majority baseline: fit and score time"),
    MetricKey("baseline.tfidf_logreg.validation", "fraction", "TF-IDF (word 1-2 grams) + "
              "logistic regression on the training split: accuracy and macro-F1 on validation"),
    MetricKey("baseline.tfidf_logreg.test", "fraction", "TF-IDF + logistic regression on test"),
    MetricKey("baseline.tfidf_logreg.time_s", "s", "TF-IDF + logistic regression: fit and "
              "score time"),
    MetricKey("baseline.boosted_trees.validation", "fraction", "tables: gradient-boosted "
              "trees (HistGradientBoostingClassifier) on the training split: accuracy and "
              "macro-F1 on validation"),
    MetricKey("baseline.boosted_trees.test", "fraction", "tables: boosted trees on test"),
    MetricKey("baseline.boosted_trees.time_s", "s", "tables: boosted trees: fit and score "
              "time (regression: HistGradientBoostingRegressor, scored like the model)"),
    MetricKey("baseline.boosted_trees.iterations", "count", "tables: boosting iterations the "
              "trees ran (early stopping inside scikit-learn)"),
    MetricKey("baseline.mean.validation", "target units", "regression: the training "
              "mean predicted for every row: rmse, mae, r2 (about 0) and median absolute "
              "error on validation"),
    MetricKey("baseline.mean.test", "target units", "regression: the training mean on test"),
    MetricKey("baseline.mean.time_s", "s", "regression: mean baseline: score time"),
    MetricKey("baseline.median.validation", "target units", "regression: the training "
              "median predicted for every row (the least absolute error of any constant): "
              "rmse, mae, r2 and median absolute error on validation"),
    MetricKey("baseline.median.test", "target units", "regression: the training median on "
              "test"),
    MetricKey("baseline.median.time_s", "s", "regression: median baseline: score time"),
    MetricKey("baseline.every_tag.validation", "fraction", "multi-label: every tag on every "
              "row: subset accuracy, micro- and macro-F1 on validation (what a model that "
              "tags everything scores)"),
    MetricKey("baseline.every_tag.test", "fraction", "multi-label: every tag on test"),
    MetricKey("baseline.every_tag.time_s", "s", "multi-label: every-tag baseline: score time"),
    MetricKey("baseline.tfidf_ridge.validation", "target units", "text regression: TF-IDF "
              "(word 1-2 grams) + ridge regression on the training split: rmse, mae, r2 and "
              "median absolute error on validation"),
    MetricKey("baseline.tfidf_ridge.test", "target units", "text regression: TF-IDF + ridge "
              "on test"),
    MetricKey("baseline.tfidf_ridge.time_s", "s", "text regression: TF-IDF + ridge: fit and "
              "score time"),
    MetricKey("baseline.thumbnail_logreg.validation", "fraction", "images: logistic "
              "regression on 8 x 8 thumbnails: accuracy and macro-F1 on validation"),
    MetricKey("baseline.thumbnail_logreg.test", "fraction", "images: thumbnail logistic "
              "regression on test"),
    MetricKey("baseline.thumbnail_logreg.time_s", "s", "images: thumbnail logistic "
              "regression: fit and score time"),
    MetricKey("baseline.zero_shot.validation", "fraction", "LLM fine-tuning: the base model "
              "answering the same prompts zero-shot, on validation when there is no test: "
              "exact_match, eos_share, exact_match_ci95 (95% Wilson interval) and prompts "
              "(drawn at random until the interval is at most +-0.05)"),
    MetricKey("baseline.zero_shot.test", "fraction", "LLM fine-tuning: zero-shot base model "
              "on test (the same keys)"),
    MetricKey("baseline.zero_shot.time_s", "s", "LLM fine-tuning: zero-shot generation time"),
    MetricKey("baseline.zero_shot.max_new_tokens", "tokens", "LLM fine-tuning: tokens the "
              "base model may generate per prompt, as many as the tuned model"),
    MetricKey("baseline.majority_answer.answer", "", "LLM fine-tuning, when the training "
              "responses are labels (at most 20 distinct normalised answers covering >= 95% "
              "of the training rows, each seen about twice or more): the commonest training "
              "answer"),
    MetricKey("baseline.majority_answer.validation", "fraction", "LLM fine-tuning: always "
              "giving the majority answer: exact_match on validation"),
    MetricKey("baseline.majority_answer.test", "fraction", "LLM fine-tuning: the majority "
              "answer's exact_match on test"),
    MetricKey("baseline.majority_answer.time_s", "s", "LLM fine-tuning: majority answer: "
              "score time"),
    MetricKey("baseline.comparison", "", "model vs the best baseline on test (else "
              "validation) accuracy (regression: rmse, lower better): split, metric, "
              "higher_is_better, model, best, best_score, model_beats_baseline, outcome "
              "(beats or loses: the paired bootstrap's 95% interval of model - baseline, "
              "difference_ci, wholly on one side of 0; ties: the interval holds 0, "
              "within_noise when the scores differ); difference, rows, resamples, seed, "
              "level; difference_ci null when the task gives no per-row predictions (then "
              "ties means equal at 4 decimals); the metric is micro_f1 for multi-label runs; a "
              "tie is warned about, a model that loses loudly"),
    MetricKey("efficiency.mfu", "fraction", "model FLOPs utilisation: useful training FLOPs "
              "(planner's per-sample count at real lengths, padding excluded) / training time "
              "/ device peak (GPU: the catalog's peak for the precision; CPU: an fp32 matmul peak "
              "measured once with the fit's threads, cached as cpu_peak.json in the data "
              "cache); efficiency.peak_flops_per_s and efficiency.peak_source say which",
              True),
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
              "monitor's intervals (null without nvidia-ml-py)"),
    MetricKey("efficiency.threads", "threads", "CPU threads torch used"),
    MetricKey("efficiency.monitor_time_s", "s", "time inside the monitor's per-batch hook "
              "(this session)", False),
    MetricKey("efficiency.monitor_time_fraction", "fraction", "monitor time / this "
              "session's training-step time", False),
    MetricKey("efficiency.cores", "cores", "physical cores of the machine"),
    MetricKey("efficiency.device", "", "device trained on"),
    MetricKey("efficiency.precision", "", "numeric precision used"),
    MetricKey("diagnosis", "", "a list of findings, each code, group, figure (what "
              "triggered it), message and change (what to do), listed by group: data "
              "(no_test_split), model (one_class: >= 98% of the scored rows predicted as one "
              "class that is at most 90% of them; one_answer: an LLM giving one normalised "
              "answer to >= 90% of >= 10 scored prompts while <= 90% of the references are "
              "it; baseline_ties, baseline_wins, "
              "no_better_than_mean: a regressor's bootstrap R² interval holds 0 or lies "
              "below it; every_tag: "
              "a multi-label model predicting >= 90% of row-tag pairs where <= 60% are true; "
              "near_constant: a regressor whose predictions' spread is < 10% of the targets'; "
              "trees_enough), training "
              "(early_stopping_saved, padding_waste), then hardware and plan, whose figures a "
              "newcomer acts on last (logged at INFO, as is early_stopping_saved; the others as "
              "warnings): input_bound "
              "(data wait > 20%), "
              "padding_waste (> 30%), memory_headroom (< 25% used) / memory_tight (> 90%), "
              "low_mfu (with its likely cause), threads_idle / threads_fewer_than_cores, "
              "early_stopping_saved (epochs, minutes, USD), plan_off (plan vs actual off by "
              "more than 25% memory / 50% time, provisional bounds); also logged "
              "at the end, and live when input-bound or padding waste holds for 3 monitoring "
              "windows"),
    MetricKey("cost.usd", "USD", "what the run cost: cost.wall_time_s / 3600 x "
              "cost.usd_per_hour (this session of `train`: a resumed run counts the last "
              "session only)", False),
    MetricKey("cost.usd_per_hour", "USD/h", "this machine's hourly price: the catalog offer "
              "when it is a known cloud instance (ENTRENA_INSTANCE, or the DMI product name "
              "on AWS), else local_usd_per_hour of a catalog file, else 0"),
    MetricKey("cost.wall_time_s", "s", "wall time of the `train` command, from reading the "
              "config to writing metrics.json (data preparation, planning, fit, testing, "
              "baselines and saving the model included)"),
    MetricKey("cost.source", "", "where cost.usd_per_hour comes from (the catalog offer and "
              "its citation, or the catalog file), or why the run counts as free"),
    MetricKey("plan_vs_actual.peak_memory_bytes", "B", "predicted (plan.json) and actual peak "
              "memory of the fit (.predicted, .actual): CPU resident set or "
              "torch.cuda.max_memory_allocated, measured from just before the fit"),
    MetricKey("plan_vs_actual.epoch_time_s", "s", "predicted (plan.json) and actual time in "
              "training steps per epoch (.predicted, .actual; actual: per-sample training time x "
              "training rows)"),
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


def split_scores(values: dict[str, Any] | None) -> list[tuple[str, float]]:
    """The scalar metrics of one split of ``metrics.json`` (``accuracy``, ``macro_f1`` for a
    classifier; ``rmse``, ``mae``, ``r2``, ``median_absolute_error`` for a regressor …), in
    the order the task wrote them, ``loss`` last; nested figures (``per_class``) left out."""
    items = [(k, float(v)) for k, v in (values or {}).items()
             if isinstance(v, int | float) and not isinstance(v, bool)]
    return [item for item in items if item[0] != "loss"] + [
        item for item in items if item[0] == "loss"]


def metrics_reference_markdown() -> str:
    """Render the metric table as Markdown: key, unit, better direction, meaning.

    Returns:
        Markdown text ending with a newline; the same on every call and every machine.
    """
    better = {True: "higher", False: "lower", None: ""}
    lines = ["| key | unit | better | what it is |", "|---|---|---|---|"]
    for m in _TABLE:
        unit = f"`{m.unit}`" if m.unit else ""
        description = m.description.replace("|", "\\|").replace("<", "&lt;")
        lines.append(f"| `{m.key}` | {unit} | {better[m.higher_is_better]} | {description} |")
    return "\n".join(lines) + "\n"
