"""``task: image-classification`` behind the :class:`~entrena.tasks.base.Task` protocol.

Inputs: ``pixel_values`` (B, C, S, S) float32 — B batch, C channels (1 when every training
image is grayscale, else 3), S the model's input side in pixels — resized and normalised by
:class:`~entrena.data.image_batches.ImageTransforms`. The data is prepared by
:mod:`entrena.tasks.image_classification.data`, the models are in
:mod:`entrena.tasks.image_classification.model`, batches
are :class:`~entrena.data.image_batches.ImageBatches`, and the baselines are the majority class
and a logistic regression on 8 × 8 thumbnails
(:mod:`entrena.tasks.image_classification.baselines`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from entrena.errors import ConfigError
from entrena.tasks.base import PlanningSpec, Task, fixed_input_planning
from entrena.tasks.image_classification.baselines import image_baselines, thumbnail_features
from entrena.tasks.image_classification.config import ImageClassificationConfig
from entrena.tasks.image_classification.data import PreparedImages, prepare_images
from entrena.tasks.metrics import (
    CLASSIFICATION_HIGHER_IS_BETTER,
    classification_rows,
    cross_entropy_loss,
    evaluate_classification,
)

if TYPE_CHECKING:
    from entrena.config.loading import LoadedConfig
    from entrena.data.image_batches import ImageBatches
    from entrena.exporting.bundle import ExportRequest, RunModel
    from entrena.exporting.prediction import FramePredictor, ModelLocation, PredictOptions
    from entrena.tasks.image_classification.model import ImageClassifier

__all__ = ["ImageClassificationTask"]

log = logging.getLogger("entrena")

def _channels_last_wanted(accelerator: str) -> bool:
    import torch

    return accelerator in ("auto", "cuda") and torch.cuda.is_available()


class ImageClassificationTask:
    """Train a timm model or a small CNN on image folders (see the module docstring)."""

    name = "image-classification"
    input_names: tuple[str, ...] = ("pixel_values",)
    config_model: type[ImageClassificationConfig] = ImageClassificationConfig
    """The config class (the common sections plus this task's keys)."""
    model_files: tuple[str, ...] = ("model.safetensors", "entrena_model.json")
    """The files a saved model folder holds (``entrena export``/``predict`` check them)."""
    export_formats: tuple[str, ...] = ("onnx",)
    """The ``entrena export --format`` values this task writes."""
    loss = staticmethod(cross_entropy_loss)
    evaluate = staticmethod(evaluate_classification)
    comparison_rows = staticmethod(classification_rows)
    higher_is_better = CLASSIFICATION_HIGHER_IS_BETTER

    def model_sources(self, loaded: LoadedConfig[ImageClassificationConfig]) -> dict[str, str]:
        """``{"model": checked name}`` and, for a local weights file, ``"weights_file"``.

        Raises:
            ConfigError: A name that is neither ``small-cnn`` nor a timm model (with the
                closest names), or a weights file that does not exist.
        """
        from entrena.tasks.image_classification.model import resolve_image_model

        model = loaded.config.model
        if not model.name:
            raise ConfigError("model.name: task image-classification needs a model name: "
                              "small-cnn for tiny images, or a timm name (resnet18, "
                              "mobilenetv3_small_100, efficientnet_b0 …); add it to the "
                              "config's model section")
        sources = {"model": resolve_image_model(model.name or "")}
        if model.weights_file:
            if not model.pretrained:
                raise ConfigError("model.weights_file is set but model.pretrained is false; "
                                  "set model.pretrained: true to load it, or remove the key")
            path = Path(loaded.resolve_path(model.weights_file))
            if not path.is_file():
                raise ConfigError(f"model.weights_file: {path} does not exist; give the path "
                                  f"of a {sources['model']} weights file (.safetensors/.pth)")
            sources["weights_file"] = str(path)
        return sources

    def prepare(self, loaded: LoadedConfig[ImageClassificationConfig],
                sources: dict[str, str]) -> PreparedImages:
        """Images listed, checked, split and (for small ones) decoded, through the cache."""
        return prepare_images(loaded, sources)

    def build_model(self, loaded: LoadedConfig[ImageClassificationConfig], sources: dict[str, str],
                    prepared: PreparedImages) -> ImageClassifier:
        """An :class:`~entrena.tasks.image_classification.model.ImageClassifier`; channels-last
        when it will
        run on a CUDA GPU."""
        import torch

        from entrena.tasks.image_classification.model import build_image_classifier

        cfg = loaded.config
        t = prepared.transforms
        model = build_image_classifier(
            name=sources["model"], num_labels=len(prepared.splits.labels), channels=t.channels,
            image_size=t.size, pretrained=cfg.model.pretrained,
            weights_file=sources.get("weights_file"), dropout=cfg.model.dropout)
        if _channels_last_wanted(cfg.train.accelerator):
            model = model.to(memory_format=torch.channels_last)
            model.channels_last = True
        log.info("%s on %d x %d x %d images (%s), %d classes", sources["model"], t.channels,
                 t.size, t.size, prepared.report["images"]["image_size_from"],
                 len(prepared.splits.labels))
        return model.train()

    def batches(self, loaded: LoadedConfig[ImageClassificationConfig], prepared: PreparedImages,
                role: str, *, batch_size: int, shuffle: bool) -> ImageBatches:
        """:class:`~entrena.data.image_batches.ImageBatches` of split ``role``: shuffled and
        augmented (seeded by ``train.seed``) when ``shuffle``, file order otherwise."""
        from entrena.data.image_batches import ImageBatches

        split = getattr(prepared.splits, role)
        return ImageBatches(split.paths, split.labels, transforms=prepared.transforms,
                            batch_size=batch_size, shuffle=shuffle,
                            seed=loaded.config.train.seed, decoded=prepared.decoded.get(role),
                            num_workers=prepared.num_workers)

    def baselines(self, loaded: LoadedConfig[ImageClassificationConfig],
                  prepared: PreparedImages) -> dict[str, dict[str, Any]]:
        """Majority class and logistic regression on 8 × 8 thumbnails (train split only)."""
        features = {role: thumbnail_features(prepared, role) for role, _ in
                    prepared.splits.roles()}
        labels = {role: split.labels for role, split in prepared.splits.roles()}
        return image_baselines(features, labels, prepared.splits.labels,
                               seed=loaded.config.train.seed)

    def prediction_table(self, loaded: LoadedConfig[ImageClassificationConfig],
                         prepared: PreparedImages, role: str, outputs: Any, targets: Any) -> Any:
        """Split ``role``'s images (their paths, under ``data.image_column``'s name) with their
        predictions (:func:`~entrena.tasks.predictions.classification_table`; ``row`` is the
        image's position in its listing, 1-based)."""
        from entrena.tasks.predictions import classification_table

        split = getattr(prepared.splits, role)
        return classification_table({loaded.config.data.image_column:
                                     [str(p) for p in split.paths]},
                                    prepared.splits.labels, outputs, targets,
                                    split.row_ids + 1)

    def save_model(self, model: Any, prepared: PreparedImages, directory: Path) -> None:
        """``model.safetensors`` and ``entrena_model.json`` (labels, model name, transforms)."""
        from entrena.callbacks.checkpoint import unwrap
        from entrena.tasks.image_classification.model import (
            ImageClassifier,
            save_image_classifier,
        )

        network = unwrap(model)
        if not isinstance(network, ImageClassifier):  # build_model made it: a bug if not
            raise TypeError(f"image-classification saves an ImageClassifier, not "
                            f"{type(network).__name__}")
        save_image_classifier(network, directory, labels=prepared.splits.labels,
                              transforms=prepared.transforms.as_dict())

    def load_model(self, directory: Path) -> tuple[ImageClassifier, dict[str, Any]]:
        """``(classifier in eval mode, meta)``; ``meta["transforms"]`` says how to turn an
        image file into ``pixel_values``."""
        from entrena.tasks.image_classification.model import load_image_classifier

        return load_image_classifier(directory)

    def example_inputs(self, model: Any, meta: dict[str, Any], batch_size: int) -> dict[str, Any]:
        """Standard-normal ``pixel_values`` (``batch_size``, C, S, S), seeded."""
        import torch

        t = meta["transforms"]
        generator = torch.Generator().manual_seed(0)
        shape = (batch_size, int(t["channels"]), int(t["size"]), int(t["size"]))
        return {"pixel_values": torch.randn(shape, generator=generator)}

    def planning(self, loaded: LoadedConfig[ImageClassificationConfig], sources: dict[str, str],
                 prepared: PreparedImages) -> PlanningSpec:
        """Fixed-size inputs: one "token" per example (:func:`fixed_input_planning`)."""
        return fixed_input_planning(self, loaded, prepared, str(loaded.config.model.name))

    def write_bundle(self, run: RunModel, request: ExportRequest) -> dict[str, Any]:
        """Export ``run``'s model as ``request`` asks, check parity and latency, and return
        ``export.json``'s content (:class:`~entrena.exporting.bundle.ExportRequest`)."""
        from entrena.tasks.image_classification.export import (
            image_examples,
            write_image_bundle,
        )

        return write_image_bundle(run, request, image_examples(run, request.parity_data))

    def predict(self, location: ModelLocation, data: Path, output: Path,
                options: PredictOptions) -> dict[str, Any]:
        """Predict ``data`` with the model at ``location`` into ``output``; the summary."""
        from entrena.tasks.image_classification.predict import predict_images

        return predict_images(location, data, output, options)

    def frame_predictor(self, location: ModelLocation, options: PredictOptions) -> FramePredictor:
        """The model at ``location`` loaded once, answering DataFrames of image paths
        (:func:`~entrena.tasks.image_classification.predict.image_frame_predictor`)."""
        from entrena.tasks.image_classification.predict import image_frame_predictor

        return image_frame_predictor(location, options)


if TYPE_CHECKING:  # mypy checks the class against the protocol, with its own types
    _CHECKED: Task[ImageClassificationConfig, PreparedImages] = ImageClassificationTask()
