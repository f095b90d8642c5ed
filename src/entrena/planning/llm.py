"""Memory and compute of a large language model for inference, LoRA, QLoRA or full
fine-tuning.

No torch: the planner reads the model's ``config.json`` fields, it builds
nothing. Terms (bytes), with P the parameters, b the batch, s the context, L the layers,
h the width, i the feed-forward width, a the heads, k the key/value heads, d the head width,
V the vocabulary, p the bytes of an activation (2 in 16-bit, 4 in fp32):

- weights: 2 B/param in fp16/bf16 (4 in fp32); int8 and int4 quantise the linear layers only
  (embeddings, output head and norms stay 16-bit): 1 B and 0.5 B/param plus one fp16 scale
  and zero per group of 64 (0.0625 B/param); QLoRA's NF4 with double quantisation is
  0.5 B/param + 0.127 bit/param of constants (Dettmers et al. 2023, "QLoRA", §3);
- KV cache: ``2·b·s·L·k·d·2`` (keys and values in 16-bit; grouped-query attention stores k
  heads, not a; as in llm-analysis and hf-mem);
- training states: full fine-tuning 16 B/param (16-bit weights and gradients, fp32 master
  weights and AdamW moments: ``(2 + 2 + 12)·P``, Rajbhandari et al. 2019, ZeRO §3.1; in fp32
  4 + 4 + 8); LoRA/QLoRA the same 16 B per adapter parameter (fp32 adapters, their gradients
  and AdamW moments), ``r·(d_in + d_out)`` per adapted projection (Hu et al. 2021), on the
  projections ``lora_targets`` names (``all-linear``: q, k, v, o, gate, up, down; Phi-3's
  fused qkv, o, gate_up, down, so fewer, wider adapters: ``r·(h + (a + 2k)·d)`` for qkv);
- training activations of one layer: the accounting of Korthikanti et al. 2022 without the
  ``a·s²`` term (FlashAttention / SDPA keeps no attention matrix), redone for grouped keys
  and values and a gated MLP: ``(10·h + 2·k·d + 4·i)·s·b·p`` (in 16-bit:
  ``20·s·b·h + 4·s·b·k·d + 8·s·b·i``); LoRA dropout keeps a dropped copy of each adapted
  projection's input and its mask, ``(p + 1)`` bytes per input element;
- logits: ``n·V`` per position whose logits are computed (n = b·s, or the target tokens only
  where the loss computes no other, as entrena's LLM fine-tuning model does): a 16-bit copy and
  the fp32 log-softmax kept for the loss (``p + 4`` bytes), or ``p`` bytes with a fused or
  chunked loss (torchtune's compiled chunked loss, Unsloth's fused cross-entropy);
- without gradient checkpointing every layer's activations are alive when the logits are
  made: ``L·layer + logits``; with it each layer keeps its input only (``L·b·s·h·p``) and one
  layer's activations are recomputed at a time, after the logits are freed:
  ``L·b·s·h·p + max(layer, logits)`` (Chen et al. 2016, "Training deep nets with sublinear
  memory cost");
- inference activations: one layer's hidden and MLP states during prefill
  ``b·s·(2h + 2i)·2`` plus the last position's fp32 logits ``4·b·V``;
- QLoRA also holds one dequantised 16-bit copy of the largest projection.

Compute per training step (FLOPs, multiply-add = 2): forward ``2·N·T`` over the linear
layers' N parameters and T = b·s tokens, plus attention ``4·b·s²·a·d·L`` (scores and
weighted values, causal: half counted) and the head ``2·h·V·n``; backward twice the forward
for full fine-tuning (gradients of inputs and weights), once the forward under LoRA (the
frozen base needs input gradients only; the adapters' own are negligible); gradient
checkpointing adds one forward of the layers (Kaplan et al. 2020 for ``6·N·T``). Time is
FLOPs over a throughput measured by a probe on the machine (:func:`llm_step_time_s`).
These are estimates from formulas; ``benchmarks/llm_plan_accuracy.py`` checks them against
measured runs and published figures.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from entrena.errors import ConfigError, closest_choice

__all__ = ["LlmShape", "LlmMemory", "load_llm_shape", "shape_from_config",
            "llm_memory", "llm_step_flops", "adapted_layers",
           "llm_step_time_s", "KNOWN_LLMS_FILE", "MODES", "QUANTIZATIONS", "LORA_TARGETS",
           "FUSED_LORA_TARGETS"]

KNOWN_LLMS_FILE = Path(__file__).resolve().parents[1] / "hardware" / "llm_configs.yaml"
"""Shipped shapes of well-known models (``llama-3-8b``, ``mistral-7b`` …), with sources."""

MODES = ("inference", "lora", "qlora", "full")
QUANTIZATIONS = ("fp16", "int8", "int4")
_REQUIRED = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
             "vocab_size")
_GATED = {"llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3",
          "gemma3_text", "phi3", "olmo2", "smollm3", "granite", "cohere", "cohere2"}
"""Families with a gated MLP (SwiGLU, GeGLU: three projections)."""
_FUSED = {"phi3"}
"""Families whose decoder fuses q, k, v into ``qkv_proj`` and gate, up into ``gate_up_proj``
(Phi-3): one adapter on each fused projection, ``r·(d_in + d_out)`` with the summed outputs."""
_TIED_BY_DEFAULT = {"gemma", "gemma2", "gemma3", "gemma3_text"}
"""Families whose config class ties the output head to the embeddings by default, so that a
``config.json`` may leave ``tie_word_embeddings`` out (transformers writes only what differs
from the defaults)."""
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""The projections LoRA can adapt (``all-linear`` is all of them; a model without a gated
MLP has no ``gate_proj``)."""
FUSED_LORA_TARGETS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")
"""Phi-3's projections (``all-linear`` there)."""
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
        fused_projections: q, k, v are one ``qkv_proj`` and gate, up one ``gate_up_proj``
            (Phi-3): the same weights, fewer and wider adapters.
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
    fused_projections: bool = False

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

    def projections(self) -> dict[str, tuple[int, int]]:
        """``{name: (d_in, d_out)}`` of one layer's linear projections."""
        h, i, d = self.hidden_size, self.intermediate_size, self.head_dim
        if self.fused_projections:
            return {"qkv_proj": (h, (self.heads + 2 * self.kv_heads) * d),
                    "o_proj": (self.heads * d, h),
                    "gate_up_proj": (h, (2 if self.gated_mlp else 1) * i),
                    "down_proj": (i, h)}
        shapes = {"q_proj": (h, self.heads * d), "k_proj": (h, self.kv_heads * d),
                  "v_proj": (h, self.kv_heads * d), "o_proj": (self.heads * d, h),
                  "up_proj": (h, i), "down_proj": (i, h)}
        if self.gated_mlp:
            shapes["gate_proj"] = (h, i)
        return shapes

    def lora_parameters(self, rank: int, targets: str | tuple[str, ...] = "all-linear"
                        ) -> int:
        """Adapter parameters of rank ``rank`` on ``targets`` (``all-linear``, or names
        from :data:`LORA_TARGETS`, or :data:`FUSED_LORA_TARGETS` for Phi-3),
        ``r·(d_in + d_out)`` each, over all layers."""
        return self.layers * sum(rank * (d_in + d_out) for d_in, d_out
                                 in self._targets(targets).values())

    def _targets(self, targets: str | tuple[str, ...]) -> dict[str, tuple[int, int]]:
        shapes = self.projections()
        if targets == "all-linear":
            return shapes
        names = (targets,) if isinstance(targets, str) else tuple(targets)
        known = FUSED_LORA_TARGETS if self.fused_projections else LORA_TARGETS
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ConfigError(f"LoRA targets {unknown} are not projections of a decoder "
                              f"layer of {self.name}; use all-linear or names from "
                              f"{', '.join(known)}")
        return {n: shapes[n] for n in names if n in shapes}


