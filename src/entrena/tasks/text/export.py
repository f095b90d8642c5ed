"""A text classifier's or regressor's bundle: the parity examples (the run's test texts or
``--parity-data``), and the export spec (model, tokenizer, manifest entries, card) that
:func:`entrena.exporting.sequence_bundle.write_sequence_input_bundle` exports, checks, times
and describes.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from entrena.core.files import dumps_strict
from entrena.data.labels import LabelCleanup
from entrena.data.sources import read_table, require_columns
from entrena.data.tables import empty_values
from entrena.data.text_fields import describe_text_columns, join_text_columns, text_columns
from entrena.errors import DataError
from entrena.exporting.bundle import META_FILE, ExportRequest, RunModel, parity_source
from entrena.exporting.checks import MAX_PARITY_EXAMPLES, label_index
from entrena.exporting.inference import TextEncoder, batch_inputs
from entrena.exporting.sequence_bundle import SequenceInputExport, write_sequence_input_bundle
from entrena.tasks.text.card import text_card

if TYPE_CHECKING:
    from torch import nn

__all__ = ["ParityExamples", "parity_examples", "write_bundle", "EXAMPLE_TEXTS"]

log = logging.getLogger("entrena")

EXAMPLE_TEXTS = ("A short example.",
                 "A longer example sentence, so that the traced batch holds some padding.")
"""Traced once to export: two lengths, so batch and sequence axes are not specialised."""


class ParityExamples:
    """Labelled texts for the parity check.

    Attributes:
        texts: The texts.
        labels: Label indices (N,), or ``None`` when the texts carry no labels.
        dataset: Where they come from (``test``, ``validation`` or a file path).
    """

    def __init__(self, texts: list[str], labels: np.ndarray | None, dataset: str):
        self.texts, self.labels, self.dataset = texts, labels, dataset


def parity_examples(run: RunModel, parity_data: str | Path | None,
                    limit: int | None = MAX_PARITY_EXAMPLES) -> ParityExamples:
    """Texts (and labels) to check parity on: the rows of ``parity_data``, else of the run's
    test file (its validation file, its training file when it had neither).

    Rows with an empty text are left out (as training leaves them out); rows whose label the
    model does not know are left out when the file has the label column; the first ``limit``
    rows in file order are kept.

    Raises:
        DataError: The file cannot be read or lacks the text column; the message suggests
            ``--parity-data``.
    """
    data = run.config.get("data", {})
    text_column, label_column = data.get("text_column", "text"), data.get("label_column", "label")
    labels = list(run.meta["labels"])
    path, dataset = parity_source(run, parity_data, "a file with the run's text column")
    try:
        frame = read_table(path, role="parity")
        names = text_columns(text_column)
        require_columns(frame, {("data.text_column" if len(names) == 1
                                 else f"data.text_column[{i}]"): c for i, c in enumerate(names)},
                        path=path, role="parity")
    except DataError as exc:
        hint = "" if parity_data is not None else (
            f"; the parity check reads the run's {dataset} file: pass --parity-data FILE (a "
            f"file with the {describe_text_columns(text_column)} column, and "
            f"{label_column!r} for accuracy)")
        raise DataError(f"{exc}{hint}") from None
    texts = join_text_columns(frame, text_column)
    keep = ~empty_values(texts).to_numpy()
    frame, texts = frame.loc[keep], texts.loc[keep]
    codes = None
    if run.meta.get("target"):  # a regressor: the true values (NaN where not a number)
        if label_column in frame.columns:
            codes = pd.to_numeric(frame[label_column], errors="coerce").to_numpy(np.float64)
    elif label_column in frame.columns and not run.meta.get("multi_label"):
        # (a multi-label model's parity is checked on its outputs alone)
        cleanup = LabelCleanup(dict(data.get("label_map") or {}), data.get("normalise_labels"))
        values = frame[label_column]
        if cleanup.active:  # the parity file's labels cleaned as training's were
            known = label_index(values, labels) >= 0
            values = [v if ok else cleanup.to_known([str(v).strip()], labels)[0]
                      for v, ok in zip(values, known, strict=True)]
        codes = label_index(values, labels)
        texts, codes = texts.loc[codes >= 0], codes[codes >= 0]
    if limit is not None and len(texts) > limit:
        texts = texts.iloc[:limit]
        codes = codes[:limit] if codes is not None else None
        dataset = f"{dataset} (first {limit} rows)"
    return ParityExamples([str(t) for t in texts], codes, dataset)


def write_bundle(run: RunModel, request: ExportRequest,
                 examples: ParityExamples) -> dict[str, Any]:
    """Export the run's model as ``request`` asks (into ``request.destination``) through
    :func:`~entrena.exporting.sequence_bundle.write_sequence_input_bundle` and return
    ``export.json``'s content. A regressor is exported answering in the target's units.

    Args:
        run: The finished run.
        request: Format, quantisation, opset, destination, parity thresholds, latency calls,
            threads.
        examples: Texts (and labels) for the parity check and the latency inputs.

    Raises:
        DataError: No non-empty text to check parity on.
        ConfigError: The installed exporter cannot write the opset.
    """
    import torch

    from entrena.tasks.text.model import load_classifier, model_length_limit

    if request.threads:
        torch.set_num_threads(request.threads)
    model, tokenizer, meta = load_classifier(run.paths.model)
    prep = run.preprocessing(model_length_limit(model.encoder.config, tokenizer))
    values = bool(meta.get("target"))  # a regressor: export it answering in target units
    network: nn.Module = model
    if values:
        from entrena.tasks.regression import TargetScaler
        from entrena.tasks.target_units import TokensInTargetUnits

        network = TokensInTargetUnits(model, TargetScaler.from_dict(meta["target"])).eval()
    encoder = TextEncoder(tokenizer, prep)
    if not examples.texts:
        raise DataError(f"no non-empty texts to check parity on ({examples.dataset}); pass "
                        "--parity-data FILE")

    def save_files(folder: Path) -> None:
        tokenizer.save_pretrained(folder)
        meta_out = {**meta, **prep.to_json(), "pad_token_id": encoder.pad_id}
        (folder / META_FILE).write_text(dumps_strict(meta_out, indent=2) + "\n",
                                        encoding="utf-8")

    spec = SequenceInputExport(
        model=network, encoded=encoder.encode(examples.texts), labels=examples.labels,
        dataset=examples.dataset, max_length=prep.max_length, length_limit=prep.length_limit,
        pad_id=encoder.pad_id,
        trace_example=batch_inputs(encoder.encode(EXAMPLE_TEXTS), [0, 1], prep.max_length,
                                   encoder.pad_id),
        save_files=save_files,
        manifest={"preprocessing": prep.to_json(), "inputs": {
            "input_ids": "int64 (batch, sequence)",
            "attention_mask": "int64 (batch, sequence), 1 = real token",
            "logits": "float32 (batch, 1): the predicted value in the target's units"
                      if values else "float32 (batch, classes), classes in "
                      "preprocessing.labels order"}},
        card=lambda m: text_card(run, m),
        pytorch_bytes=sum((run.paths.model / n).stat().st_size
                          for n in ("model.safetensors", "head.safetensors")),
        values=values)
    return write_sequence_input_bundle(run, spec, request)
