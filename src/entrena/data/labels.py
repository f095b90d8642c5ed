"""Label clean-up before the label map is built: ``data.label_map`` and
``data.normalise_labels``.

Exports from help-desk tools and spreadsheets spell one class several ways (``Billing``,
``billing``, ``billing `` …) or use an old name beside a new one. Two config keys merge them,
in this order, on every split (so validation and test labels are cleaned as training's are):

1. ``data.label_map: {from: to}`` renames labels exactly as written (after the reader's
   canonical form: stripped, ``1.0`` → ``1``); several ``from`` may share one ``to``;
2. ``data.normalise_labels: case_and_space`` merges labels equal once lower-cased with
   whitespace collapsed; each merged class takes its most frequent training spelling (ties:
   the first in sorted order).

The class names after the clean-up are the model's labels (``metrics.json`` ``data.labels``);
what was merged is in ``data_report.json`` under ``label_cleanup``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from entrena.errors import DataError

__all__ = ["LabelCleanup", "fold_label", "refuse_empty_tag_sets", "spelling_twins",
           "split_tags", "tag_matrix"]


def split_tags(name: str, separator: str) -> list[str]:
    """The tags of a multi-label cell (``"billing| technical"`` → ``["billing",
    "technical"]``): split, stripped, empty parts dropped, in order of appearance."""
    return list(dict.fromkeys(t.strip() for t in name.split(separator) if t.strip()))


def tag_matrix(combinations: Sequence[str], tags: Sequence[str], separator: str
               ) -> np.ndarray:
    """Multi-hot rows (C, K) float32 of label combinations (``"a|b"``) over ``tags`` (K);
    a tag not in ``tags`` is left out."""
    index = {t: j for j, t in enumerate(tags)}
    out = np.zeros((len(combinations), len(tags)), dtype=np.float32)
    for i, combination in enumerate(combinations):
        for tag in split_tags(combination, separator):
            if tag in index:
                out[i, index[tag]] = 1.0
    return out


def fold_label(name: str) -> str:
    """The ``case_and_space`` key of a label: lower-cased (``casefold``), whitespace collapsed."""
    return " ".join(name.casefold().split())


def spelling_twins(names: Sequence[str]) -> list[list[str]]:
    """Groups of labels that differ only in case or spacing (each group in the given order)."""
    folded: dict[str, list[str]] = {}
    for name in names:
        folded.setdefault(fold_label(name), []).append(name)
    return [group for group in folded.values() if len(group) > 1]


@dataclass(frozen=True)
class LabelCleanup:
    """What ``data.label_map`` and ``data.normalise_labels`` do to class names.

    Attributes:
        label_map: ``{from: to}`` exact renames, applied first.
        normalise: ``"case_and_space"`` or ``None``.
    """

    label_map: Mapping[str, str] = field(default_factory=dict)
    normalise: str | None = None

    @classmethod
    def from_config(cls, data: Any) -> LabelCleanup:
        """From a ``data`` config section (absent keys: no clean-up)."""
        return cls(dict(getattr(data, "label_map", None) or {}),
                   getattr(data, "normalise_labels", None))

    @property
    def active(self) -> bool:
        return bool(self.label_map) or self.normalise is not None

    def renames(self, counts: Mapping[str, int], others: Sequence[str] = ()
                ) -> dict[str, str]:
        """``{name as written: clean name}`` for every name.

        Args:
            counts: Training labels as written → rows (the spelling a merged class takes).
            others: Labels of the other splits (cleaned the same way; a spelling they alone
                use wins only where training has none).
        """
        mapped = {name: self.label_map.get(name, name) for name in [*counts, *others]}
        if self.normalise != "case_and_space":
            return mapped
        totals: dict[str, int] = {}
        for name, n in counts.items():
            totals[mapped[name]] = totals.get(mapped[name], 0) + int(n)
        spelling: dict[str, str] = {}
        for clean in sorted(set(mapped.values())):
            key = fold_label(clean)
            best = spelling.get(key)
            if best is None or totals.get(clean, 0) > totals.get(best, 0):
                spelling[key] = clean
        return {name: spelling[fold_label(clean)] for name, clean in mapped.items()}

    def to_known(self, names: Sequence[str], known: Sequence[str]) -> list[str]:
        """Clean ``names`` (labels of new data) towards a trained model's ``known`` labels:
        the map, then (with ``case_and_space``) the known label of the same folded key."""
        by_key = {fold_label(k): k for k in known}
        out = []
        for name in names:
            clean = self.label_map.get(name, name)
            if self.normalise == "case_and_space" and clean not in known:
                clean = by_key.get(fold_label(clean), clean)
            out.append(clean)
        return out

    def apply(self, raw: Mapping[str, Any], separator: str | None = None) -> dict[str, Any]:
        """Rename the labels of splits as read (:class:`~entrena.data.reading.RawSplit`:
        ``label_names``, ``label_codes``), in place, merging classes.

        With ``separator`` (``data.multi_label``) a label is a set of tags: each tag is
        cleaned, and the set is written back sorted and deduplicated (``"b|a|a"`` →
        ``"a|b"``), so that one set is one name however the file orders it.

        Returns:
            The report: ``label_map`` (the setting), ``normalise_labels``, ``merged``
            (``{clean name: [names as written …]}`` where more than one name became one, or a
            name changed), ``rows_relabelled`` per split, ``unused_map_keys`` (``from`` names
            that occur in no split).
        """
        train = raw["train"]
        counts = dict(zip(train.label_names,
                          np.bincount(train.label_codes, minlength=len(train.label_names))
                          .tolist(), strict=True))
        others = [n for role, split in raw.items() if role != "train"
                  for n in split.label_names]
        if separator is not None:  # count and clean tags, not sets
            tag_counts: dict[str, int] = {}
            for name, n in counts.items():
                for tag in split_tags(name, separator):
                    tag_counts[tag] = tag_counts.get(tag, 0) + n
            tag_renames = self.renames(tag_counts, [t for n in others
                                                    for t in split_tags(n, separator)])
            renames = {name: separator.join(sorted({tag_renames[t] for t in
                                                    split_tags(name, separator)}))
                       for name in [*counts, *others]}
            written = set(tag_renames)
            changes = tag_renames
        else:
            renames = self.renames(counts, others)
            written = set(renames)
            changes = renames
        relabelled: dict[str, int] = {}
        for role, split in raw.items():
            clean = [renames[n] for n in split.label_names]
            names = list(dict.fromkeys(clean))
            index = {name: i for i, name in enumerate(names)}
            recode = np.array([index[c] for c in clean], dtype=np.int64)
            changed = np.array([c != n for c, n in zip(clean, split.label_names, strict=True)],
                               dtype=bool)
            relabelled[role] = int(changed[split.label_codes].sum()) if len(changed) else 0
            split.label_codes = recode[split.label_codes] if len(recode) else split.label_codes
            split.label_names = names
        merged: dict[str, list[str]] = {}
        for name, clean in changes.items():
            if name != clean:
                merged.setdefault(clean, [clean] if clean in changes else [])
                merged[clean].append(name)
        return {"label_map": dict(self.label_map), "normalise_labels": self.normalise,
                "merged": {k: sorted(set(v)) for k, v in sorted(merged.items())},
                "rows_relabelled": relabelled,
                "unused_map_keys": sorted(k for k in self.label_map if k not in written)}


def refuse_empty_tag_sets(raw: Mapping[str, Any], label_column: str, sep: str) -> None:
    """A multi-label cell holding only separators (``"|"``) names no tag (splits as read:
    :class:`~entrena.data.reading.RawSplit`).

    Raises:
        DataError: Names the split's file, the rows and the fix.
    """
    for split in raw.values():
        empty = [i for i, name in enumerate(split.label_names) if not split_tags(name, sep)]
        if not empty:
            continue
        rows = split.rows[np.isin(split.label_codes, empty)].tolist()
        raise DataError(f"{split.spec}: {label_column!r} names no tag in {split.role} rows "
                        f"{', '.join(map(str, rows[:10]))}{' …' if len(rows) > 10 else ''} "
                        f"(only the separator {sep!r}); give each row at least one tag, or "
                        "remove those rows")
