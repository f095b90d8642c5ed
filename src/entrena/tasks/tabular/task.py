"""``task: tabular-classification`` behind the :class:`~entrena.tasks.base.Task` protocol.

Input: ``features`` (B, F) float32, the rows after the preprocessing fitted on the training
split (:mod:`entrena.data.preprocessing`). The data is prepared by
:mod:`entrena.tasks.tabular.data`, the model is
:class:`~entrena.tasks.tabular.model.TabularMLP`
(``model.hidden_sizes``, ``model.dropout``), and the baselines are the majority class and
gradient-boosted trees (:mod:`entrena.tasks.tabular.baselines`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from entrena.data.batching import random_batches, reference_loss
from entrena.tasks.base import PlanningSpec, Task, fixed_input_planning
from entrena.tasks.metrics import (
    CLASSIFICATION_HIGHER_IS_BETTER,
    classification_rows,
    cross_entropy_loss,
    evaluate_classification,
)
from entrena.tasks.tabular.baselines import TIE_MARGIN, tabular_baselines
from entrena.tasks.tabular.config import TabularClassificationConfig
from entrena.tasks.tabular.data import PreparedTable, prepare_table

if TYPE_CHECKING:
    from entrena.config.loading import LoadedConfig
    from entrena.exporting.bundle import ExportRequest, RunModel
    from entrena.exporting.prediction import FramePredictor, ModelLocation, PredictOptions
    from entrena.tasks.tabular.model import TabularMLP

__all__ = ["TabularClassificationTask", "FeatureBatches"]

log = logging.getLogger("entrena")


class FeatureBatches:
    """Batches of preprocessed rows.

    Args:
        features: The split's features, (N, F) float32.
        labels: Label index per row, (N,) (or a regression target, (N,) float32: give
            ``label_dtype=np.float32``).
        batch_size: Rows per batch.
        shuffle: A new random order each epoch (seeded ``seed + epoch``), or the file order.
        seed: Base seed.
    """

    def __init__(self, features: np.ndarray, labels: np.ndarray, *, batch_size: int, shuffle: bool,
                 seed: int = 0, label_dtype: Any = np.int64):
        self.features = np.ascontiguousarray(features, dtype=np.float32)
        self.labels = np.asarray(labels, dtype=label_dtype)
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.lengths = np.ones(len(self.labels), dtype=np.int64)  # one "token" per row

    def __len__(self) -> int:
        return len(self.labels)

    def plan(self, epoch: int) -> list[list[int]]:
        """The batches of ``epoch`` (evaluation order is the same every epoch)."""
        if self.shuffle:
            return random_batches(len(self.labels), self.batch_size, self.seed + epoch)
        n = len(self.labels)
        return [list(range(i, min(i + self.batch_size, n))) for i in range(0, n, self.batch_size)]

    def reference_loss(self, indices: Sequence[int]) -> float | None:
        """The divergence guard's floor (:func:`entrena.data.batching.reference_loss`)."""
        return reference_loss(self.labels, indices)

    def collate(self, indices: Sequence[int]) -> dict[str, Any]:
        """``features`` (B, F) float32 and ``labels`` (B,) (int64 class indices, or float32
        targets)."""
        import torch

        index = np.asarray(indices, dtype=np.int64)
        return {"features": torch.from_numpy(self.features[index]),
                "labels": torch.from_numpy(self.labels[index])}


