"""The config of ``task: text-classification``: the common sections plus its own keys.

Pydantic only (no torch): the registry imports it when a config is loaded.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from entrena.config.schema import Config, DataConfig, ModelConfig, StrictModel

__all__ = ["ArchitectureConfig", "MultiLabelConfig", "TextDataConfig",
           "TextClassificationDataConfig", "TextModelConfig", "TextTaskConfig",
           "TextClassificationConfig", "resolve_attention_dropout"]


class MultiLabelConfig(StrictModel):
    """Each row's label is a set of tags (`billing|technical`): one sigmoid output per tag."""

    separator: Annotated[str, Field(min_length=1)] = "|"
    """What joins the tags in the label column (`billing|technical`); spaces around tags are
    ignored, and so is their order."""


class TextDataConfig(DataConfig):
    """Where the texts come from, which columns hold what, and how the data is checked."""

    text_column: str | list[str] = "text"
    """Column holding the input text, or a list of columns (`[subject, description]`) joined
    into one text per row: each non-empty field after its column name, one per line
    (`subject: …` newline `description: …`); a row whose fields are all empty is an empty
    text. `entrena predict` and `entrena export` join them the same way."""
    pad_to_multiple_of: Annotated[int, Field(ge=1)] = 16
    """Batches (training and evaluation) are padded to their longest text rounded up to a
    multiple of this many tokens, at most `max_length`; 1 pads to the longest only. The
    padded slots are masked: the logits, the loss and the gradients are unchanged (tested).
    Few batch widths keep a CPU fit faster and its memory lower (each new width leaves the C
    allocator's heap larger and meets uncached kernels): the demo (`make demo`, Intel Xeon
    with AMX, bf16, seeds 42 and 43) trained in 329/337 s of steps with 16 and 348/349 s
    with 32 against 481/398 s with 1, peaking at 3.47/3.63, 3.20/3.22 and 5.53/5.54 GiB,
    test accuracy 0.870/0.854, 0.852/0.849 and 0.858/0.857; on an AMD EPYC with AVX-512
    BF16, 247/249 s with 16, 261/266 s with 32 and 257/267 s with 1, peaking at 3.16/3.37,
    3.03/3.13 and 4.83/4.87 GiB (docs/benchmarks.md, "Padding batches to a multiple")."""

    @field_validator("text_column")
    @classmethod
    def _columns(cls, value: str | list[str]) -> str | list[str]:
        if isinstance(value, str):
            return value
        if not value:
            raise ValueError("an empty list; name one text column or several")
        blank = [c for c in value if not c.strip()]
        if blank:
            raise ValueError("a column name is empty; name each text column")
        repeated = sorted({c for c in value if value.count(c) > 1})
        if repeated:
            raise ValueError(f"names {', '.join(map(repr, repeated))} more than once; list each "
                             "text column once")
        return value[0] if len(value) == 1 else value


class TextClassificationDataConfig(TextDataConfig):
    """Where the texts come from, which columns hold what, and how the data is checked."""

    multi_label: MultiLabelConfig | None = None
    """Train a multi-label classifier: the label column holds tags joined by
    `multi_label.separator` (`{separator: "|"}`; in JSONL also a JSON list of tags), the
    model has one sigmoid output per tag,
    each tag's threshold is tuned on validation (the F1 of that tag, from 0.05 to 0.95),
    and the scores are micro-F1, macro-F1 (over tags) and subset accuracy (`accuracy`: the
    whole set right). `label_map` and `normalise_labels` clean each tag. Predict and export
    return the set (tags joined by the separator) and each tag's probability. `null`: one
    class per row (a `|` in labels is warned about by the `joined_labels` check)."""


class ArchitectureConfig(StrictModel):
    """A BERT-style encoder built from a config (random weights) instead of loaded weights."""

    num_hidden_layers: Annotated[int, Field(ge=1)] = 2
    """Number of transformer layers."""
    hidden_size: Annotated[int, Field(ge=1)] = 32
    """Width of the hidden states; must be a multiple of `num_attention_heads`."""
    num_attention_heads: Annotated[int, Field(ge=1)] = 2
    """Number of attention heads per layer."""
    intermediate_size: Annotated[int, Field(ge=1)] = 64
    """Width of the feed-forward layer."""
    max_position_embeddings: Annotated[int, Field(ge=8)] = 512
    """Longest sequence the position embeddings cover (tokens)."""

    @model_validator(mode="after")
    def _heads_divide_width(self) -> ArchitectureConfig:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be a multiple of num_attention_heads "
                f"({self.num_attention_heads})"
            )
        return self


