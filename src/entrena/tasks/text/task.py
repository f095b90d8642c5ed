"""``task: text-classification`` behind the :class:`~entrena.tasks.base.Task` protocol.

Inputs: ``input_ids`` (B, T) int64 and ``attention_mask`` (B, T) int64 (B batch, T tokens).
The data is prepared by :mod:`entrena.tasks.text.data`, the model is
:class:`~entrena.tasks.text.model.TextClassifier`, batches are
:class:`~entrena.data.loaders.TextBatches` (length-grouped, padded per batch), and the
baselines are the majority class and TF-IDF + logistic regression.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from entrena.tasks.base import PlanningSpec, Task
from entrena.tasks.metrics import (
    CLASSIFICATION_HIGHER_IS_BETTER,
    classification_loss,
    classification_rows,
    evaluate_classification,
)
from entrena.tasks.text.baselines import multi_label_baselines, text_baselines
from entrena.tasks.text.config import TextClassificationConfig, resolve_attention_dropout
from entrena.tasks.text.data import (
    PreparedData,
    prepare_texts,
    resolve_model_sources,
)
from entrena.tasks.text.planning import text_planning

if TYPE_CHECKING:
    from entrena.config.loading import LoadedConfig
    from entrena.data.loaders import TextBatches
    from entrena.exporting.bundle import ExportRequest, RunModel
    from entrena.exporting.prediction import FramePredictor, ModelLocation, PredictOptions
    from entrena.tasks.regression import WithTarget
    from entrena.tasks.text.data import TextLoaded
    from entrena.tasks.text.model import TextClassifier

__all__ = ["TextClassificationTask", "build_text_model"]

log = logging.getLogger("entrena")


def build_text_model(loaded: TextLoaded, sources: dict[str, str],
                     prepared: PreparedData | WithTarget, outputs: int) -> TextClassifier:
    """A :class:`~entrena.tasks.text.model.TextClassifier` with ``outputs``
    outputs (the classes; 1 for a regressor): the pretrained encoder, or random weights of
    ``model.architecture``, and a linear head."""
    from entrena.tasks.text.model import build_classifier

    cfg = loaded.config
    attention_dropout = resolve_attention_dropout(cfg)
    model = build_classifier(
        num_labels=outputs, pretrained=sources.get("weights"),
        architecture=cfg.model.architecture.model_dump() if cfg.model.architecture else None,
        vocab_size=prepared.vocab_size, pad_token_id=prepared.pad_token_id,
        pooling=cfg.model.pooling, dropout=cfg.model.dropout,
        attention_dropout=attention_dropout)
    original = model.checkpoint_attention_dropout
    if cfg.model.attention_dropout == "auto" and original and original != attention_dropout:
        log.info("attention dropout 0 instead of the checkpoint's %g (auto: on a CPU the fused "
                 "attention kernel has no dropout; set model.attention_dropout to keep the "
                 "checkpoint's)", original)
    log.info("max_length %d tokens (%s); %.1f%% of training texts are truncated",
             prepared.max_length, prepared.report["encoding"]["max_length_from"],
             100 * prepared.report["splits"]["train"]["truncated_fraction"])
    return model


class TextClassificationTask:
    """Fine-tune a text encoder with a linear head (see the module docstring)."""

    name = "text-classification"
    input_names: tuple[str, ...] = ("input_ids", "attention_mask")
    config_model: type[TextClassificationConfig] = TextClassificationConfig
    """The config class (the common sections plus this task's keys)."""
    model_files: tuple[str, ...] = ("config.json", "model.safetensors", "head.safetensors",
                                    "entrena_model.json")
    """The files a saved model folder holds (``entrena export``/``predict`` check them)."""
    export_formats: tuple[str, ...] = ("onnx", "torchscript")
    """The ``entrena export --format`` values this task writes."""
    loss = staticmethod(classification_loss)
    evaluate = staticmethod(evaluate_classification)
    comparison_rows = staticmethod(classification_rows)
    higher_is_better = CLASSIFICATION_HIGHER_IS_BETTER

    def model_sources(self, loaded: LoadedConfig[TextClassificationConfig]) -> dict[str, str]:
        """``{"tokenizer": dir or hub id}`` and, for pretrained weights, ``"weights"``.

        Raises:
            ConfigError: An unknown model alias or directory, or no tokenizer for an
                ``architecture``.
        """
        return resolve_model_sources(loaded)

    def prepare(self, loaded: LoadedConfig[TextClassificationConfig],
                sources: dict[str, str]) -> PreparedData:
        """Texts read, checked, split and tokenized (through the cache)."""
        return prepare_texts(loaded, sources)

    def build_model(self, loaded: LoadedConfig[TextClassificationConfig], sources: dict[str, str],
                    prepared: PreparedData) -> TextClassifier:
        """A :class:`~entrena.tasks.text.model.TextClassifier` (pretrained encoder,
        or random weights of ``model.architecture``)."""
        return build_text_model(loaded, sources, prepared, len(prepared.tags))

    def batches(self, loaded: LoadedConfig[TextClassificationConfig], prepared: PreparedData,
                role: str, *, batch_size: int, shuffle: bool) -> TextBatches:
        """:class:`~entrena.data.loaders.TextBatches` of split ``role``: length-grouped and
        seeded by ``train.seed`` when ``shuffle``, sorted by length otherwise."""
        from entrena.data.loaders import TextBatches

        tcfg = loaded.config.train
        return TextBatches(prepared.encoded[role], prepared.targets(role),
                           max_length=prepared.max_length,
                           batch_size=batch_size, pad_id=prepared.pad_token_id,
                           shuffle=shuffle, group_by_length=tcfg.group_by_length,
                           seed=tcfg.seed,
                           pad_to_multiple_of=loaded.config.data.pad_to_multiple_of)

    def baselines(self, loaded: LoadedConfig[TextClassificationConfig],
                  prepared: PreparedData) -> dict[str, dict[str, Any]]:
        """Majority class and TF-IDF + logistic regression, fitted on the training texts."""
        splits = prepared.splits
        evaluation = {role: (split.texts, prepared.targets(role))
                      for role, split in splits.roles() if role != "train"}
        if prepared.separator is not None:
            return multi_label_baselines(splits.train.texts, prepared.targets("train"),
                                         evaluation, prepared.tags,
                                         seed=loaded.config.train.seed)
        return text_baselines(splits.train.texts, splits.train.labels, evaluation,
                              splits.labels, seed=loaded.config.train.seed)

    def prediction_table(self, loaded: LoadedConfig[TextClassificationConfig],
                         prepared: PreparedData, role: str, outputs: Any, targets: Any) -> Any:
        """Split ``role``'s rows with their predictions
        (:func:`~entrena.tasks.predictions.classification_table`); the input column is the
        text column, or ``text`` (``joined_text`` if a column is called ``text``) holding the
        joined text of several."""
        from entrena.data.text_fields import joined_column_name
        from entrena.tasks.predictions import classification_table

        split = getattr(prepared.splits, role)
        name = joined_column_name(loaded.config.data.text_column)
        if prepared.separator is not None:
            from entrena.tasks.predictions import multi_label_table

            return multi_label_table({name: split.texts}, prepared.tags, outputs, targets,
                                     split.row_ids, thresholds=prepared.thresholds,
                                     separator=prepared.separator)
        return classification_table({name: split.texts}, prepared.splits.labels, outputs,
                                    targets, split.row_ids)

    def save_model(self, model: Any, prepared: PreparedData, directory: Path) -> None:
        """Encoder (Hugging Face format), tokenizer, head and ``entrena_model.json``."""
        from entrena.tasks.text.model import save_classifier

        multi = None
        if prepared.separator is not None:
            thresholds = prepared.thresholds if prepared.thresholds is not None else \
                [0.5] * len(prepared.tags)
            multi = {"separator": prepared.separator,
                     "thresholds": [float(t) for t in thresholds]}
        save_classifier(model, prepared.tokenizer, directory, labels=prepared.tags,
                        max_length=prepared.max_length, multi_label=multi)

    def load_model(self, directory: Path) -> tuple[TextClassifier, dict[str, Any]]:
        """``(classifier in eval mode, meta)``; ``meta["tokenizer"]`` holds the tokenizer."""
        from entrena.tasks.text.model import load_classifier

        model, tokenizer, meta = load_classifier(directory)
        return model, {**meta, "tokenizer": tokenizer}

    def example_inputs(self, model: Any, meta: dict[str, Any], batch_size: int) -> dict[str, Any]:
        """Token ids 1..T (no padding), (``batch_size``, T) with T = min(8, max_length)."""
        import torch

        length = min(8, int(meta.get("max_length", 8)))
        ids = torch.arange(1, length + 1, dtype=torch.int64).repeat(batch_size, 1)
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}

    def planning(self, loaded: LoadedConfig[TextClassificationConfig], sources: dict[str, str],
                 prepared: PreparedData) -> PlanningSpec:
        """Token lengths per split at ``max_length``; the model profiled on the meta device at
        three lengths; probed on the median-length and the longest batch of epoch 0."""
        return text_planning(loaded, sources, prepared, len(prepared.tags))

    def write_bundle(self, run: RunModel, request: ExportRequest) -> dict[str, Any]:
        """Export ``run``'s model as ``request`` asks, check parity and latency, and return
        ``export.json``'s content (:class:`~entrena.exporting.bundle.ExportRequest`)."""
        from entrena.tasks.text.export import parity_examples, write_bundle

        return write_bundle(run, request, parity_examples(run, request.parity_data))

    def predict(self, location: ModelLocation, data: Path, output: Path,
                options: PredictOptions) -> dict[str, Any]:
        """Predict ``data`` with the model at ``location`` into ``output``; the summary."""
        from entrena.tasks.text.predict import predict_texts

        return predict_texts(location, data, output, options)

    def frame_predictor(self, location: ModelLocation, options: PredictOptions) -> FramePredictor:
        """The model at ``location`` loaded once, answering DataFrames in memory
        (:func:`~entrena.tasks.text.predict.text_frame_predictor`)."""
        from entrena.tasks.text.predict import text_frame_predictor

        return text_frame_predictor(location, options)


if TYPE_CHECKING:  # mypy checks the class against the protocol, with its own types
    _CHECKED: Task[TextClassificationConfig, PreparedData] = TextClassificationTask()