def _known() -> dict[str, Any]:
    return yaml.safe_load(KNOWN_LLMS_FILE.read_text(encoding="utf-8")) or {}


def load_llm_shape(name_or_path: str | Path) -> LlmShape:
    """Read a model's shape from a ``config.json`` (or a folder holding one) or a known name.

    Raises:
        ConfigError: Neither a readable file nor a known name (the known names and the
            closest are listed), or required fields are missing (they are named).
    """
    text = str(name_or_path)
    path = Path(text)
    if path.is_dir():
        path = path / "config.json"
    known = _known()
    if path.is_file():
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{path}: not a readable JSON config ({exc}); give a Hugging "
                              "Face config.json (or its folder) or a known model name") from None
        source = str(path)
    elif text.lower() in known:
        entry = known[text.lower()]
        config, source = entry["config"], f"{entry['source']} ({entry['date']})"
    else:
        close = closest_choice(text, known, fragments=True)
        raise ConfigError(f"--llm: {text!r} is neither a config.json file nor a known model; "
                          f"known: {', '.join(known)}"
                          + (f" (did you mean {close!r}?)" if close else "")
                          + "; or give the path of a Hugging Face config.json")
    return shape_from_config(config, text, source)


def shape_from_config(config: Any, name: str, source: str) -> LlmShape:
    """An :class:`LlmShape` from a ``config.json``'s mapping.

    Raises:
        ConfigError: Not a mapping, or required fields are missing (they are named).
    """
    if not isinstance(config, dict):
        raise ConfigError(f"{source}: a model config is a JSON object")
    config = {**config, **(config.get("text_config") or {})}
    missing = [key for key in _REQUIRED if not isinstance(config.get(key), int)]
    if missing:
        raise ConfigError(f"{source}: the model config lacks {', '.join(missing)} (whole "
                          f"numbers needed by the planner: {', '.join(_REQUIRED)}); "
                          "num_key_value_heads and head_dim are optional")
    heads = int(config["num_attention_heads"])
    model_type = str(config.get("model_type", "")).lower()
    return LlmShape(
        name=name, hidden_size=int(config["hidden_size"]),
        intermediate_size=int(config["intermediate_size"]),
        layers=int(config["num_hidden_layers"]), heads=heads,
        kv_heads=int(config.get("num_key_value_heads") or heads),
        head_dim=int(config.get("head_dim") or config["hidden_size"] // heads),
        vocab_size=int(config["vocab_size"]),
        gated_mlp=model_type in _GATED or config.get("hidden_act") in ("silu", "swiglu"),
        tied_embeddings=bool(config.get("tie_word_embeddings", model_type in _TIED_BY_DEFAULT)),
        attention_bias=bool(config.get("attention_bias", model_type == "qwen2")),
        source=source, fused_projections=model_type in _FUSED)


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
               batch_size: int = 1, quantization: str = "fp16", lora_rank: int = 16,
               lora_targets: str | tuple[str, ...] = "all-linear",
               gradient_checkpointing: bool = True, activation_bytes: int = 2,
               logits_positions: int | None = None, fused_loss: bool = False,
               lora_dropout: bool = False, lora_layers: int | None = None) -> LlmMemory:
    """Memory of ``mode`` (``inference``, ``lora``, ``qlora``, ``full``) at ``context`` tokens
    (the terms in the module docstring).

    Args:
        shape: The model.
        mode: ``inference``, ``lora``, ``qlora`` or ``full``.
        context: Tokens per sequence (s).
        batch_size: Sequences per step (b).
        quantization: Frozen weights as ``fp16``, ``int8`` or ``int4`` (QLoRA: NF4).
        lora_rank: r of the adapters.
        lora_targets: ``all-linear`` or projection names (:data:`LORA_TARGETS`).
        gradient_checkpointing: Training keeps each layer's input only and recomputes.
        activation_bytes: p: 2 (16-bit training) or 4 (fp32, as on a CPU without bf16);
            also the bytes per frozen weight when ``quantization`` is ``fp16``.
        logits_positions: Positions whose logits are computed in training (default b·s;
            entrena's LLM fine-tuning model computes the target tokens' only).
        fused_loss: The loss keeps no fp32 copy of the logits (fused or chunked
            cross-entropy).
        lora_dropout: LoRA dropout is on (a dropped copy of each adapted input is kept).
        lora_layers: LoRA on the last N decoder layers only (None: all): the layers below
            keep no activations for backward and hold no adapters.

    Raises:
        ConfigError: An unknown mode, quantisation or LoRA target, or a non-positive size.
    """
    if mode not in MODES:
        raise ConfigError(f"--for: {mode!r} is not one of {', '.join(MODES)}")
    if quantization not in QUANTIZATIONS:
        raise ConfigError(f"--quantization: {quantization!r} is not one of "
                          f"{', '.join(QUANTIZATIONS)}")
    below = [f"{option} {value}" for option, value in (
        ("--context", context), ("--batch-size", batch_size), ("--lora-rank", lora_rank))
        if value < 1]
    if below:
        raise ConfigError(f"{', '.join(below)}: must be at least 1 (--context: tokens per "
                          "sequence, --batch-size: sequences at once, --lora-rank: the "
                          "adapters' rank)")
    linear, other = shape.parameter_counts()
    b, s, h, i = batch_size, context, shape.hidden_size, shape.intermediate_size
    p = float(activation_bytes)
    if mode == "qlora":
        weights = linear * (0.5 + 0.127 / 8) + 2 * other
    elif quantization == "int8":
        weights = linear * (1 + 4 / _GROUP) + 2 * other
    elif quantization == "int4":
        weights = linear * (0.5 + 4 / _GROUP) + 2 * other
    else:
        weights = p * (linear + other)
    trainable = 0
    states = 0.0
    kv = 0.0
    if mode == "inference":
        kv = 2.0 * b * s * shape.layers * shape.kv_heads * shape.head_dim * 2
        activations = b * s * (2 * h + 2 * i) * 2 + 4.0 * b * shape.vocab_size
    else:
        tokens = b * s
        layer = (10 * h + 2 * shape.kv_heads * shape.head_dim + 4 * i) * tokens * p
        if mode != "full" and lora_dropout:
            inputs = sum(d_in for d_in, _ in shape._targets(lora_targets).values())
            layer += inputs * tokens * (p + 1)
        positions = tokens if logits_positions is None else logits_positions
        logits = positions * shape.vocab_size * (p if fused_loss else p + 4)
        kept = adapted_layers(shape, mode, lora_layers)  # layers that backward runs through
        if gradient_checkpointing:
            activations = kept * tokens * h * p + max(layer, logits)
        else:
            activations = kept * layer + logits
        if mode == "full":
            trainable = linear + other
            weights = 0.0  # counted in the 16 B/param of the states
            states = 16.0 * trainable
        else:
            trainable = shape.lora_parameters(lora_rank, lora_targets) * kept \
                // shape.layers
            states = 16.0 * trainable
            if mode == "qlora":
                activations += 2.0 * max(h * i, h * shape.heads * shape.head_dim)
    total = weights + kv + states + activations
    return LlmMemory(mode=mode, quantization="nf4" if mode == "qlora" else quantization,
                     parameters=linear + other, trainable_parameters=trainable,
                     weights_bytes=weights, kv_cache_bytes=kv,
                     adapter_and_optimizer_bytes=states, activations_bytes=activations,
                     total_bytes=total)


