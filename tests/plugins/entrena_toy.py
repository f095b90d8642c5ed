"""A task from outside entrena, registered through the ``entrena.tasks`` entry point.

``task: toy-points`` classifies 2-D points (columns ``x`` and ``y`` of a CSV) with a small MLP.
It is what ``docs/adding-a-task.md`` walks through: one module (a package would be one
folder), the config class, the :class:`~entrena.tasks.base.Task` methods, and an entry point.
It composes entrena's generic pieces (the classification loss and metrics, the fixed-input
planning, the ONNX bundle writer, the streaming predictor) and names no entrena internals.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from entrena.config.schema import Config, DataConfig, ModelConfig
from entrena.errors import DataError
from entrena.tasks.base import PlanningSpec, fixed_input_planning
from entrena.tasks.metrics import (
    CLASSIFICATION_HIGHER_IS_BETTER,
    classification_metrics,
    cross_entropy_loss,
    evaluate_classification,
)

NAME = "toy-points"


class ToyDataConfig(DataConfig):
    """The points' columns."""

    feature_columns: list[str] = ["x", "y"]
    """Numeric columns that locate a point."""


class ToyModelConfig(ModelConfig):
    """The MLP."""

    hidden_size: int = 16
    """Width of the hidden layer."""


class ToyConfig(Config):
    """A toy-points run."""

    task: Literal["toy-points"] = "toy-points"
    """Classify 2-D points."""
    data: ToyDataConfig
    """Data section."""
    model: ToyModelConfig = ToyModelConfig()
    """Model section."""


@dataclass
class Split:
    features: np.ndarray  # (N, F) float32
    labels: np.ndarray  # (N,) int64
    row_ids: np.ndarray  # (N,) row numbers in the file

    def __len__(self) -> int:
        return len(self.labels)


@dataclass
class Splits:
    train: Split
    validation: Split
    test: Split | None
    labels: list[str]

    def roles(self) -> list[tuple[str, Split]]:
        return [(r, s) for r, s in (("train", self.train), ("validation", self.validation),
                                    ("test", self.test)) if s is not None]


@dataclass
class Prepared:
    splits: Splits
    report: dict[str, Any]
    from_cache: bool = False


class PointBatches:
    """Seeded random batches of points (one "token" each)."""

    def __init__(self, split: Split, batch_size: int, shuffle: bool, seed: int):
        self.split, self.batch_size, self.shuffle, self.seed = split, batch_size, shuffle, seed
        self.lengths = np.ones(len(split), dtype=np.int64)

    def plan(self, epoch: int) -> list[list[int]]:
        order = (np.random.default_rng(self.seed + epoch).permutation(len(self.split))
                 if self.shuffle else np.arange(len(self.split)))
        return [order[i:i + self.batch_size].tolist()
                for i in range(0, len(order), self.batch_size)]

    def collate(self, indices: Sequence[int]) -> dict[str, Any]:
        import torch

        index = np.asarray(indices, dtype=np.int64)
        return {"features": torch.from_numpy(self.split.features[index]),
                "labels": torch.from_numpy(self.split.labels[index])}


def _read(path: str, columns: list[str], label: str) -> tuple[np.ndarray, list[str]]:
    import pandas as pd

    frame = pd.read_csv(path)
    missing = [c for c in [*columns, label] if c not in frame.columns]
    if missing:
        raise DataError(f"{path}: no column(s) {', '.join(missing)}; set data.feature_columns "
                        "and data.label_column")
    return frame[columns].to_numpy(np.float32), frame[label].astype(str).tolist()


def _mlp(in_features: int, hidden: int, classes: int) -> Any:
    import torch

    class PointMLP(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(in_features, hidden),
                                           torch.nn.ReLU(), torch.nn.Linear(hidden, classes))

        def forward(self, features: Any) -> Any:
            return self.net(features)

    return PointMLP()


