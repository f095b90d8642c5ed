"""``task: text-regression`` behind the :class:`~entrena.tasks.base.Task` protocol.

Inputs: ``input_ids`` (B, T) int64 and ``attention_mask`` (B, T) int64, as
``text-classification``: the texts are read, checked, split and tokenised by
:mod:`entrena.tasks.text.data` (with the target checked as a number by
:mod:`entrena.data.targets`, through the same cache), and the model is the same encoder with a
one-output linear head, trained on the standardised target (:mod:`entrena.tasks.regression`).
Batches' ``labels`` are the standardised targets (B,) float32; metrics, predictions and
exports are in the target's units. Baselines: the training mean and TF-IDF + ridge
regression.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from entrena.tasks.base import PlanningSpec, Task
from entrena.tasks.regression import (
    COMPARISON_METRIC,
    REGRESSION_HIGHER_IS_BETTER,
    TargetScaler,
    WithTarget,
    evaluate_regression,
    mse_loss,
    regression_rows,
    value_table,
)
from entrena.tasks.text.planning import text_planning
from entrena.tasks.text.task import TextClassificationTask, build_text_model
from entrena.tasks.text_regression.baselines import text_regression_baselines
from entrena.tasks.text_regression.config import TextRegressionConfig

if TYPE_CHECKING:
    from entrena.config.loading import LoadedConfig
    from entrena.data.loaders import TextBatches
    from entrena.exporting.bundle import ExportRequest, RunModel
    from entrena.exporting.prediction import FramePredictor, ModelLocation, PredictOptions
    from entrena.tasks.text.model import TextClassifier

__all__ = ["TextRegressionTask"]


class TextRegressionTask:
    """Fine-tune a text encoder to predict a number (see the module docstring)."""

    name = "text-regression"
    input_names: tuple[str, ...] = ("input_ids", "attention_mask")
    config_model: type[TextRegressionConfig] = TextRegressionConfig
    """The config class (the common sections plus this task's keys)."""
    model_files: tuple[str, ...] = TextClassificationTask.model_files
    """The files a saved model folder holds (``entrena export``/``predict`` check them)."""
    export_formats: tuple[str, ...] = TextClassificationTask.export_formats
    """The ``entrena export --format`` values this task writes."""
    loss = staticmethod(mse_loss)
    evaluate = staticmethod(evaluate_regression)
    comparison_rows = staticmethod(regression_rows)
    higher_is_better = REGRESSION_HIGHER_IS_BETTER
    comparison_metric = COMPARISON_METRIC
    """The metric the model and the baselines are compared on (lower is better)."""

    def __init__(self) -> None:
        self._text = TextClassificationTask()  # what does not depend on the target

    def model_sources(self, loaded: LoadedConfig[TextRegressionConfig]) -> dict[str, str]:
        """As ``text-classification``: the tokenizer and, for pretrained weights, the model."""
        from entrena.tasks.text.data import resolve_model_sources

        return resolve_model_sources(loaded)

    def prepare(self, loaded: LoadedConfig[TextRegressionConfig],
                sources: dict[str, str]) -> WithTarget:
        """Texts read, checked (the target as a number), split and tokenised, and the target
        scaling fitted on the training rows."""
        from entrena.tasks.text.data import prepare_texts

        prepared = prepare_texts(loaded, sources, numeric_target=True)
        scaler = TargetScaler.fit(np.asarray(prepared.splits.train.labels),
                                  loaded.config.data.target_transform)
        prepared.report["target_scaling"] = scaler.as_dict()
        return WithTarget(prepared, scaler)

    def build_model(self, loaded: LoadedConfig[TextRegressionConfig], sources: dict[str, str],
                    prepared: WithTarget) -> TextClassifier:
        """The encoder with a one-output head."""
        return build_text_model(loaded, sources, prepared, 1)

    def batches(self, loaded: LoadedConfig[TextRegressionConfig], prepared: WithTarget, role: str,
                *, batch_size: int, shuffle: bool) -> TextBatches:
        """:class:`~entrena.data.loaders.TextBatches` of split ``role`` with the standardised
        targets as ``labels``."""
        from entrena.data.loaders import TextBatches

        tcfg = loaded.config.train
        split = getattr(prepared.splits, role)
        return TextBatches(prepared.encoded[role], prepared.target_scaler.to_model(split.labels),
                           max_length=prepared.max_length, batch_size=batch_size,
                           pad_id=prepared.pad_token_id, shuffle=shuffle,
                           group_by_length=tcfg.group_by_length, seed=tcfg.seed,
                           pad_to_multiple_of=loaded.config.data.pad_to_multiple_of)

    def baselines(self, loaded: LoadedConfig[TextRegressionConfig],
                  prepared: WithTarget) -> dict[str, dict[str, Any]]:
        """The training mean and TF-IDF + ridge, fitted on the training texts."""
        splits = prepared.splits
        evaluation = {role: (split.texts, np.asarray(split.labels))
                      for role, split in splits.roles() if role != "train"}
        return text_regression_baselines(splits.train.texts, np.asarray(splits.train.labels),
                                         evaluation, prepared.target_scaler,
                                         seed=loaded.config.train.seed)

    def prediction_table(self, loaded: LoadedConfig[TextRegressionConfig], prepared: WithTarget,
                         role: str, outputs: Any, targets: Any) -> Any:
        """Split ``role``'s texts with ``target``, ``predicted_value`` and ``residual``
        (:func:`~entrena.tasks.regression.value_table`)."""
        from entrena.data.text_fields import joined_column_name

        split = getattr(prepared.splits, role)
        return value_table({joined_column_name(loaded.config.data.text_column): split.texts},
                           outputs, targets, split.row_ids, prepared.target_scaler)

    def save_model(self, model: Any, prepared: WithTarget, directory: Path) -> None:
        """Encoder, tokenizer, head and ``entrena_model.json`` (with ``target``)."""
        from entrena.tasks.text.model import save_classifier

        save_classifier(model, prepared.tokenizer, directory, labels=[],
                        max_length=prepared.max_length, task=self.name,
                        extra={"target": prepared.target_scaler.as_dict()})

    def load_model(self, directory: Path) -> tuple[TextClassifier, dict[str, Any]]:
        """``(network in eval mode, meta)``; the network's output is standardised;
        ``meta["target"]`` holds the scaling."""
        return self._text.load_model(directory)

    def example_inputs(self, model: Any, meta: dict[str, Any], batch_size: int) -> dict[str, Any]:
        """As ``text-classification``."""
        return self._text.example_inputs(model, meta, batch_size)

    def planning(self, loaded: LoadedConfig[TextRegressionConfig], sources: dict[str, str],
                 prepared: WithTarget) -> PlanningSpec:
        """As ``text-classification``, with one output."""
        return text_planning(loaded, sources, prepared, 1)

    def write_bundle(self, run: RunModel, request: ExportRequest) -> dict[str, Any]:
        """Export ``run``'s model answering in the target's units, with value parity."""
        return self._text.write_bundle(run, request)

    def predict(self, location: ModelLocation, data: Path, output: Path,
                options: PredictOptions) -> dict[str, Any]:
        """Predict ``data`` into ``output`` (a ``predicted_value`` column); the summary."""
        return self._text.predict(location, data, output, options)

    def frame_predictor(self, location: ModelLocation, options: PredictOptions) -> FramePredictor:
        """The model loaded once, answering DataFrames with ``predicted_value``."""
        return self._text.frame_predictor(location, options)


if TYPE_CHECKING:  # mypy checks the class against the protocol, with its own types
    _CHECKED: Task[TextRegressionConfig, WithTarget] = TextRegressionTask()
