"""Texts to logits with any runner, preprocessed exactly as in training.

Training tokenizes each text once at the model's limit and cuts it to ``max_length`` keeping
the end marker (``data/encoding.py``), pads each batch to its longest member
(``data/batching.py: pad_batch``) and batches evaluation texts sorted by length. Prediction,
parity checks and latency figures all go through the same three functions here, whatever runs
the model (PyTorch, TorchScript, ONNX Runtime).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from entrena.data.batching import pad_batch, sequential_batches
from entrena.data.encoding import EncodedTexts, encode_texts
from entrena.exporting.bundle import Preprocessing

__all__ = ["Runner", "TorchRunner", "TextEncoder", "batch_inputs", "predict_logits", "softmax"]


class Runner(Protocol):
    """Runs a classifier on padded token ids.

    Attributes:
        name: What runs it (``pytorch``, ``torchscript``, ``torch.export``, ``onnxruntime``).
    """

    name: str

    def __call__(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        """Logits (B, C) for int64 ``input_ids`` and ``attention_mask`` of shape (B, T)."""
        ...


class TorchRunner:
    """A PyTorch module (eager, traced or ``torch.export``-ed) as a :class:`Runner`.

    Args:
        module: Maps its inputs (text: ``input_ids`` (B, T), ``attention_mask`` (B, T)) to
            logits (B, C).
        name: What the module is (``pytorch``, ``torchscript``, ``torch.export``).
    """

    def __init__(self, module: Any, name: str = "pytorch"):
        self.module = module
        self.name = name

    def __call__(self, *inputs: np.ndarray) -> np.ndarray:
        """Logits (B, C) for the module's inputs in ``forward`` order (text: ``input_ids``,
        ``attention_mask``; a table: ``features`` (B, F) float32)."""
        import torch

        with torch.inference_mode():
            logits = self.module(*(torch.from_numpy(x) for x in inputs))
        return logits.float().numpy()


class TextEncoder:
    """Texts to token ids, as training encodes them.

    Args:
        tokenizer: The run's (or bundle's) Hugging Face tokenizer.
        preprocessing: ``max_length`` and ``length_limit`` of the model.
    """

    def __init__(self, tokenizer: Any, preprocessing: Preprocessing):
        self.tokenizer = tokenizer
        self.max_length = preprocessing.max_length
        self.length_limit = preprocessing.length_limit
        self.pad_id = int(tokenizer.pad_token_id or 0)

    def encode(self, texts: Sequence[str]) -> EncodedTexts:
        """Token ids of ``texts`` at the model's limit (cut to ``max_length`` when batched)."""
        encoded, _ = encode_texts(list(texts), self.tokenizer, self.length_limit, cache_dir=None)
        return encoded


def batch_inputs(encoded: EncodedTexts, index: Sequence[int], max_length: int, pad_id: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """``(input_ids, attention_mask)`` of shape (B, T) for the texts at ``index``."""
    return pad_batch([encoded.get(i, max_length) for i in index], pad_id)


def predict_logits(runner: Runner, encoded: EncodedTexts, *, max_length: int, pad_id: int,
                   batch_size: int = 32, shapes: set[tuple[int, int]] | None = None
                   ) -> np.ndarray:
    """Logits of every text, in input order.

    Texts are batched sorted by length (least padding), as training evaluates them.

    Args:
        runner: What runs the model.
        encoded: The texts' token ids (N texts).
        max_length: Truncation length in tokens.
        pad_id: Padding id.
        batch_size: Texts per call.
        shapes: When given, every batch shape (B, T) run is added to it.

    Returns:
        Logits, (N, C) float32.
    """
    out: np.ndarray | None = None
    for index in sequential_batches(encoded.lengths(max_length), batch_size):
        ids, mask = batch_inputs(encoded, index, max_length, pad_id)
        logits = runner(ids, mask)
        if out is None:
            out = np.empty((len(encoded), logits.shape[1]), dtype=np.float32)
        out[index] = logits
        if shapes is not None:
            shapes.add(tuple(ids.shape))
    return out if out is not None else np.zeros((0, 0), dtype=np.float32)


def require_finite(logits: np.ndarray, *, model: Any, inputs: str,
                   first_row: int | None = None) -> np.ndarray:
    """``logits`` (B, C) unchanged when every value is finite.

    Args:
        model: The model's folder or file, for the message.
        inputs: What was fed to it (``"rows of new.csv"``, ``"the parity examples"``).
        first_row: The 1-based number of the first input, to name the rows.

    Raises:
        ModelError: Some logits are NaN or infinite: the weights are broken (a diverged run),
            so no label or probability of that model means anything.
    """
    bad = ~np.isfinite(logits).all(axis=1)
    if not bad.any():
        return logits
    from entrena.errors import ModelError

    rows = np.flatnonzero(bad)
    named = ""
    if first_row is not None:
        shown = ", ".join(str(int(r) + first_row) for r in rows[:10])
        named = f" ({shown}{' …' if len(rows) > 10 else ''})"
    kind = "NaN" if np.isnan(logits[bad]).any() else "infinite"
    raise ModelError(
        f"{model}: the model outputs {kind} values for {len(rows)} of {len(logits)} "
        f"{inputs}{named}, so its labels and probabilities mean nothing; its weights are "
        f"broken (a diverged run): train it again with a lower train.learning_rate "
        f"(entrena train CONFIG --restart)")


def softmax(logits: np.ndarray) -> np.ndarray:
    """Class probabilities from logits (B, C), rows summing to 1 (float64)."""
    shifted = logits.astype(np.float64) - logits.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=1, keepdims=True)


def batched_logits(runner: Runner, inputs: np.ndarray, batch_size: int = 32) -> np.ndarray:
    """Logits (N, C) of fixed-size inputs (N, ...) (table features (N, F), images
    (N, C, S, S)), ``batch_size`` examples a call."""
    parts = [runner(inputs[i:i + batch_size]) for i in range(0, len(inputs), batch_size)]
    return np.concatenate(parts) if parts else np.zeros((0, 0), dtype=np.float32)
