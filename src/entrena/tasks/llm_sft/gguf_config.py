"""What transformers' GGUF reader (5.25) leaves at a config class's default although the
file says otherwise, put back so the model computes as llama.cpp runs the file: the head
width, Gemma's attention scale and logit soft-capping, and RoPE scaling (Llama 3's frequency
factors, linear and YaRN scaling, Phi-3's LongRoPE).

Pure functions of a file's :class:`~entrena.tasks.llm_sft.gguf_file.GgufFacts`, and
:func:`apply_overrides`, which writes them into a ``transformers`` config.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from entrena.errors import ConfigError
from entrena.tasks.llm_sft.gguf_file import GgufFacts

__all__ = ["apply_overrides", "config_overrides", "llama3_factors", "llama3_rope",
           "rope_scaling"]

_LLAMA3_TOLERANCE = 1e-4
"""Largest relative difference between a file's ``rope_freqs`` and Llama 3's formula at the
fitted settings (the file holds them as float32: about 1e-7)."""


def config_overrides(facts: GgufFacts) -> dict[str, Any]:
    """Config values the file sets and transformers' reader drops.

    - ``head_dim`` from ``<arch>.attention.key_length`` (Qwen3's and Gemma's default, 128 or
      256, is wrong for any other width; a tiny Qwen3 with head_dim 16 did not load).
    - Gemma 2/3: ``query_pre_attn_scalar`` as llama.cpp scales attention
      (``llama-model.cpp``: 1/sqrt(key_length), but 1/sqrt(width/heads) for the 27B models,
      46 and 62 layers; at the class default of 256 a tiny Gemma 3's logits were 0.59 off),
      and Gemma 2's ``attn_logit_softcapping`` / ``final_logit_softcapping``.
    - ``rope``: the RoPE scaling (:func:`rope_scaling`), merged by :func:`apply_overrides`.

    Returns:
        ``{config attribute: value}`` (empty when the file says nothing more).

    Raises:
        ConfigError: The file's RoPE factors match no scaling transformers computes.
    """
    arch = facts.architecture
    meta = facts.metadata
    out: dict[str, Any] = {}
    key_length = meta.get(f"{arch}.attention.key_length")
    if isinstance(key_length, int) and key_length > 0:
        out["head_dim"] = key_length
    if arch in ("gemma2", "gemma3") and "head_dim" in out:
        width = meta.get(f"{arch}.embedding_length")
        heads = meta.get(f"{arch}.attention.head_count")
        big = (arch, meta.get(f"{arch}.block_count")) in (("gemma2", 46), ("gemma3", 62))
        out["query_pre_attn_scalar"] = width // heads if big and isinstance(width, int) and \
            isinstance(heads, int) and heads else out["head_dim"]
    for name in ("attn_logit_softcapping", "final_logit_softcapping"):
        if isinstance(meta.get(f"{arch}.{name}"), float):
            out[name] = meta[f"{arch}.{name}"]
    rope = rope_scaling(facts)
    if rope:
        out["rope"] = rope
    return out


def rope_scaling(facts: GgufFacts) -> dict[str, Any] | None:
    """The file's RoPE scaling as transformers' ``rope_parameters`` entries (without
    ``rope_theta``), or ``None`` when it has none.

    llama.cpp's converter writes Llama 3.1+'s scaling as the tensor ``rope_freqs`` (a
    divisor per frequency) and Phi-3's LongRoPE as ``rope_factors_long`` / ``_short``;
    linear and YaRN scaling as ``<arch>.rope.scaling.type`` / ``.factor`` /
    ``.original_context_length``.

    Raises:
        ConfigError: ``rope_freqs`` that Llama 3's formula gives at no usual setting, or a
            scaling type transformers has no counterpart for.
    """
    arch, meta = facts.architecture, facts.metadata
    where = f"{facts.path}"
    freqs = facts.vector("rope_freqs.weight")
    if freqs is not None and any(abs(f - 1.0) > _LLAMA3_TOLERANCE for f in freqs):
        theta = float(meta.get(f"{arch}.rope.freq_base", 10000.0))
        fitted = llama3_rope(freqs, theta)
        if fitted is None:
            raise ConfigError(f"{where}: its rope_freqs (RoPE frequency factors) match Llama "
                              f"3's scaling at no usual setting, so transformers would not "
                              f"compute as llama.cpp does; use the model's Hugging Face folder")
        return fitted
    long, short = facts.vector("rope_factors_long.weight"), facts.vector(
        "rope_factors_short.weight")
    original = meta.get(f"{arch}.rope.scaling.original_context_length")
    if long is not None and short is not None:
        return {"rope_type": "longrope", "long_factor": long, "short_factor": short,
                "original_max_position_embeddings": int(original or
                                                        meta.get(f"{arch}.context_length", 0))}
    kind = meta.get(f"{arch}.rope.scaling.type")
    factor = meta.get(f"{arch}.rope.scaling.factor")
    if kind in (None, "none") or not isinstance(factor, float) or factor == 1.0:
        return None
    if kind == "linear":
        return {"rope_type": "linear", "factor": factor}
    if kind == "yarn" and original:
        return {"rope_type": "yarn", "factor": factor,
                "original_max_position_embeddings": int(original)}
    raise ConfigError(f"{where}: its RoPE scaling {kind!r} (factor {factor}) has no "
                      f"counterpart entrena sets in transformers; use the model's Hugging Face "
                      f"folder")


def llama3_factors(dim: int, theta: float, factor: float, low: float, high: float,
                   original: int) -> list[float]:
    """Llama 3's RoPE divisor per frequency, as llama.cpp's converter writes ``rope_freqs``
    (``convert_hf_to_gguf.py``, ``LlamaModel.generate_extra_tensors``; Meta's
    ``apply_scaling``): 1 for short wavelengths, ``factor`` for long ones, a smooth blend
    between ``original / high`` and ``original / low`` tokens.

    Args:
        dim: The rotated width (head width).
        theta: The RoPE base.
        factor: The scaling factor (8 for Llama 3.1, 32 for Llama 3.2).
        low: ``low_freq_factor``.
        high: ``high_freq_factor``.
        original: ``original_max_position_embeddings`` (8192).

    Returns:
        ``dim / 2`` divisors.
    """
    out = []
    for i in range(0, dim, 2):
        wavelength = 2 * math.pi * theta ** (i / dim)
        if wavelength < original / high:
            out.append(1.0)
        elif wavelength > original / low:
            out.append(factor)
        else:
            smooth = (original / wavelength - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return out


def llama3_rope(freqs: list[float], theta: float) -> dict[str, Any] | None:
    """The Llama 3 settings whose divisors (:func:`llama3_factors`) are ``freqs``, searched
    over the values Meta's and derived models use, or ``None``."""
    factor = max(freqs)
    for low, high, original in itertools.product(
            (1.0, 2.0, 4.0), (2.0, 4.0, 8.0, 16.0),
            (2048, 4096, 8192, 16384, 32768, 65536, 131072)):
        if high <= low:
            continue
        expected = llama3_factors(2 * len(freqs), theta, factor, low, high, original)
        if all(abs(a - b) <= _LLAMA3_TOLERANCE * b for a, b in zip(freqs, expected,
                                                                     strict=True)):
            return {"rope_type": "llama3", "factor": factor, "low_freq_factor": low,
                    "high_freq_factor": high, "original_max_position_embeddings": original}
    return None


def apply_overrides(config: Any, overrides: dict[str, Any]) -> None:
    """Write :func:`config_overrides` into a transformers config: attributes it has, and the
    RoPE scaling into ``rope_parameters`` (the ``full_attention`` entry where the config
    keeps one per attention kind, as Gemma 3's does)."""
    for attribute, value in overrides.items():
        if attribute != "rope" and hasattr(config, attribute):
            setattr(config, attribute, value)
    rope = overrides.get("rope")
    parameters = getattr(config, "rope_parameters", None)
    if not rope or not isinstance(parameters, dict):
        return
    target = parameters.get("full_attention", parameters)
    if isinstance(target, dict):
        target.update(rope)
