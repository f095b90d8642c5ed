"""Memory of a large language model for inference, LoRA, QLoRA or full fine-tuning.

No torch: the planner reads the model's ``config.json`` fields, it builds
nothing. Terms (bytes), with P the parameters, b the batch, s the context, L the layers,
h the width, i the feed-forward width, a the heads, k the key/value heads, d the head width,
V the vocabulary:

- weights: 2 B/param in fp16/bf16; int8 and int4 quantise the linear layers only
  (embeddings, output head and norms stay 16-bit): 1 B and 0.5 B/param plus one fp16 scale
  and zero per group of 64 (0.0625 B/param); QLoRA's NF4 with double quantisation is
  0.5 B/param + 0.127 bit/param of constants (Dettmers et al. 2023, "QLoRA", §3);
- KV cache: ``2·b·s·L·k·d·2`` (keys and values in 16-bit; grouped-query attention stores k
  heads, not a; as in llm-analysis and hf-mem);
- training states: full fine-tuning 16 B/param (16-bit weights and gradients, fp32 master
  weights and AdamW moments: ``(2 + 2 + 12)·P``, Rajbhandari et al. 2019, ZeRO §3.1);
  LoRA/QLoRA the same 16 B per adapter parameter, ``r·(d_in + d_out)`` per adapted
  projection (Hu et al. 2021), on the attention projections q, k, v, o;
- training activations per layer: the accounting of Korthikanti et al. 2022 in 16-bit without
  the ``a·s²`` term (FlashAttention / SDPA keeps no attention matrix), redone for grouped
  keys and values and a gated MLP: ``20·s·b·h + 4·s·b·k·d + 8·s·b·i`` (normalisation inputs in
  fp32), plus the logits ``b·s·V·(2 + 4)`` (16-bit logits and their fp32 copy for the loss);
  no activation checkpointing;
- inference activations: one layer's hidden and MLP states during prefill
  ``b·s·(2h + 2i)·2`` plus the last position's fp32 logits ``4·b·V``;
- QLoRA also holds one dequantised 16-bit copy of the largest projection.
These are estimates from formulas, not measurements.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from entrena.errors import ConfigError

__all__ = ["LlmShape", "LlmMemory", "load_llm_shape", "llm_memory", "KNOWN_LLMS_FILE", "MODES",
           "QUANTIZATIONS"]

KNOWN_LLMS_FILE = Path(__file__).resolve().parents[1] / "hardware" / "llm_configs.yaml"
"""Shipped shapes of well-known models (``llama-3-8b``, ``mistral-7b`` …), with sources."""

MODES = ("inference", "lora", "qlora", "full")
QUANTIZATIONS = ("fp16", "int8", "int4")
_REQUIRED = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
             "vocab_size")
_GATED = {"llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "gemma2", "phi3", "olmo2"}
_GROUP = 64
"""Quantisation group size: one fp16 scale and zero per 64 weights."""


@dataclass(frozen=True)
class LlmShape:
    """The fields of a decoder's ``config.json`` the planner needs.

    Attributes:
        name: What was given (a known name or a file path).
        hidden_size / intermediate_size / layers / heads / kv_heads / head_dim / vocab_size:
            The shape (``kv_heads`` defaults to ``heads``; ``head_dim`` to width / heads).
        gated_mlp: Three MLP projections (SwiGLU: Llama, Mistral, Qwen…) instead of two.
        tied_embeddings: The output head shares the embedding matrix.
        attention_bias: The q, k, v projections have biases (Qwen2).
        source: Where the shape comes from.
    """

    name: str
    hidden_size: int
    intermediate_size: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab_size: int
    gated_mlp: bool
    tied_embeddings: bool
    attention_bias: bool
    source: str

    def parameter_counts(self) -> tuple[int, int]:
        """(linear-layer parameters of the blocks, everything else: embeddings, head, norms)."""
        h, i, d = self.hidden_size, self.intermediate_size, self.head_dim
        attention = h * self.heads * d * 2 + 2 * h * self.kv_heads * d
        mlp = (3 if self.gated_mlp else 2) * h * i
        linear = self.layers * (attention + mlp)
        bias = (self.heads * d + 2 * self.kv_heads * d) * self.layers if self.attention_bias else 0
        other = self.vocab_size * h * (1 if self.tied_embeddings else 2) + (2 * self.layers
                                                                           + 1) * h + bias
        return linear, other

    @property
    def parameters(self) -> int:
        linear, other = self.parameter_counts()
        return linear + other

    def lora_parameters(self, rank: int) -> int:
        """Adapter parameters with rank ``rank`` on the q, k, v and o projections."""
        h, d = self.hidden_size, self.head_dim
        per_layer = (rank * (h + self.heads * d) * 2  # q (h → a·d) and o (a·d → h)
                     + rank * (h + self.kv_heads * d) * 2)  # k and v (h → k·d)
        return self.layers * per_layer


def _known() -> dict[str, Any]:
    return yaml.safe_load(KNOWN_LLMS_FILE.read_text(encoding="utf-8")) or {}


def load_llm_shape(name_or_path: str | Path) -> LlmShape:
    """Read a model's shape from a ``config.json`` (or a folder holding one) or a known name.

    Raises:
        ConfigError: Neither a readable file nor a known name (the known names and the
            closest are listed), or required fields are missing (they are named).
    """
    import difflib

    text = str(name_or_path)
    path = Path(text)
    if path.is_dir():
        path = path / "config.json"
    known = _known()
    if path.is_file():
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{path}: not a readable JSON config ({exc})") from None
        source = str(path)
    elif text.lower() in known:
        entry = known[text.lower()]
        config, source = entry["config"], f"{entry['source']} ({entry['date']})"
    else:
        close = difflib.get_close_matches(text.lower(), list(known), n=1, cutoff=0.3)
        raise ConfigError(f"--llm: {text!r} is neither a config.json file nor a known model; "
                          f"known: {', '.join(known)}"
                          + (f" (did you mean {close[0]!r}?)" if close else "")
                          + "; or give the path of a Hugging Face config.json")
    if not isinstance(config, dict):
        raise ConfigError(f"{source}: a model config is a JSON object")
    config = {**config, **(config.get("text_config") or {})}
    missing = [key for key in _REQUIRED if not isinstance(config.get(key), int)]
    if missing:
        raise ConfigError(f"{source}: the model config lacks {', '.join(missing)} (whole "
                          f"numbers needed by the planner: {', '.join(_REQUIRED)}); "
                          "num_key_value_heads and head_dim are optional")
    heads = int(config["num_attention_heads"])
    return LlmShape(
        name=text, hidden_size=int(config["hidden_size"]),
        intermediate_size=int(config["intermediate_size"]),
        layers=int(config["num_hidden_layers"]), heads=heads,
        kv_heads=int(config.get("num_key_value_heads") or heads),
        head_dim=int(config.get("head_dim") or config["hidden_size"] // heads),
        vocab_size=int(config["vocab_size"]),
        gated_mlp=str(config.get("model_type", "")).lower() in _GATED
        or config.get("hidden_act") in ("silu", "swiglu"),
        tied_embeddings=bool(config.get("tie_word_embeddings", False)),
        attention_bias=bool(config.get("attention_bias",
                                       str(config.get("model_type")) == "qwen2")),
        source=source)


@dataclass(frozen=True)
class LlmMemory:
    """The memory terms of one LLM workload (bytes) and its total."""

    mode: str
    quantization: str
    parameters: int
    trainable_parameters: int
    weights_bytes: float
    kv_cache_bytes: float
    adapter_and_optimizer_bytes: float
    activations_bytes: float
    total_bytes: float

    def as_dict(self) -> dict[str, Any]:
        return {k: (int(v) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def llm_memory(shape: LlmShape, *, mode: str = "inference", context: int = 4096,
               batch_size: int = 1, quantization: str = "fp16",
               lora_rank: int = 16) -> LlmMemory:
    """Memory of ``mode`` (``inference``, ``lora``, ``qlora``, ``full``) at ``context`` tokens.

    Raises:
        ConfigError: An unknown mode or quantisation, or a non-positive size.
    """
    if mode not in MODES:
        raise ConfigError(f"--for: {mode!r} is not one of {', '.join(MODES)}")
    if quantization not in QUANTIZATIONS:
        raise ConfigError(f"--quantization: {quantization!r} is not one of "
                          f"{', '.join(QUANTIZATIONS)}")
    if context < 1 or batch_size < 1 or lora_rank < 1:
        raise ConfigError("--context, --batch-size and --lora-rank must be at least 1")
    linear, other = shape.parameter_counts()
    b, s, h, i = batch_size, context, shape.hidden_size, shape.intermediate_size
    if mode == "qlora":
        weights = linear * (0.5 + 0.127 / 8) + 2 * other
    elif quantization == "int8":
        weights = linear * (1 + 4 / _GROUP) + 2 * other
    elif quantization == "int4":
        weights = linear * (0.5 + 4 / _GROUP) + 2 * other
    else:
        weights = 2.0 * (linear + other)
    trainable = 0
    states = 0.0
    kv = 0.0
    if mode == "inference":
        kv = 2.0 * b * s * shape.layers * shape.kv_heads * shape.head_dim * 2
        activations = b * s * (2 * h + 2 * i) * 2 + 4.0 * b * shape.vocab_size
    else:
        layer = 20 * s * b * h + 4 * s * b * shape.kv_heads * shape.head_dim + 8 * s * b * i
        activations = shape.layers * layer + b * s * shape.vocab_size * (2 + 4)
        if mode == "full":
            trainable = linear + other
            weights = 0.0  # counted in the 16 B/param of the states
            states = 16.0 * trainable
        else:
            trainable = shape.lora_parameters(lora_rank)
            states = 16.0 * trainable
            if mode == "qlora":
                activations += 2.0 * max(h * i, h * shape.heads * shape.head_dim)
    total = weights + kv + states + activations
    return LlmMemory(mode=mode, quantization="nf4" if mode == "qlora" else quantization,
                     parameters=linear + other, trainable_parameters=trainable,
                     weights_bytes=weights, kv_cache_bytes=kv,
                     adapter_and_optimizer_bytes=states, activations_bytes=activations,
                     total_bytes=total)


def devices_needed(total_bytes: float, device_bytes: float | None, reserve: float) -> int | None:
    """How many devices of ``device_bytes`` hold ``total_bytes`` (evenly split), or None."""
    if not device_bytes:
        return None
    return max(1, math.ceil(total_bytes / (device_bytes * (1 - reserve))))