def adapted_layers(shape: LlmShape, mode: str, lora_layers: int | None) -> int:
    """Decoder layers the backward pass runs through: all for ``full`` (or ``inference``) or
    ``lora_layers`` None, else the last ``lora_layers``.

    Raises:
        ConfigError: ``lora_layers`` below 1 or above the model's decoder layers.
    """
    if mode not in ("lora", "qlora") or lora_layers is None:
        return shape.layers
    if not 1 <= int(lora_layers) <= shape.layers:
        raise ConfigError(f"model.lora.layers / --lora-layers: {lora_layers} layers, but "
                          f"{shape.name} has {shape.layers} decoder layers; give 1 to "
                          f"{shape.layers} (or leave it out for all)")
    return int(lora_layers)


def llm_step_flops(shape: LlmShape, *, mode: str, tokens: int, context: int,
                   logits_positions: int | None = None,
                   gradient_checkpointing: bool = True,
                   lora_layers: int | None = None) -> float:
    """FLOPs of one training step over ``tokens`` tokens (module docstring).

    Args:
        shape: The model.
        mode: ``lora``, ``qlora`` or ``full``.
        tokens: T, the tokens of the step (b·s, or the real tokens of a padded batch).
        context: s, the sequence length (attention grows with it).
        logits_positions: Positions whose logits are computed (default T).
        gradient_checkpointing: One more forward of the layers.
        lora_layers: LoRA on the last N decoder layers only: backward (and a checkpointed
            recompute) runs through those N of the L layers, the head always.

    Raises:
        ConfigError: ``mode`` is not a training mode.
    """
    if mode not in ("lora", "qlora", "full"):
        raise ConfigError(f"llm_step_flops: {mode!r} is not lora, qlora or full")
    linear, _ = shape.parameter_counts()
    layers = 2.0 * linear * tokens + 2.0 * tokens * context * shape.heads * shape.head_dim \
        * shape.layers  # 4·b·s²·a·d·L, half of it causal
    head = 2.0 * shape.hidden_size * shape.vocab_size * (
        tokens if logits_positions is None else logits_positions)
    forward = layers + head
    share = adapted_layers(shape, mode, lora_layers) / shape.layers
    backward = (2.0 if mode == "full" else 1.0) * (layers * share + head)
    return forward + backward + (layers * share if gradient_checkpointing else 0.0)


def llm_step_time_s(flops: float, probe_flops: float, probe_time_s: float) -> float:
    """A step's time from its FLOPs and a probe's measured FLOPs and time (the probe gives
    the machine's achieved FLOP/s on this model: the calibration)."""
    return flops * probe_time_s / probe_flops


def devices_needed(total_bytes: float, device_bytes: float | None, reserve: float) -> int | None:
    """How many devices of ``device_bytes`` hold ``total_bytes`` (evenly split), or None."""
    if not device_bytes:
        return None
    return max(1, math.ceil(total_bytes / (device_bytes * (1 - reserve))))
