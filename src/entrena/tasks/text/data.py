"""Text data for ``task: text-classification``: read, check, split and encode once.

``entrena prepare`` and ``entrena train`` go through :func:`prepare_texts` (via the task), so
a prepared config trains from the cache. The result is cached under a fingerprint of
everything it depends on:

- the bytes of every data file (SHA-256), with the encoding and delimiter read from them;
- the ``data`` config section except ``cache_dir`` (paths, columns, checks, fractions …);
- ``train.seed`` (the validation split and subsamples) and ``model.max_length``;
- the tokenizer (:func:`~entrena.data.encoding.tokenizer_fingerprint`) and the model's length
  limit;
- :data:`~entrena.data.cache.CACHE_FORMAT`.

A second ``prepare`` of unchanged data hashes the files and maps the cached Arrow files: no
parsing, no checks, no tokenizing, and no tokenizer built (its facts are remembered:
:func:`~entrena.data.encoding.tokenizer_facts`; :attr:`PreparedData.tokenizer` builds it when
something needs it, such as saving the model).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np

from entrena.config import LoadedConfig
from entrena.config.models import resolve_model_name
from entrena.data.cache import CACHE_FORMAT, PreparedCache
from entrena.data.encoding import (
    EncodedTexts,
    TokenizerFacts,
    choose_max_length,
    tokenizer_facts,
)
from entrena.data.hygiene import CheckPolicy, check_record, truncated_fraction
from entrena.data.labels import LabelCleanup
from entrena.data.splits import LabelledSplits
from entrena.data.tables import load_splits, open_config_sources
from entrena.errors import ConfigError
from entrena.tasks.regression_config import target_keys
from entrena.tasks.text.config import TextClassificationDataConfig, TextTaskConfig

TextLoaded = LoadedConfig[TextTaskConfig]
"""A loaded config of either text task (the data path reads both)."""

__all__ = ["PreparedData", "prepare_texts", "resolve_model_sources"]

log = logging.getLogger("entrena")


@dataclass
class PreparedData:
    """Checked, split, encoded data, ready to fit.

    Attributes:
        splits: The splits (texts, labels, row numbers) and the label map.
        encoded: Token ids per split (``train``, ``validation``, ``test``), memory-mapped.
        tokenizer_source: The folder or hub id of the tokenizer they were encoded with
            (:attr:`tokenizer` builds it on first use).
        facts: That tokenizer's vocabulary size, padding id and fingerprint
            (:class:`~entrena.data.encoding.TokenizerFacts`): all training needs of it.
        max_length: The truncation length chosen (``model.max_length``, or ``auto``'s pick).
        length_limit: The model's longest input (tokens).
        report: The data report (``data_report.json``).
        from_cache: Whether everything came from the cache.
    """

    splits: LabelledSplits
    encoded: dict[str, EncodedTexts]
    tokenizer_source: str
    facts: TokenizerFacts
    max_length: int
    length_limit: int
    report: dict[str, Any]
    from_cache: bool
    thresholds: Any = None
    """Multi-label: each tag's decision threshold (K,), tuned on validation by
    :func:`entrena.tasks.metrics.evaluate_classification`; ``None`` before that."""
    built_tokenizer: Any = field(default=None, repr=False)
    """The tokenizer once built (by :func:`prepare_texts` when it had to, or by
    :attr:`tokenizer`)."""

    @property
    def tokenizer(self) -> Any:
        """The Hugging Face tokenizer the texts were encoded with, built on first use (a run
        from the cache needs it only to save the model, after training)."""
        if self.built_tokenizer is None:
            from entrena.tasks.text.model import build_tokenizer

            self.built_tokenizer = build_tokenizer(self.tokenizer_source)
        return self.built_tokenizer

    @property
    def pad_token_id(self) -> int:
        """The padding id batches use (0 when the tokenizer has none)."""
        return self.facts.pad_token_id or 0

    @property
    def vocab_size(self) -> int:
        """The tokenizer's vocabulary with added tokens (``len(tokenizer)``)."""
        return self.facts.vocab_size

    @property
    def failed_checks(self) -> list[dict[str, Any]]:
        return [c for c in self.report.get("checks", []) if c["status"] == "failed"]

    @property
    def separator(self) -> str | None:
        """``data.multi_label.separator`` of multi-label data, else ``None``."""
        return (self.report.get("multi_label") or {}).get("separator")

    @property
    def tags(self) -> list[str]:
        """Multi-label: the tags (the model's outputs, in order); else the class names."""
        found = (self.report.get("multi_label") or {}).get("tags")
        return list(found) if found is not None else list(self.splits.labels)

    def targets(self, role: str) -> np.ndarray:
        """Split ``role``'s labels as the model is trained on them: class indices (N,), or
        for multi-label data multi-hot tags (N, K) float32 (the label map holds tag sets)."""
        split = getattr(self.splits, role)
        if self.separator is None:
            return np.asarray(split.labels)
        from entrena.data.labels import tag_matrix

        return tag_matrix(self.splits.labels, self.tags, self.separator)[split.labels]



def resolve_model_sources(loaded: TextLoaded) -> dict[str, str]:
    """Resolve model and tokenizer names before any data is read (alias errors first).

    Returns:
        ``{"tokenizer": dir or hub id}`` and, for pretrained weights, ``"weights"``.
    """
    model = loaded.config.model
    sources: dict[str, str] = {}
    if model.architecture is None:
        sources["weights"] = resolve_model_name(model.name or "", loaded.base_dir, "model.name")
        sources["tokenizer"] = (resolve_model_name(model.tokenizer, loaded.base_dir,
                                                   "model.tokenizer")
                                if model.tokenizer else sources["weights"])
    else:
        tokenizer = model.tokenizer or model.name
        if not tokenizer:
            raise ConfigError("model.tokenizer: a model built from model.architecture needs a "
                              "tokenizer; set model.tokenizer: minilm-l6")
        sources["tokenizer"] = resolve_model_name(tokenizer, loaded.base_dir,
                                                  "model.tokenizer" if model.tokenizer
                                                  else "model.name")
    return sources



def _length_limit(loaded: TextLoaded, sources: dict[str, str], facts: TokenizerFacts) -> int:
    architecture = loaded.config.model.architecture
    if architecture is not None:
        encoder_config: Any = SimpleNamespace(
            max_position_embeddings=architecture.max_position_embeddings)
    else:
        from transformers import AutoConfig

        encoder_config = AutoConfig.from_pretrained(sources["weights"])
    from entrena.tasks.text.model import model_length_limit

    return model_length_limit(encoder_config,
                              SimpleNamespace(model_max_length=facts.model_max_length))


def _fingerprint(loaded: TextLoaded, files: dict[str, Any], tokenizer_hash: str,
                 length_limit: int, numeric_target: bool = False) -> str:
    cfg = loaded.config
    data = cfg.data.model_dump(mode="json")
    data.pop("cache_dir", None)
    for role in ("train", "validation", "test"):
        if data.get(role):
            data[role] = loaded.resolve_path(data[role])
    material = {
        "format": CACHE_FORMAT,
        "files": {role: [[f.name, f.scan.sha256, f.scan.encoding, f.delimiter] for f in fs]
                  for role, fs in files.items()},
        "data": data, "seed": cfg.train.seed, "max_length": cfg.model.max_length,
        "tokenizer": tokenizer_hash, "length_limit": length_limit,
    }
    if numeric_target:  # the same file read as classes and as numbers: two entries
        material["numeric_target"] = True
    text = json.dumps(material, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]


def prepare_texts(loaded: TextLoaded, sources: dict[str, str], *,
                  numeric_target: bool = False) -> PreparedData:
    """Read, check, split and encode the config's data, through the shared cache.

    Args:
        loaded: The loaded config.
        sources: From :func:`resolve_model_sources`.
        numeric_target: The label column is a number to predict (text regression): checked
            as a number (:mod:`entrena.data.targets`, ``data.target_transform``); the splits'
            ``labels`` are float64 targets.

    Returns:
        The prepared data. Failed checks are in ``report["checks"]`` (see
        :func:`check_failure`); nothing is raised for them here.

    Raises:
        DataError: A file is missing, unreachable, empty, undecodable or unparsable, a column
            is missing, labels mix numbers and strings, fewer than 2 classes, bad rows or
            unseen labels under ``error``, or a validation split that cannot be made.
    """
    started = time.perf_counter()
    cfg = loaded.config
    data = cfg.data
    specs, files, cache_root = open_config_sources(loaded)

    from entrena.tasks.text.model import build_tokenizer

    source = sources["tokenizer"]
    facts, tokenizer = tokenizer_facts(source, build_tokenizer, cache_root / "tokenizers")
    limit = _length_limit(loaded, sources, facts)
    key = _fingerprint(loaded, files, facts.fingerprint, limit, numeric_target)
    cache = PreparedCache(cache_root)
    cached = cache.load(key)
    if cached is not None:
        meta = cached.meta
        splits = LabelledSplits(cached.splits["train"], cached.splits["validation"],
                                cached.splits.get("test"), meta["labels"], meta["report"])
        report = {**meta["report"], "from_cache": True,
                  "prepare_time_s": round(time.perf_counter() - started, 3)}
        splits.report = report
        report["cache"] = str(cached.path)
        log.info("data from the cache (%s) in %.2fs", cached.path, report["prepare_time_s"])
        return PreparedData(splits, cached.encoded, source, facts, meta["max_length"], limit,
                            report, True, built_tokenizer=tokenizer)

    multi_label = (data.multi_label if isinstance(data, TextClassificationDataConfig)
                   else None)
    splits = load_splits(
        train=specs["train"] or "", validation=specs["validation"], test=specs["test"],
        text_column=data.text_column, label_column=data.label_column,
        validation_fraction=data.validation_fraction, max_train_samples=data.max_train_samples,
        max_eval_samples=data.max_eval_samples, on_bad_rows=data.on_bad_rows,
        seed=cfg.train.seed, group_column=data.group_column,
        on_unseen_labels=data.on_unseen_labels,
        checks=CheckPolicy(**data.checks.model_dump()), sources=files,
        label_cleanup=None if numeric_target else LabelCleanup.from_config(data),
        multi_label_separator=(multi_label.separator
                               if not numeric_target and multi_label else None),
        target_transform=target_keys(data).target_transform if numeric_target else None,
        target_outliers=target_keys(data).target_outliers if numeric_target else "keep",
        regression_task="text-regression", classification_task="text-classification")
    checked_s = time.perf_counter() - started
    if tokenizer is None:
        tokenizer = build_tokenizer(source)
    writer = cache.writer(key)
    try:
        encoded, mapped = {}, {}
        encode_start = time.perf_counter()
        for role, split in splits.roles():
            log.info("encoding %d %s texts", len(split), role)
            # One token over the limit marks the texts the model limit itself truncates.
            mapped[role], encoded[role] = writer.write_split(role, split, tokenizer, limit + 1)
        encode_s = time.perf_counter() - encode_start
        max_length = _max_length(cfg.model.max_length, encoded["train"], limit)
        report = splits.report
        _add_encoding(report, encoded, max_length, limit, cfg, sources["tokenizer"])
        report["fingerprint"] = key
        report["timings_s"] = {"read_and_check": round(checked_s, 3),
                               "encode": round(encode_s, 3)}
        path = writer.publish({"labels": splits.labels, "max_length": max_length,
                               "report": report})
    except BaseException:
        writer.abort()
        raise
    prepared_splits = LabelledSplits(mapped["train"], mapped["validation"], mapped.get("test"),
                                     splits.labels, report)
    report = {**report, "cache": str(path), "from_cache": False,
              "prepare_time_s": round(time.perf_counter() - started, 3)}
    prepared_splits.report = report
    log.info("data read, checked and encoded in %.1fs; cached in %s", report["prepare_time_s"],
             path)
    return PreparedData(prepared_splits, encoded, source, facts, max_length, limit, report,
                        False, built_tokenizer=tokenizer)


def _max_length(configured: str | int, train: EncodedTexts, limit: int) -> int:
    if configured == "auto":
        return choose_max_length(train.lengths(), limit)
    return min(int(configured), limit)


def _add_encoding(report: dict[str, Any], encoded: dict[str, EncodedTexts], max_length: int,
                  limit: int, cfg: TextTaskConfig, tokenizer: str) -> None:
    """Token lengths, truncation per split and the ``truncation`` check, into ``report``."""
    for role, enc in encoded.items():
        lengths = np.minimum(enc.lengths(), limit)  # limit + 1 marks "longer than the model"
        raw = enc.lengths()
        entry = report["splits"][role]
        entry["truncated_rows"] = int(np.sum(raw > max_length))
        entry["truncated_fraction"] = round(truncated_fraction(raw, max_length), 4)
        entry["token_length"] = ({"median": float(np.median(lengths)),
                                  "p95": float(np.quantile(lengths, 0.95)),
                                  "max": int(lengths.max())} if len(lengths) else {})
    source = "auto: 95th percentile of training lengths" if cfg.model.max_length == "auto" \
        else "model.max_length"
    report["encoding"] = {"tokenizer": tokenizer, "length_limit": limit,
                          "max_length": max_length, "max_length_from": source}
    checks = cfg.data.checks
    share = report["splits"]["train"]["truncated_fraction"]
    report["checks"].append(check_record(
        "truncation", share, checks.truncation,
        f"{share:.1%} of training texts are longer than max_length {max_length} tokens and get "
        f"cut (limit {checks.max_truncated_fraction:.0%})",
        failing=share > checks.max_truncated_fraction))
