"""Text classification: a pretrained (or config-built) encoder, a pooling step and a linear head.

The saved model folder holds the fine-tuned encoder in Hugging Face format (``config.json`` +
``model.safetensors``, loadable with ``AutoModel.from_pretrained``), the tokenizer, the head
(``head.safetensors``) and ``entrena_model.json`` (labels, pooling, max_length);
:func:`load_classifier` rebuilds the whole classifier from it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from entrena.core.console import quiet_transformers

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = ["TextClassifier", "build_tokenizer", "build_classifier", "save_classifier",
           "load_classifier", "model_length_limit"]

HEAD_FILE = "head.safetensors"
META_FILE = "entrena_model.json"


class TextClassifier(nn.Module):
    """Encoder + pooling + dropout + linear head.

    Args:
        encoder: A Hugging Face encoder returning ``last_hidden_state`` of shape (B, T, H).
        num_labels: Number of classes C.
        pooling: ``"mean"`` (average of real tokens) or ``"cls"`` (first token).
        dropout: Dropout probability before the head.

    Attributes:
        checkpoint_attention_dropout: The attention dropout the encoder's checkpoint (or
            architecture) set before ``model.attention_dropout`` replaced it, or ``None`` if
            it was not replaced; :func:`save_classifier` writes it back into ``config.json``
            so a later fine-tune from the saved folder starts from the checkpoint's value.
    """

    checkpoint_attention_dropout: float | None = None
    encoder: PreTrainedModel
    head: nn.Linear

    def __init__(self, encoder: PreTrainedModel, num_labels: int, pooling: str = "mean",
                 dropout: float = 0.1):
        super().__init__()
        if pooling not in ("mean", "cls"):
            raise ValueError(f"pooling must be 'mean' or 'cls', got {pooling!r}")
        self.encoder = encoder
        self.pooling = pooling
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(encoder.config.hidden_size, num_labels)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Class logits.

        Args:
            input_ids: Token ids, (B, T).
            attention_mask: 1 for real tokens, 0 for padding, (B, T).

        Returns:
            Logits, (B, C).
        """
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        if self.pooling == "cls":
            pooled = hidden[:, 0]
        else:
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return self.head(self.dropout(pooled))


def build_tokenizer(source: str) -> Any:
    """Load a tokenizer from a model directory or hub id (fast tokenizer when available)."""
    from transformers import AutoTokenizer

    quiet_transformers()
    return AutoTokenizer.from_pretrained(source)


def model_length_limit(encoder_config: Any, tokenizer: Any) -> int:
    """Longest input the model accepts, in tokens (position embeddings and tokenizer limit)."""
    limit = int(getattr(encoder_config, "max_position_embeddings", 512) or 512)
    tokenizer_limit = getattr(tokenizer, "model_max_length", None)
    if isinstance(tokenizer_limit, int) and 0 < tokenizer_limit < limit:
        limit = tokenizer_limit
    return limit


def build_classifier(*, num_labels: int, pretrained: str | None,
                     architecture: dict[str, Any] | None, vocab_size: int, pad_token_id: int,
                     pooling: str, dropout: float,
                     attention_dropout: float | None = None) -> TextClassifier:
    """Build the classifier from pretrained weights or from an architecture.

    Args:
        num_labels: Number of classes.
        pretrained: Model directory or hub id to load the encoder from (ignored when
            ``architecture`` is given).
        architecture: BERT shape (``num_hidden_layers``, ``hidden_size``, …) to build with random
            weights.
        vocab_size: Tokenizer vocabulary size (for a built encoder).
        pad_token_id: Padding id (for a built encoder).
        pooling: ``"mean"`` or ``"cls"``.
        dropout: Head dropout.
        attention_dropout: Dropout on the attention probabilities, or ``None`` for the
            checkpoint's own value (:func:`set_attention_dropout`).
    """
    from transformers import AutoModel

    quiet_transformers()
    config, original = _encoder_config(pretrained, architecture, vocab_size, pad_token_id,
                                       attention_dropout)
    if architecture is not None:
        encoder = AutoModel.from_config(config, add_pooling_layer=False)
    else:
        encoder = AutoModel.from_pretrained(pretrained, config=config, add_pooling_layer=False)
    classifier = TextClassifier(encoder, num_labels, pooling=pooling, dropout=dropout)
    if attention_dropout is not None:
        classifier.checkpoint_attention_dropout = original
    return classifier


ATTENTION_DROPOUT_KEYS = ("attention_probs_dropout_prob", "attention_dropout")
"""Where Hugging Face encoder configs keep the attention dropout (BERT, RoBERTa, MiniLM,
DeBERTa, ELECTRA: the first; DistilBERT and decoder models: the second)."""


def attention_dropout_of(config: Any) -> float | None:
    """The attention dropout a Hugging Face model config sets, or ``None`` if it names none."""
    for key in ATTENTION_DROPOUT_KEYS:
        value = getattr(config, key, None)
        if isinstance(value, int | float):
            return float(value)
    return None


def set_attention_dropout(config: Any, value: float) -> None:
    """Set the attention dropout of a Hugging Face model config (every key of
    :data:`ATTENTION_DROPOUT_KEYS` it has) to ``value`` (a probability in [0, 1))."""
    for key in ATTENTION_DROPOUT_KEYS:
        if isinstance(getattr(config, key, None), int | float):
            setattr(config, key, float(value))


