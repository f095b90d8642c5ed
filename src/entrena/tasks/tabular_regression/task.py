"""``task: tabular-regression`` behind the :class:`~entrena.tasks.base.Task` protocol.

Input: ``features`` (B, F) float32, the rows after the preprocessing fitted on the training
split (as ``tabular-classification``: :mod:`entrena.tasks.tabular.data` reads,
checks and preprocesses the table, with the target checked as a number by
:mod:`entrena.data.targets`). The model is the same MLP with one output, trained on the
standardised target (:mod:`entrena.tasks.regression`); the baselines are the training mean
and gradient-boosted trees. Batches' ``labels`` are the standardised targets (B,) float32;
every metric, prediction and export is in the target's units.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from entrena.tasks.base import PlanningSpec, Task, fixed_input_planning
from entrena.tasks.regression import (
    COMPARISON_METRIC,
    REGRESSION_HIGHER_IS_BETTER,
    TargetScaler,
    WithTarget,
    evaluate_regression,
    mse_loss,
    outcome_against,
    regression_rows,
    value_table,
)
from entrena.tasks.tabular.data import prepare_table
from entrena.tasks.tabular.task import FeatureBatches
from entrena.tasks.tabular_regression.config import TabularRegressionConfig

if TYPE_CHECKING:
    from entrena.config.loading import LoadedConfig
    from entrena.exporting.bundle import ExportRequest, RunModel
    from entrena.exporting.prediction import FramePredictor, ModelLocation, PredictOptions
    from entrena.tasks.tabular.model import TabularMLP

__all__ = ["TabularRegressionTask"]

log = logging.getLogger("entrena")


class TabularRegressionTask:
    """Train an MLP to predict a number from a table, beside boosted trees."""

    name = "tabular-regression"
    input_names: tuple[str, ...] = ("features",)
    config_model: type[TabularRegressionConfig] = TabularRegressionConfig
    """The config class (the common sections plus this task's keys)."""
    model_files: tuple[str, ...] = ("model.safetensors", "preprocessing.json", "entrena_model.json")
    """The files a saved model folder holds (``entrena export``/``predict`` check them)."""
    export_formats: tuple[str, ...] = ("onnx",)
    """The ``entrena export --format`` values this task writes."""
    loss = staticmethod(mse_loss)
    evaluate = staticmethod(evaluate_regression)
    comparison_rows = staticmethod(regression_rows)
    higher_is_better = REGRESSION_HIGHER_IS_BETTER
    comparison_metric = COMPARISON_METRIC
    """The metric the model and the baselines are compared on (lower is better)."""

    def model_sources(self, loaded: LoadedConfig[TabularRegressionConfig]) -> dict[str, str]:
        """Nothing to resolve: the MLP is built from the config."""
        return {}

    def prepare(self, loaded: LoadedConfig[TabularRegressionConfig],
                sources: dict[str, str]) -> WithTarget:
        """The table read, checked, split and preprocessed, and the target scaling fitted on
        the training rows."""
        table = prepare_table(loaded, numeric_target=True)
        scaler = TargetScaler.fit(table.splits.train.labels,
                                  loaded.config.data.target_transform)
        table.report["target_scaling"] = scaler.as_dict()
        return WithTarget(table, scaler)

    def build_model(self, loaded: LoadedConfig[TabularRegressionConfig], sources: dict[str, str],
                    prepared: WithTarget) -> TabularMLP:
        """A :class:`~entrena.tasks.tabular.model.TabularMLP` with one output."""
        from entrena.tasks.tabular.model import TabularMLP

        cfg = loaded.config
        width = int(prepared.preprocessing["width"])
        model = TabularMLP(width, cfg.model.hidden_sizes or [], 1, cfg.model.dropout)
        log.info("MLP %d → %s → 1 (%d parameters), target %r%s", width,
                 " → ".join(map(str, model.hidden_sizes)) or "(no hidden layer)",
                 sum(p.numel() for p in model.parameters()), cfg.data.label_column,
                 " (log1p)" if prepared.target_scaler.transform == "log" else "")
        return model

    def batches(self, loaded: LoadedConfig[TabularRegressionConfig], prepared: WithTarget,
                role: str, *, batch_size: int, shuffle: bool) -> FeatureBatches:
        """:class:`FeatureBatches` of split ``role``; ``labels`` the standardised targets."""
        split = getattr(prepared.splits, role)
        return FeatureBatches(prepared.features[role],
                              prepared.target_scaler.to_model(split.labels),
                              batch_size=batch_size, shuffle=shuffle,
                              seed=loaded.config.train.seed, label_dtype=np.float32)

    def baselines(self, loaded: LoadedConfig[TabularRegressionConfig],
                  prepared: WithTarget) -> dict[str, dict[str, Any]]:
        """The training mean and boosted trees, fitted on the training rows."""
        from entrena.tasks.tabular_regression.baselines import tabular_regression_baselines

        targets = {role: split.labels for role, split in prepared.splits.roles()}
        return tabular_regression_baselines(prepared.frames, targets,
                                            prepared.preprocessing,
                                            prepared.target_scaler, seed=loaded.config.train.seed)

    def prediction_table(self, loaded: LoadedConfig[TabularRegressionConfig], prepared: WithTarget,
                         role: str, outputs: Any, targets: Any) -> Any:
        """Split ``role``'s rows (feature values as read) with ``target``,
        ``predicted_value`` and ``residual`` (:func:`~entrena.tasks.regression.value_table`)."""
        frame = prepared.frames[role]
        return value_table({c: frame[c].tolist() for c in frame.columns}, outputs, targets,
                           getattr(prepared.splits, role).row_ids, prepared.target_scaler)

    def save_model(self, model: Any, prepared: WithTarget, directory: Path) -> None:
        """Weights, ``preprocessing.json`` and ``entrena_model.json`` (with ``target``: the
        scaling)."""
        from entrena.tasks.tabular.model import save_mlp

        table = prepared.prepared
        save_mlp(model, directory, labels=[], preprocessing=table.preprocessing,
                 columns={"numeric": table.numeric, "categorical": table.categorical},
                 task=self.name, extra={"target": prepared.target_scaler.as_dict()})

    def load_model(self, directory: Path) -> tuple[TabularMLP, dict[str, Any]]:
        """``(MLP in eval mode, meta)``: the network's standardised output; ``meta["target"]``
        holds the scaling."""
        from entrena.tasks.tabular.model import load_mlp

        return load_mlp(directory)

    def example_inputs(self, model: Any, meta: dict[str, Any], batch_size: int) -> dict[str, Any]:
        """Standard-normal features (seeded), (``batch_size``, F) float32."""
        import torch

        generator = torch.Generator().manual_seed(0)
        width = int(meta.get("in_features", getattr(model, "in_features", 1)))
        return {"features": torch.randn(batch_size, width, generator=generator)}

    def planning(self, loaded: LoadedConfig[TabularRegressionConfig], sources: dict[str, str],
                 prepared: WithTarget) -> PlanningSpec:
        """Fixed-size inputs: one "token" per example (:func:`fixed_input_planning`)."""
        return fixed_input_planning(self, loaded, prepared,
                                    f"mlp {loaded.config.model.hidden_sizes}")

    def write_bundle(self, run: RunModel, request: ExportRequest) -> dict[str, Any]:
        """Export ``run``'s MLP, answering in the target's units, with value parity."""
        from entrena.tasks.tabular_regression.export import write_regression_table_bundle

        return write_regression_table_bundle(run, request)

    def predict(self, location: ModelLocation, data: Path, output: Path,
                options: PredictOptions) -> dict[str, Any]:
        """Predict ``data`` into ``output`` (a ``predicted_value`` column); the summary."""
        from entrena.tasks.tabular.predict import predict_table

        return predict_table(location, data, output, options)

    def frame_predictor(self, location: ModelLocation, options: PredictOptions) -> FramePredictor:
        """The model and its preprocessing loaded once, answering DataFrames in memory
        (:func:`~entrena.tasks.tabular.predict.table_frame_predictor`)."""
        from entrena.tasks.tabular.predict import table_frame_predictor

        return table_frame_predictor(location, options)

    def advice(self, verdict: dict[str, Any], baselines: dict[str, Any]) -> dict[str, str] | None:
        """A diagnosis finding when the boosted trees win or tie on RMSE."""
        trees = baselines.get("boosted_trees", {}).get(verdict["split"])
        if not trees:
            return None
        outcome = outcome_against(verdict["model"], trees["rmse"])
        if outcome == "beats":
            return None
        return {"code": "trees_enough",
                "figure": f"{verdict['split']} rmse: boosted trees {trees['rmse']:.4g}, "
                          f"MLP {verdict['model']:.4g}",
                "message": f"the boosted trees {'beat' if outcome == 'loses to' else 'tie with'} "
                           f"the MLP on this table (fitted in "
                           f"{baselines['boosted_trees']['time_s']:.1f}s)",
                "change": "a CPU and boosted trees are enough here: use the trees "
                          "(scikit-learn's HistGradientBoostingRegressor), no GPU needed"}


if TYPE_CHECKING:  # mypy checks the class against the protocol, with its own types
    _CHECKED: Task[TabularRegressionConfig, WithTarget] = TabularRegressionTask()
