"""Tabular preprocessing: fitted on the training rows only, saved as JSON, applied anywhere.

:func:`fit_preprocessing` fits scikit-learn's ``ColumnTransformer`` (numbers: median
imputation then standardisation; categories: a constant for missing values then one-hot
encoding, rare categories beyond ``max_categories`` pooled, unknown categories all zeros) on
the training rows and keeps its fitted parameters as plain JSON (medians, means, scales,
category lists). :func:`transform` applies those parameters with NumPy, so training,
``export`` and ``predict`` use the same numbers without unpickling anything; a test checks
that it matches ``ColumnTransformer.transform``.

Numbers written with thousands separators or a decimal comma (``5,632``, ``12,5``) are read
in the style chosen for their column at preparation (:mod:`entrena.data.numbers`), kept in the
parameters as ``number_styles`` (``{column: style}``, the columns not in the plain style);
parameters saved without that key read every column in the plain style.

Feature order: the numeric columns (one feature each), then each categorical column's
categories in the encoder's order, then its pooled ``infrequent`` feature if it has one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from entrena.data.numbers import parse_numbers, present_values

__all__ = ["MISSING", "FORMAT", "fit_preprocessing", "fit_column_transformer",
           "fitted_params", "transform", "as_numbers", "style_of",
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


def as_numbers(values: pd.Series, style: str | None = None) -> np.ndarray:
    """A column as float64 (N,): numbers read from text in ``style`` (a name of
    :data:`entrena.data.numbers.STYLES`; ``None``: plain numbers), anything unreadable or
    empty is NaN; booleans are 0/1.

    Raises:
        ValueError: ``style`` is not a known style.
    """
    return parse_numbers(values, style)


def style_of(params: dict[str, Any], name: str) -> str | None:
    """The number style column ``name`` is read in under fitted ``params`` (``None``: plain;
    parameters saved before ``number_styles`` existed read every column plainly)."""
    return params.get("number_styles", {}).get(name)


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
                      categorical: Sequence[str],
                      number_styles: dict[str, str] | None = None) -> dict[str, Any]:
    """Fit imputation, scaling and one-hot encoding on the training rows.

    Args:
        frame: The training rows only (raw values: text or numbers); (N, columns).
        numeric: Columns used as numbers.
        categorical: Columns used as categories.
        number_styles: ``{column: style}`` for the columns whose numbers are not written
            plainly (:mod:`entrena.data.numbers`); kept in the parameters.

    Returns:
        The fitted parameters: ``{"format", "numeric": [{"name", "median", "mean",
        "scale"}], "categorical": [{"name", "categories", "infrequent"}], "number_styles",
        "width"}`` (``width`` F: the number of features :func:`transform` returns).
    """
    transformer = fit_column_transformer(frame, numeric, categorical, number_styles)
    return fitted_params(transformer, numeric, categorical, number_styles)


def fit_column_transformer(frame: pd.DataFrame, numeric: Sequence[str],
                           categorical: Sequence[str],
                           number_styles: dict[str, str] | None = None) -> Any:
    """The fitted scikit-learn ``ColumnTransformer`` behind :func:`fit_preprocessing`; its
    ``transform(sklearn_table(frame, …, number_styles))`` equals :func:`transform`."""
    from sklearn.compose import ColumnTransformer
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    table = sklearn_table(frame, numeric, categorical, number_styles)
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


def fitted_params(transformer: Any, numeric: Sequence[str], categorical: Sequence[str],
                  number_styles: dict[str, str] | None = None) -> dict[str, Any]:
    """The JSON parameters of a fitted :func:`fit_column_transformer` (``number_styles``:
    as it was given)."""
    params: dict[str, Any] = {"format": FORMAT, "numeric": [], "categorical": [],
                              "number_styles": dict(number_styles or {})}
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


def sklearn_table(frame: pd.DataFrame, numeric: Sequence[str], categorical: Sequence[str],
                  number_styles: dict[str, str] | None = None) -> pd.DataFrame:
    """The columns as scikit-learn gets them: floats (NaN missing; read in
    ``number_styles[column]`` where given) and category strings."""
    styles = number_styles or {}
    data: dict[str, Any] = {name: as_numbers(frame[name], styles.get(name)) for name in numeric}
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
        values = as_numbers(frame[column["name"]], style_of(params, column["name"]))
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
    not a finite number in the column's style (``abc``, ``inf``; ``12,5`` in a plain column):
    :func:`transform` imputes them like missing values."""
    out = {}
    for column in params["numeric"]:
        raw = frame[column["name"]]
        numbers = as_numbers(raw, style_of(params, column["name"]))
        bad = np.flatnonzero(present_values(raw) & ~np.isfinite(numbers))
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