class ToyPointsTask:
    """``task: toy-points``."""

    name = NAME
    input_names = ("features",)
    config_model = ToyConfig
    model_files = ("toy.pt", "entrena_model.json")
    export_formats = ("onnx",)
    loss = staticmethod(cross_entropy_loss)
    evaluate = staticmethod(evaluate_classification)
    higher_is_better = CLASSIFICATION_HIGHER_IS_BETTER

    def model_sources(self, loaded: Any) -> dict[str, str]:
        return {}

    def prepare(self, loaded: Any, sources: dict[str, str]) -> Prepared:
        data = loaded.config.data
        read = {}
        for role in ("train", "validation", "test"):
            spec = getattr(data, role)
            if spec is not None:
                read[role] = _read(loaded.resolve_path(spec), data.feature_columns,
                                   data.label_column)
        names = sorted(set(read["train"][1]))
        index = {n: i for i, n in enumerate(names)}

        def split(features: np.ndarray, labels: list[str]) -> Split:
            return Split(features, np.array([index[v] for v in labels], dtype=np.int64),
                         np.arange(1, len(labels) + 1))

        train = split(*read["train"])
        if "validation" in read:
            validation = split(*read["validation"])
        else:  # the last share of the file
            cut = int(len(train) * (1 - data.validation_fraction))
            validation = Split(train.features[cut:], train.labels[cut:], train.row_ids[cut:])
            train = Split(train.features[:cut], train.labels[:cut], train.row_ids[:cut])
        test = split(*read["test"]) if "test" in read else None
        splits = Splits(train, validation, test, names)
        report = {"task": NAME, "labels": names, "checks": [],
                  "splits": {role: {"file": getattr(data, role), "rows_read": len(s),
                                    "rows_kept": len(s),
                                    "label_counts": {n: int((s.labels == i).sum())
                                                     for i, n in enumerate(names)}}
                             for role, s in splits.roles()}}
        return Prepared(splits, report)

    def build_model(self, loaded: Any, sources: dict[str, str], prepared: Prepared) -> Any:
        return _mlp(prepared.splits.train.features.shape[1], loaded.config.model.hidden_size,
                    len(prepared.splits.labels)).train()

    def batches(self, loaded: Any, prepared: Prepared, role: str, *, batch_size: int,
                shuffle: bool) -> PointBatches:
        return PointBatches(getattr(prepared.splits, role), batch_size, shuffle,
                            loaded.config.train.seed)

    def baselines(self, loaded: Any, prepared: Prepared) -> dict[str, dict[str, Any]]:
        splits = prepared.splits
        majority = int(np.bincount(splits.train.labels).argmax())
        return {"majority": {
            role: classification_metrics(s.labels, np.full(len(s), majority), splits.labels)
            for role, s in splits.roles() if role != "train"} | {"time_s": 0.0}}

    def save_model(self, model: Any, prepared: Prepared, directory: Path) -> None:
        import torch

        directory.mkdir(parents=True, exist_ok=True)
        torch.save(model.state_dict(), directory / "toy.pt")
        meta = {"task": NAME, "labels": prepared.splits.labels,
                "in_features": int(prepared.splits.train.features.shape[1]),
                "hidden_size": int(model.net[0].out_features)}
        (directory / "entrena_model.json").write_text(json.dumps(meta), encoding="utf-8")

    def load_model(self, directory: Path) -> tuple[Any, dict[str, Any]]:
        import torch

        meta = json.loads((directory / "entrena_model.json").read_text(encoding="utf-8"))
        model = _mlp(meta["in_features"], meta["hidden_size"], len(meta["labels"]))
        model.load_state_dict(torch.load(directory / "toy.pt", weights_only=True))
        return model.eval(), meta

    def example_inputs(self, model: Any, meta: dict[str, Any], batch_size: int) -> dict[str, Any]:
        import torch

        return {"features": torch.zeros(batch_size, meta["in_features"])}

    def planning(self, loaded: Any, sources: dict[str, str], prepared: Prepared) -> PlanningSpec:
        return fixed_input_planning(self, loaded, prepared, "toy mlp")

    def write_bundle(self, run: Any, request: Any) -> dict[str, Any]:
        from entrena.exporting.bundle import META_FILE
        from entrena.exporting.fixed_bundle import FixedInputExport, write_fixed_input_bundle

        model, meta = self.load_model(run.paths.model)
        data = run.config["data"]
        source = request.parity_data or data.get("test") or data["train"]
        features, labels = _read(str(source), data["feature_columns"], data["label_column"])
        index = {n: i for i, n in enumerate(meta["labels"])}
        spec = FixedInputExport(
            model=model, input_name="features", inputs=features,
            labels=np.array([index.get(v, -1) for v in labels]), dataset=str(source),
            files={META_FILE: json.dumps({**meta, "feature_columns": data["feature_columns"]})},
            manifest={"inputs": {"features": "float32 (batch, 2)"}},
            card=lambda m: f"# toy-points model\n\nParity: {m['parity']['passed']}\n",
            latency_inputs="the parity points")
        return write_fixed_input_bundle(run, spec, request)

    def predict(self, location: Any, data: Path, output: Path, options: Any) -> dict[str, Any]:
        from entrena.data.streaming import table_columns
        from entrena.exporting.prediction import stream_predictions

        predictor = PointPredictor(self, location)
        columns = table_columns(data)
        missing = [c for c in predictor.columns if c not in columns]
        if missing:  # bad input is a DataError: one line, exit 2, nothing written
            raise DataError(f"{data}: no column(s) {', '.join(missing)}; the model reads "
                            f"{', '.join(predictor.columns)}")
        return stream_predictions(predictor, data, output, columns=columns,
                                  policy=options.on_bad_rows or "skip", options=options,
                                  model=str(location.path))


class PointPredictor:
    """Annotates chunks of points with a run's PyTorch model or an ONNX bundle."""

    skip_reason = "missing coordinate"

    def __init__(self, task: ToyPointsTask, location: Any):
        import json as _json

        from entrena.exporting.inference import TorchRunner
        from entrena.exporting.onnx_format import OnnxRunner

        if location.kind == "run":
            model, meta = task.load_model(location.folder)
            self.runner = TorchRunner(model)
            self.columns = location.config["data"]["feature_columns"]
        else:
            meta = _json.loads((location.folder / "entrena_model.json").read_text())
            self.runner = OnnxRunner(location.folder / location.manifest["file"], None)
            self.columns = meta["feature_columns"]
        self.labels = list(meta["labels"])
        self.na_columns = self.columns

    def annotate(self, frame: Any, *, first_row: int, on_bad_rows: str, batch_size: int,
                 missing: dict[str, np.ndarray]) -> tuple[Any, np.ndarray]:
        from entrena.exporting.inference import batched_logits, softmax
        from entrena.exporting.prediction import labelled_frame

        values = frame[self.columns].apply(lambda c: c.astype(float)).to_numpy(np.float32)
        skipped = np.isnan(values).any(axis=1)
        probs = np.full((len(frame), len(self.labels)), np.nan)
        if (~skipped).any():
            probs[~skipped] = softmax(batched_logits(self.runner, values[~skipped], batch_size))
        status = np.where(skipped, f"skipped: {self.skip_reason}", "ok")
        return labelled_frame(frame, self.labels, probs, status), skipped
