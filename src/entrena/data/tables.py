"""From configured data to clean, labelled splits: open, read, then check and split.

1. open each split's files (:func:`open_sources`: resolve, download, hash, sniff; a validation
   or test file that is the training file is refused);
2. read them, skipping rows with an empty text or label (:mod:`.reading`);
3. check and split them (:func:`check_and_split`: the pipeline of :mod:`.splitting` with the
   class-label policy of :mod:`.classes`; a number to predict goes to
   :func:`~entrena.data.targets.check_and_split_targets` instead).

Validation and test rows are never dropped for hygiene, so that their scores stay comparable
with other runs on the same files; what they hold is counted in the report.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from entrena.data import checks as ck
from entrena.data import hygiene as hy
from entrena.data.classes import ClassStrata
from entrena.data.labels import LabelCleanup
from entrena.data.reading import RawSplit, empty_values, read_split
from entrena.data.remote import default_cache_dir
from entrena.data.sources import SourceFile, open_source
from entrena.data.splits import LabelledSplits
from entrena.data.splitting import SplitOptions, check_and_split_rows
from entrena.data.targets import check_and_split_targets
from entrena.data.text_fields import describe_text_columns
from entrena.errors import DataError

__all__ = ["load_splits", "check_and_split", "open_sources", "open_config_sources",
           "split_specs", "empty_values"]

JOINED_LABEL_MARK = "|"
"""A text label holding this looks like several tags joined (``billing|technical``): the
``joined_labels`` check names ``data.multi_label``."""

ROLES = ck.ROLES


def open_sources(*, train: str, validation: str | None, test: str | None,
                 encoding: str = "auto", delimiter: str = "auto",
                 cache_dir: Path | None = None) -> dict[str, list[SourceFile]]:
    """Resolve, download, hash and sniff the files of each split (see
    :func:`~entrena.data.sources.open_source`).

    Raises:
        DataError: ``train`` is empty, or a file cannot be opened.
    """
    if not train or not str(train).strip():
        raise DataError("data.train is empty; set it to the training data (a CSV, TSV, JSONL "
                        "or Parquet file, a glob pattern or a URL)")
    specs = {"train": train, "validation": validation, "test": test}
    opened = {role: open_source(spec, key=f"data.{role}", cache_dir=cache_dir,
                                encoding=encoding, delimiter=delimiter)
              for role, spec in specs.items() if spec is not None}
    _refuse_training_copies(opened, specs)
    return opened


def _refuse_training_copies(opened: dict[str, list[SourceFile]],
                            specs: dict[str, str | None]) -> None:
    """Refuse a validation or test split whose files are the training files (the same path,
    or the same bytes): the leakage check would drop every training row and name a count,
    not the mistake.

    Raises:
        DataError: Names the key, the file and what to do instead.
    """
    train = {f.scan.sha256 for f in opened["train"]}
    for role in ("validation", "test"):
        files = opened.get(role)
        if not files or not {f.scan.sha256 for f in files} <= train:
            continue
        same = "the same file as" if all(
            f.path.resolve() in {t.path.resolve() for t in opened["train"]} for f in files) \
            else "a byte-for-byte copy of"
        instead = ("or leave it out (validation is then split off the training data)"
                   if role == "validation" else "or leave it out (no test scores)")
        raise DataError(f"data.{role}: {specs[role]} is {same} data.train ({specs['train']}): "
                        f"every {role} row is a training row, so its scores would mean "
                        f"nothing; point data.{role} at held-out data, {instead}")


def split_specs(loaded: Any) -> dict[str, str | None]:
    """``data.train``, ``data.validation`` and ``data.test`` of a loaded config, resolved
    against the config's folder (``None`` for an absent split)."""
    data = loaded.config.data
    return {role: loaded.resolve_path(getattr(data, role)) if getattr(data, role) else None
            for role in ("train", "validation", "test")}


def open_config_sources(loaded: Any) -> tuple[dict[str, str | None],
                                              dict[str, list[SourceFile]], Path]:
    """The resolved split paths, their opened files (:func:`open_sources` with the config's
    encoding and delimiter) and the prepared-data cache folder of a loaded config.

    Raises:
        DataError: ``data.train`` is empty, or a file cannot be opened.
    """
    data = loaded.config.data
    cache_root = default_cache_dir(loaded.resolve_path(data.cache_dir) if data.cache_dir
                                   else None)
    specs = split_specs(loaded)
    files = open_sources(**specs, encoding=data.encoding, delimiter=data.delimiter,
                         cache_dir=cache_root)
    return specs, files, cache_root


