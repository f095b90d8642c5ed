"""Tabular preprocessing: fitted on the training rows only, saved as JSON, applied anywhere.

:func:`fit_preprocessing` fits scikit-learn's ``ColumnTransformer`` (numbers: median
imputation then standardisation; categories: a constant for missing values then one-hot
encoding, rare categories beyond ``max_categories`` pooled, unknown categories all zeros) on
the training rows and keeps its fitted parameters as plain JSON (medians, means, scales,
category lists). :func:`transform` applies those parameters with NumPy, so training,
``export`` and ``predict`` use the same numbers without unpickling anything; a test checks
that it matches ``ColumnTransformer.transform``.

Feature order: the numeric columns (one feature each), then each categorical column's
categories in the encoder's order, then its pooled ``infrequent`` feature if it has one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["MISSING", "FORMAT", "fit_preprocessing", "fit_column_transformer",
           "fitted_params", "transform", "as_numbers",
           "category_values", "unseen_categories", "invalid_numbers", "feature_names",
           "sklearn_table"]

MISSING = "(missing)"
"""The category a missing categorical value becomes (a category of its own when training has
missing values in that column)."""
FORMAT = 1
"""Version of the saved parameters (``preprocessing.json``)."""
MAX_STANDARD_SCORE = 1e4
"""Standardised numbers are clipped to +-this: a value like 1e300 would overflow float32 and
give NaN probabilities. No training row is clipped below 10^8 rows (a z-score of N samples is
at most sqrt(N - 1)); beyond 10,000 standard deviations a ReLU network's output is
extrapolating along straight lines anyway."""
MAX_CATEGORIES = 64
"""One-hot features per categorical column at most; rarer categories share one feature."""


def as_numbers(values: pd.Series) -> np.ndarray:
    """A column as float64: numbers parsed from text, anything unparsable or empty is NaN."""
    if pd.api.types.is_bool_dtype(values):
        return values.astype(float).to_numpy()
    return pd.to_numeric(values, errors="coerce").to_numpy(dtype=float)


def category_values(values: pd.Series) -> np.ndarray:
    """A column as category strings (stripped; numbers canonical, ``1.0`` → ``1``); missing
    values become :data:`MISSING`."""
    out = np.empty(len(values), dtype=object)
    missing = values.isna().to_numpy()
    for i, value in enumerate(values.to_numpy()):
        if missing[i]:
            out[i] = MISSING
            continue
        if isinstance(value, float | np.floating) and math.isfinite(value) \
                and float(value).is_integer():
            value = int(value)
        text = str(value).strip()
        out[i] = text if text else MISSING
    return out


def fit_preprocessing(frame: pd.DataFrame, numeric: Sequence[str],
                      categorical: Sequence[str]) -> dict[str, Any]:
    """Fit imputation, scaling and one-hot encoding on the training rows.

    Args:
        frame: The training rows only (raw values: text or numbers); (N, columns).
        numeric: Columns used as numbers.
        categorical: Columns used as categories.

    Returns:
        The fitted parameters: ``{"format", "numeric": [{"name", "median", "mean",
        "scale"}], "categorical": [{"name", "categories", "infrequent"}], "width"}``
        (``width`` F: the number of features :func:`transform` returns).
    """
    transformer = fit_column_transformer(frame, numeric, categorical)
    return fitted_params(transformer, numeric, categorical)


def fit_column_transformer(frame: pd.DataFrame, numeric: Sequence[str],
                           categorical: Sequence[str]) -> Any:
    """The fitted scikit-learn ``ColumnTransformer`` behind :func:`fit_preprocessing`; its
    ``transform(sklearn_table(frame, …))`` equals :func:`transform`."""
    from sklearn.compose import ColumnTransformer
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    table = sklearn_table(frame, numeric, categorical)
    parts = []
    if numeric:
        parts.append(("numeric", make_pipeline(SimpleImputer(strategy="median"),
                                               StandardScaler()), list(numeric)))
    if categorical:
        parts.append(("categorical", OneHotEncoder(handle_unknown="ignore",
                                                   max_categories=MAX_CATEGORIES,
                                                   sparse_output=False),
                      list(categorical)))
    transformer = ColumnTransformer(parts, remainder="drop", sparse_threshold=0.0)
    return transformer.fit(table)


def fitted_params(transformer: Any, numeric: Sequence[str],
                  categorical: Sequence[str]) -> dict[str, Any]:
    """The JSON parameters of a fitted :func:`fit_column_transformer`."""
    params: dict[str, Any] = {"format": FORMAT, "numeric": [], "categorical": []}
    if numeric:
        imputer, scaler = transformer.named_transformers_["numeric"].steps[0][1], \
            transformer.named_transformers_["numeric"].steps[1][1]
        for i, name in enumerate(numeric):
            params["numeric"].append({"name": name, "median": float(imputer.statistics_[i]),
                                      "mean": float(scaler.mean_[i]),
                                      "scale": float(scaler.scale_[i])})
    if categorical:
        encoder = transformer.named_transformers_["categorical"]
        infrequent = getattr(encoder, "infrequent_categories_", None) or \
            [None] * len(categorical)
        for i, name in enumerate(categorical):
            rare = [str(c) for c in infrequent[i]] if infrequent[i] is not None else []
            kept = [str(c) for c in encoder.categories_[i] if str(c) not in set(rare)]
            params["categorical"].append({"name": name, "categories": kept,
                                          "infrequent": rare})
    params["width"] = len(feature_names(params))
    return params


def sklearn_table(frame: pd.DataFrame, numeric: Sequence[str],
                   categorical: Sequence[str]) -> pd.DataFrame:
    """The columns as scikit-learn gets them: floats (NaN missing) and category strings."""
    data: dict[str, Any] = {name: as_numbers(frame[name]) for name in numeric}
    data.update({name: category_values(frame[name]).astype(str) for name in categorical})
    return pd.DataFrame(data, index=frame.index)


def feature_names(params: dict[str, Any]) -> list[str]:
    """Names of the F features, in order (``age``, ``home=rent``, ``home=infrequent`` …)."""
    names = [c["name"] for c in params["numeric"]]
    for column in params["categorical"]:
        names += [f"{column['name']}={value}" for value in column["categories"]]
        if column["infrequent"]:
            names.append(f"{column['name']}=infrequent")
    return names


def transform(frame: pd.DataFrame, params: dict[str, Any]) -> np.ndarray:
    """Apply fitted parameters to rows.

    Args:
        frame: Rows holding (at least) the fitted columns; raw values (text or numbers).
        params: From :func:`fit_preprocessing` (or its saved JSON).

    Returns:
        Features, (N, F) float32: ``(x - mean) / scale`` (clipped to
        +-:data:`MAX_STANDARD_SCORE`) with missing numbers (and infinite ones: training
        refuses those) replaced by the training median, then one-hot
        categories (a category training never saw: all zeros in that column's block).
    """
    n = len(frame)
    blocks = []
    for column in params["numeric"]:
        values = as_numbers(frame[column["name"]])
        values = np.where(np.isfinite(values), values, column["median"])  # inf: as missing
        scaled = (values - column["mean"]) / column["scale"]
        blocks.append(np.clip(scaled, -MAX_STANDARD_SCORE, MAX_STANDARD_SCORE)[:, None])
    for column in params["categorical"]:
        values = category_values(frame[column["name"]])
        kept, rare = column["categories"], column["infrequent"]
        index = {value: i for i, value in enumerate(kept)}
        if rare:
            index.update({value: len(kept) for value in rare})
        block = np.zeros((n, len(kept) + (1 if rare else 0)), dtype=np.float64)
        positions = np.array([index.get(v, -1) for v in values], dtype=np.int64)
        known = positions >= 0
        block[np.flatnonzero(known), positions[known]] = 1.0
        blocks.append(block)
    if not blocks:
        return np.zeros((n, 0), dtype=np.float32)
    return np.concatenate(blocks, axis=1).astype(np.float32)


def invalid_numbers(frame: pd.DataFrame, params: dict[str, Any]) -> dict[str, np.ndarray]:
    """Per numeric column, the rows (0-based positions) holding a value that is present but
    not a finite number (``abc``, ``12,5``, ``inf``): :func:`transform` imputes them like
    missing values."""
    out = {}
    for column in params["numeric"]:
        raw = frame[column["name"]]
        present = ~(raw.isna() | raw.astype(str).str.strip().eq("")).to_numpy()
        bad = np.flatnonzero(present & ~np.isfinite(as_numbers(raw)))
        if len(bad):
            out[column["name"]] = bad
    return out


def unseen_categories(frame: pd.DataFrame, params: dict[str, Any]) -> dict[str, int]:
    """Rows per categorical column whose (non-missing) value training never saw (encoded as
    unknown: all zeros)."""
    counts = {}
    for column in params["categorical"]:
        seen = {*column["categories"], *column["infrequent"], MISSING}
        values = category_values(frame[column["name"]])
        unseen = int(sum(1 for v in values if v not in seen))
        if unseen:
            counts[column["name"]] = unseen
    return counts
