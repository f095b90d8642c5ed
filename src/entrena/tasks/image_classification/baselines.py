"""The image task's baselines: the majority class and an L2 logistic regression on 8 × 8
thumbnails, fitted on the training split and scored on the others."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from entrena.tasks.image_classification.data import PreparedImages

__all__ = ["BASELINE_MAX_TRAIN", "THUMBNAIL_SIDE", "image_baselines", "thumbnail_features"]

THUMBNAIL_SIDE = 8
"""Side of the thumbnails the logistic-regression baseline sees (pixels)."""
BASELINE_MAX_TRAIN = 20_000
"""Training images the baseline is fitted on at most (a seeded sample)."""


def thumbnail_features(prepared: PreparedImages, role: str, side: int = THUMBNAIL_SIDE,
                       limit: int | None = None, seed: int = 0) -> np.ndarray:
    """Flattened ``side`` × ``side`` thumbnails of a split, pixels in [0, 1].

    Returns:
        float32 (N, C·side²), N the split's images (or a seeded sample of ``limit``).
    """
    import torch
    import torch.nn.functional as F

    from entrena.data.image_batches import iter_resized

    split = getattr(prepared.splits, role)
    t = prepared.transforms
    index = np.arange(len(split))
    if limit is not None and len(index) > limit:
        index = np.sort(np.random.default_rng(seed).permutation(len(index))[:limit])
    decoded = prepared.decoded.get(role)
    if decoded is not None:
        images = torch.from_numpy(np.asarray(decoded[index]))
    else:
        images = torch.stack(list(iter_resized([split.paths[i] for i in index], t.channels,
                                               t.size)))
    small = F.interpolate(images.float() / 255.0, size=(side, side), mode="area")
    return small.reshape(len(index), -1).numpy().astype(np.float32)


def image_baselines(features: dict[str, np.ndarray], labels: dict[str, np.ndarray],
                    names: list[str], *, seed: int = 0) -> dict[str, dict[str, Any]]:
    """Fit the majority class and an L2 logistic regression (C=1) on the training thumbnails
    and score them on every other split.

    Args:
        features: ``{role: (N, F) float32}`` (from :func:`thumbnail_features`).
        labels: ``{role: (N,) int64}``.
        names: Class names in index order.
        seed: Random state of the solver.

    Returns:
        ``{"majority": {...}, "thumbnail_logreg": {...}}``, each with ``time_s`` and per
        evaluation split ``{"accuracy", "macro_f1"}``.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from entrena.tasks.metrics import classification_metrics
    from entrena.tasks.significance import with_rows

    x_train, y_train = features["train"], np.asarray(labels["train"], dtype=np.int64)
    if len(x_train) > BASELINE_MAX_TRAIN:
        keep = np.random.default_rng(seed).permutation(len(x_train))[:BASELINE_MAX_TRAIN]
        x_train, y_train = x_train[keep], y_train[keep]
    majority = int(np.bincount(y_train).argmax())

    def logreg() -> Any:
        model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000,
                                                                   random_state=seed))
        model.fit(x_train, y_train)
        return model.predict

    builders = {"majority": lambda: (lambda x: np.full(len(x), majority, dtype=np.int64)),
                "thumbnail_logreg": logreg}
    result: dict[str, dict[str, Any]] = {}
    for name, build in builders.items():
        started = time.perf_counter()
        predict = build()
        scores = {}
        for role, x in features.items():
            if role != "train":
                guess = predict(x)
                scores[role] = with_rows(classification_metrics(np.asarray(labels[role]), guess,
                                                                names), labels[role], guess)
        result[name] = {**scores, "time_s": time.perf_counter() - started}
    return result