def load_splits(*, train: str, validation: str | None, test: str | None,
                text_column: str | Sequence[str], label_column: str,
                validation_fraction: float, max_train_samples: int | None,
                max_eval_samples: int | None, on_bad_rows: str, seed: int,
                group_column: str | None = None, on_unseen_labels: str = "error",
                checks: hy.CheckPolicy | None = None, encoding: str = "auto",
                delimiter: str = "auto", cache_dir: Path | None = None,
                sources: dict[str, list[SourceFile]] | None = None,
                label_cleanup: LabelCleanup | None = None,
                multi_label_separator: str | None = None,
                target_transform: str | None = None,
                target_outliers: str = "keep",
                regression_task: str = "",
                classification_task: str = "") -> LabelledSplits:
    """Read the configured data into checked, labelled splits.

    Args:
        train, validation, test: Path, glob pattern or URL of each split (``None``: absent).
        text_column: One column, or several joined into one text per row
            (:func:`~entrena.data.text_fields.join_text_columns`).
        label_cleanup: ``data.label_map`` / ``data.normalise_labels``
            (:class:`~entrena.data.labels.LabelCleanup`).
        multi_label_separator: ``data.multi_label.separator`` (see :func:`check_and_split`).
        checks: What the hygiene checks drop (default :class:`~.hygiene.CheckPolicy()`).
        sources: The splits' files, already opened by :func:`open_sources`.
        target_transform: Not ``None``: the label is a number to predict, checked by
            :func:`entrena.data.targets.check_and_split_targets` with this transform
            (``none`` or ``log``); the splits' ``labels`` are float64 targets.
        target_outliers: ``data.target_outliers`` of a number to predict (``keep``,
            ``drop``, ``clip``).
        regression_task: Named when the label column looks like numbers to predict.
        classification_task: Named when a numeric target has two values (a class).

    Returns:
        The splits; ``report`` holds per-split counts (``rows_read``, ``rows_kept``,
        ``exact_duplicates``, ``leaked_rows`` …) and the ``checks`` records. Checks that fail
        (``error``) are recorded, not raised: the caller writes the report first.

    Raises:
        DataError: A file is missing or unreadable, a column is missing, labels mix numbers
            and strings, bad rows under ``on_bad_rows="error"``, fewer than 2 classes, no
            usable rows, a validation split that cannot hold every class, or a label unseen
            in training under ``on_unseen_labels="error"``.
    """
    policy = checks or hy.CheckPolicy()
    specs = {"train": train, "validation": validation, "test": test}
    if sources is None:
        sources = open_sources(train=train, validation=validation, test=test,
                               encoding=encoding, delimiter=delimiter, cache_dir=cache_dir)
    raw = {role: read_split(role, specs[role], sources[role], text_column=text_column,
                            label_column=label_column,
                            group_column=group_column if role == "train" else None,
                            on_bad_rows=on_bad_rows, label_separator=multi_label_separator,
                            numeric_label=target_transform is not None)
           for role in ROLES if specs[role] is not None}
    if target_transform is not None:
        return check_and_split_targets(
            raw, specs, label_column=label_column, validation_fraction=validation_fraction,
            max_train_samples=max_train_samples, max_eval_samples=max_eval_samples, seed=seed,
            group_column=group_column, policy=policy, target_transform=target_transform,
            target_outliers=target_outliers,
            empty_what=f"an empty {describe_text_columns(text_column)}",
            classification_task=classification_task)
    splits = check_and_split(
        raw, specs, label_column=label_column, validation_fraction=validation_fraction,
        max_train_samples=max_train_samples, max_eval_samples=max_eval_samples, seed=seed,
        group_column=group_column, on_unseen_labels=on_unseen_labels, policy=policy,
        empty_what=f"an empty {describe_text_columns(text_column)}",
        label_cleanup=label_cleanup, multi_label_separator=multi_label_separator,
        regression_task=regression_task)
    if multi_label_separator is None:
        joined = [n for n in splits.labels if JOINED_LABEL_MARK in n]
        shown = ", ".join(map(repr, joined[:3])) + (" …" if len(joined) > 3 else "")
        splits.report["checks"].append(hy.check_record(
            "joined_labels", len(joined), "warn",
            f"{len(joined)} label(s) look like several tags joined by "
            f"{JOINED_LABEL_MARK!r} ({shown}), so each combination is a class of its own; "
            f"set data.multi_label: {{separator: {JOINED_LABEL_MARK!r}}} to train one output "
            "per tag"))
    return splits


def check_and_split(raw: dict[str, RawSplit], specs: dict[str, str | None], *,
                    label_column: str, validation_fraction: float,
                    max_train_samples: int | None, max_eval_samples: int | None, seed: int,
                    group_column: str | None, on_unseen_labels: str, policy: hy.CheckPolicy,
                    normalise: bool = True, empty_what: str = "an empty text",
                    check_keys: str = "data.text_column and data.label_column",
                    terms: ck.Terms = ck.TEXT,
                    label_cleanup: LabelCleanup | None = None,
                    multi_label_separator: str | None = None,
                    regression_task: str = "") -> LabelledSplits:
    """The class-label checks and split of every task (texts, table rows, image files) on
    splits already read: :func:`~entrena.data.splitting.check_and_split_rows` with a
    :class:`~entrena.data.classes.ClassStrata`.

    Args:
        raw: The splits as read (``train`` always; ``validation``, ``test`` when given).
            ``texts`` holds each row's key: its text, a table row as a key string, an image
            file's SHA-256.
        specs: Path, pattern or URL of each split, for messages and the report.
        normalise, empty_what, check_keys, terms: As
            :class:`~entrena.data.splitting.SplitOptions`.
        on_unseen_labels, label_cleanup, regression_task: As
            :class:`~entrena.data.classes.ClassStrata`.
        multi_label_separator: ``data.multi_label.separator``: a label is a set of tags
            (:attr:`ClassStrata.separator <entrena.data.classes.ClassStrata.separator>`).

    Raises:
        DataError: As :func:`load_splits`, after reading.
    """
    opts = SplitOptions(label_column=label_column, validation_fraction=validation_fraction,
                        max_train_samples=max_train_samples, max_eval_samples=max_eval_samples,
                        seed=seed, group_column=group_column, policy=policy,
                        normalise=normalise, empty_what=empty_what, check_keys=check_keys,
                        terms=terms)
    strata = ClassStrata(on_unseen_labels=on_unseen_labels, label_cleanup=label_cleanup,
                         separator=multi_label_separator, regression_task=regression_task)
    return check_and_split_rows(raw, specs, strata, opts)