class TabularClassificationTask:
    """Train an MLP on a table, beside boosted trees (see the module docstring)."""

    name = "tabular-classification"
    input_names: tuple[str, ...] = ("features",)
    config_model: type[TabularClassificationConfig] = TabularClassificationConfig
    """The config class (the common sections plus this task's keys)."""
    model_files: tuple[str, ...] = ("model.safetensors", "preprocessing.json", "entrena_model.json")
    """The files a saved model folder holds (``entrena export``/``predict`` check them)."""
    export_formats: tuple[str, ...] = ("onnx",)
    """The ``entrena export --format`` values this task writes."""
    loss = staticmethod(cross_entropy_loss)
    evaluate = staticmethod(evaluate_classification)
    comparison_rows = staticmethod(classification_rows)
    higher_is_better = CLASSIFICATION_HIGHER_IS_BETTER

    def model_sources(self, loaded: LoadedConfig[TabularClassificationConfig]) -> dict[str, str]:
        """Nothing to resolve: the MLP is built from the config."""
        return {}

    def prepare(self, loaded: LoadedConfig[TabularClassificationConfig],
                sources: dict[str, str]) -> PreparedTable:
        """The table read, checked, split and preprocessed (fitted on training rows only)."""
        return prepare_table(loaded)

    def build_model(self, loaded: LoadedConfig[TabularClassificationConfig],
                    sources: dict[str, str], prepared: PreparedTable) -> TabularMLP:
        """A :class:`~entrena.tasks.tabular.model.TabularMLP` of
        ``model.hidden_sizes``."""
        from entrena.tasks.tabular.model import TabularMLP

        cfg = loaded.config
        width = int(prepared.preprocessing["width"])
        model = TabularMLP(width, cfg.model.hidden_sizes or [], len(prepared.splits.labels),
                           cfg.model.dropout)
        log.info("MLP %d → %s → %d (%d parameters)", width,
                 " → ".join(map(str, model.hidden_sizes)) or "(no hidden layer)",
                 len(prepared.splits.labels), sum(p.numel() for p in model.parameters()))
        return model

    def batches(self, loaded: LoadedConfig[TabularClassificationConfig], prepared: PreparedTable,
                role: str, *, batch_size: int, shuffle: bool) -> FeatureBatches:
        """:class:`FeatureBatches` of split ``role`` (seeded by ``train.seed``)."""
        split = getattr(prepared.splits, role)
        return FeatureBatches(prepared.features[role], split.labels, batch_size=batch_size,
                              shuffle=shuffle, seed=loaded.config.train.seed)

    def baselines(self, loaded: LoadedConfig[TabularClassificationConfig],
                  prepared: PreparedTable) -> dict[str, dict[str, Any]]:
        """Majority class and boosted trees, fitted on the training rows."""
        labels = {role: split.labels for role, split in prepared.splits.roles()}
        return tabular_baselines(prepared.frames, labels, prepared.splits.labels,
                                 prepared.preprocessing, seed=loaded.config.train.seed)

    def prediction_table(self, loaded: LoadedConfig[TabularClassificationConfig],
                         prepared: PreparedTable, role: str, outputs: Any, targets: Any) -> Any:
        """Split ``role``'s rows (their feature values as read) with their predictions
        (:func:`~entrena.tasks.predictions.classification_table`)."""
        from entrena.tasks.predictions import classification_table

        split = getattr(prepared.splits, role)
        frame = prepared.frames[role]
        return classification_table({c: frame[c].tolist() for c in frame.columns},
                                    prepared.splits.labels, outputs, targets, split.row_ids)

    def save_model(self, model: Any, prepared: PreparedTable, directory: Path) -> None:
        """Weights, ``preprocessing.json`` and ``entrena_model.json``."""
        from entrena.tasks.tabular.model import save_mlp

        save_mlp(model, directory, labels=prepared.splits.labels,
                 preprocessing=prepared.preprocessing,
                 columns={"numeric": prepared.numeric, "categorical": prepared.categorical})

    def load_model(self, directory: Path) -> tuple[TabularMLP, dict[str, Any]]:
        """``(MLP in eval mode, meta)``; ``meta["preprocessing"]`` holds the fitted
        parameters."""
        from entrena.tasks.tabular.model import load_mlp

        return load_mlp(directory)

    def example_inputs(self, model: Any, meta: dict[str, Any], batch_size: int) -> dict[str, Any]:
        """Standard-normal features (seeded), (``batch_size``, F) float32."""
        import torch

        generator = torch.Generator().manual_seed(0)
        width = int(meta.get("in_features", getattr(model, "in_features", 1)))
        return {"features": torch.randn(batch_size, width, generator=generator)}

    def planning(self, loaded: LoadedConfig[TabularClassificationConfig], sources: dict[str, str],
                 prepared: PreparedTable) -> PlanningSpec:
        """Fixed-size inputs: one "token" per example (:func:`fixed_input_planning`)."""
        name = f"mlp {loaded.config.model.hidden_sizes}"
        return fixed_input_planning(self, loaded, prepared, name)

    def write_bundle(self, run: RunModel, request: ExportRequest) -> dict[str, Any]:
        """Export ``run``'s model as ``request`` asks, check parity and latency, and return
        ``export.json``'s content (:class:`~entrena.exporting.bundle.ExportRequest`)."""
        from entrena.tasks.tabular.export import table_rows, write_table_bundle

        return write_table_bundle(run, request, table_rows(run, request.parity_data))

    def predict(self, location: ModelLocation, data: Path, output: Path,
                options: PredictOptions) -> dict[str, Any]:
        """Predict ``data`` with the model at ``location`` into ``output``; the summary."""
        from entrena.tasks.tabular.predict import predict_table

        return predict_table(location, data, output, options)

    def frame_predictor(self, location: ModelLocation, options: PredictOptions) -> FramePredictor:
        """The model and its preprocessing loaded once, answering DataFrames in memory
        (:func:`~entrena.tasks.tabular.predict.table_frame_predictor`)."""
        from entrena.tasks.tabular.predict import table_frame_predictor

        return table_frame_predictor(location, options)

    def advice(self, verdict: dict[str, Any], baselines: dict[str, Any]) -> dict[str, str] | None:
        """A diagnosis finding when the boosted trees win or tie (``TIE_MARGIN``).

        Args:
            verdict: From :func:`entrena.tasks.baselines.compare_with_baseline`.
            baselines: The baselines' scores.
        """
        trees = baselines.get("boosted_trees", {}).get(verdict["split"])
        if not trees:
            return None
        gap = verdict["model"] - trees[verdict["metric"]]
        if gap >= TIE_MARGIN:
            return None
        outcome = "beat" if gap < 0 else "tie with"
        return {"code": "trees_enough",
                "figure": f"{verdict['split']} {verdict['metric']}: boosted trees "
                          f"{trees[verdict['metric']]:.4f}, MLP {verdict['model']:.4f}",
                "message": f"the boosted trees {outcome} the MLP on this table "
                           f"(fitted in {baselines['boosted_trees']['time_s']:.1f}s)",
                "change": "a CPU and boosted trees are enough here: use the trees "
                          "(scikit-learn's HistGradientBoostingClassifier), no GPU needed"}


if TYPE_CHECKING:  # mypy checks the class against the protocol, with its own types
    _CHECKED: Task[TabularClassificationConfig, PreparedTable] = TabularClassificationTask()