class TextModelConfig(ModelConfig):
    """The text encoder to fine-tune and how texts are cut."""

    name: str | None = "minilm-l6"
    """A model alias (`minilm-l6`), a local Hugging Face model directory, or a hub id
    (`org/name`, or a canonical id without an org such as `bert-base-uncased`; needs
    internet unless in the Hugging Face cache; no network is exit 2 at once). With
    `architecture` set, only its tokenizer is used (unless `tokenizer` is set)."""
    architecture: ArchitectureConfig | None = None
    """Build a randomly initialised BERT encoder of this shape instead of loading weights."""
    tokenizer: str | None = None
    """Tokenizer to use with `architecture` (an alias or directory); defaults to `name`'s."""
    max_length: Literal["auto"] | Annotated[int, Field(ge=8)] = "auto"
    """Longest input in tokens; longer texts are truncated. `auto` takes the 95th percentile
    of the training texts' token lengths, rounded up to a multiple of 8 and capped by the
    model; the choice is reported."""
    pooling: Literal["mean", "cls"] = "mean"
    """How token states become one vector: `mean` over real tokens (what sentence encoders such
    as MiniLM were trained with) or the first (`[CLS]`) token."""
    attention_dropout: Literal["auto"] | Annotated[float, Field(ge=0.0, lt=1.0)] = "auto"
    """Dropout on the encoder's attention probabilities. `auto`: 0 when training on a CPU,
    the checkpoint's own value (MiniLM, BERT: 0.1) elsewhere. On a CPU, PyTorch's fused
    attention kernel has no dropout, so any value above 0 sends every layer through the
    unfused path that builds the (B, heads, T, T) probabilities and draws a mask over them:
    the reviews demo's steps took 1.52x as long with 0.1, for the same test accuracy within
    noise (AMD EPYC, 3 seeds: docs/benchmarks.md, bench:attention-dropout). On a GPU the
    fused kernels apply dropout themselves. A number sets it on every device."""
    attn_implementation: Literal["auto", "sdpa", "eager"] = "auto"
    """The encoder's attention kernel (transformers' name). `sdpa`: PyTorch's fused
    scaled-dot-product attention (transformers' default); `eager`: the unfused products
    (`QKᵀ`, softmax, `·V`), which keep the (B, heads, T, T) probabilities for the backward
    pass. `auto`: on a CPU, training batches up to the length where the unfused products
    were measured clearly faster on this machine (forward + backward, the run's head shape
    and dtype; measured once, cached) take them, longer batches and every pass without
    gradients `sdpa`; off a CPU, `sdpa`. On the reviews demo in bf16 (Intel Xeon with AMX)
    the fused kernel's forward + backward cost 3.8-6.2x the unfused products' at 32-128
    tokens
    (docs/benchmarks.md, bench:attention-kernel). Saved models load with transformers'
    default."""

    @model_validator(mode="after")
    def _name_or_architecture(self) -> TextModelConfig:
        if self.architecture is None and not self.name:
            raise ValueError("set model.name (an alias or a model directory) or model.architecture")
        return self


class TextTaskConfig(Config):
    """What every text task's config has, which the text data path, model and planning read:
    the text data and encoder sections (``text-classification`` and ``text-regression``
    derive their configs from it)."""

    data: TextDataConfig
    """Data section."""
    model: TextModelConfig = TextModelConfig()
    """Model section."""


class TextClassificationConfig(TextTaskConfig):
    """A text-classification run: a pretrained encoder (or a built one) with a linear head."""

    task: Literal["text-classification"] = "text-classification"
    """Classify a text column."""
    data: TextClassificationDataConfig
    """Data section."""
    model: TextModelConfig = TextModelConfig()
    """Model section."""


def resolve_attention_dropout(cfg: TextTaskConfig) -> float | None:
    """``model.attention_dropout`` as a number, or ``None`` for the checkpoint's own value
    (``auto`` off a CPU).

    Raises:
        ResourceError: ``train.accelerator`` names a device that is not available.
    """
    from entrena.hardware.detection import resolve_accelerator

    value = cfg.model.attention_dropout
    if value != "auto":
        return float(value)
    return 0.0 if resolve_accelerator(cfg.train.accelerator) == "cpu" else None