def _encoder_config(pretrained: str | None, architecture: dict[str, Any] | None,
                    vocab_size: int, pad_token_id: int,
                    attention_dropout: float | None = None) -> tuple[Any, float | None]:
    """The encoder's Hugging Face config with ``attention_dropout`` set (unless ``None``),
    and the attention dropout it had before."""
    from transformers import AutoConfig, BertConfig

    if architecture is not None:
        config = BertConfig(vocab_size=vocab_size, pad_token_id=pad_token_id, **architecture)
    elif pretrained is not None:
        config = AutoConfig.from_pretrained(pretrained)
    else:
        raise ValueError("a text encoder needs pretrained weights or an architecture")
    original = attention_dropout_of(config)
    if attention_dropout is not None:
        set_attention_dropout(config, attention_dropout)
    return config, original


def meta_classifier(*, num_labels: int, pretrained: str | None,
                    architecture: dict[str, Any] | None, vocab_size: int, pad_token_id: int,
                    pooling: str = "mean", dropout: float = 0.1,
                    attention_dropout: float | None = None) -> Any:
    """The text classifier with every tensor on the meta device (no weights read).

    Args:
        num_labels: Number of classes C.
        pretrained: Model directory or hub id whose ``config.json`` gives the shape (only the
            config is read), unless ``architecture`` is given.
        architecture: A BERT shape (``num_hidden_layers``, ``hidden_size`` …).
        vocab_size: Tokenizer vocabulary size (for ``architecture``).
        pad_token_id: Padding id (for ``architecture``).
        pooling: ``"mean"`` or ``"cls"``.
        dropout: Head dropout.
        attention_dropout: As :func:`build_classifier`'s.

    Returns:
        A :class:`~entrena.tasks.text.model.TextClassifier` on ``meta``, in
        train mode.
    """
    from transformers import AutoModel

    quiet_transformers()
    config, _ = _encoder_config(pretrained, architecture, vocab_size, pad_token_id,
                                attention_dropout)
    with torch.device("meta"):
        encoder = AutoModel.from_config(config, add_pooling_layer=False)
        model = TextClassifier(encoder, num_labels, pooling=pooling, dropout=dropout)
    return model.train()


def save_classifier(model: TextClassifier, tokenizer: Any, directory: Path, *, labels: list[str],
                    max_length: int, multi_label: dict[str, Any] | None = None,
                    task: str = "text-classification",
                    extra: dict[str, Any] | None = None) -> None:
    """Write the model folder (encoder, tokenizer, head, labels). Overwrites ``directory``.

    Args:
        labels: The outputs' names: classes, or a multi-label model's tags (empty for a
            regressor's single output).
        multi_label: ``{"separator", "thresholds"}`` of a multi-label model (sigmoid
            outputs, one threshold per tag), written into ``entrena_model.json``.
        task: The task recorded in ``entrena_model.json``.
        extra: More entries for ``entrena_model.json`` (a regressor's ``target`` scaling).
    """
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    encoder = model.encoder
    if labels:
        encoder.config.id2label = dict(enumerate(labels))
        encoder.config.label2id = {name: i for i, name in enumerate(labels)}
    used = attention_dropout_of(encoder.config)
    original = getattr(model, "checkpoint_attention_dropout", None)
    if original is not None:  # the checkpoint's value, not the one this run trained with
        set_attention_dropout(encoder.config, original)
    try:
        encoder.save_pretrained(directory, safe_serialization=True)
    finally:
        if original is not None and used is not None:
            set_attention_dropout(encoder.config, used)
    _deterministic_tokenizer(tokenizer, max_length).save_pretrained(directory)
    head = {k: v.detach().cpu().contiguous() for k, v in model.head.state_dict().items()}
    save_file(head, str(directory / HEAD_FILE))
    meta = {"task": task, "labels": labels, "outputs": model.head.out_features,
            "pooling": model.pooling, "max_length": max_length, "dropout": model.dropout.p,
            **({"multi_label": multi_label} if multi_label else {}), **(extra or {})}
    (directory / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")


def _deterministic_tokenizer(tokenizer: Any, max_length: int) -> Any:
    """A copy whose saved ``tokenizer.json`` does not depend on earlier calls.

    A fast tokenizer stores the truncation and padding of its latest call in its backend,
    and ``save_pretrained`` writes them out; two identical runs (one tokenizing, one reading
    the encoding cache) would save different bytes. The copy truncates at ``max_length``
    and does not pad.
    """
    import copy

    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return tokenizer
    tokenizer = copy.deepcopy(tokenizer)
    backend = tokenizer.backend_tokenizer
    backend.no_padding()
    backend.enable_truncation(max_length)
    return tokenizer


def load_classifier(directory: str | Path) -> tuple[TextClassifier, Any, dict[str, Any]]:
    """Rebuild a saved classifier.

    Returns:
        ``(model in eval mode, tokenizer, metadata)``; metadata has ``labels`` and ``max_length``.
    """
    from safetensors.torch import load_file
    from transformers import AutoModel

    quiet_transformers()
    directory = Path(directory)
    meta = json.loads((directory / META_FILE).read_text())
    encoder = AutoModel.from_pretrained(directory, add_pooling_layer=False)
    model = TextClassifier(encoder, int(meta.get("outputs", len(meta["labels"]))), meta["pooling"],
                           meta.get("dropout", 0.1))
    model.head.load_state_dict(load_file(str(directory / HEAD_FILE)))
    model.eval()
    return model, build_tokenizer(str(directory)), meta
