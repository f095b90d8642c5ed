"""The planner's :class:`~entrena.planning.model.ModelProfile` of a decoder LLM, from the
formulas of :mod:`entrena.planning.llm` (no model built, no torch).

The LLM fine-tuning task plans its run with this profile, so that ``entrena plan CONFIG`` and
``entrena plan MODEL --llm`` use one set of formulas: per sample of T tokens,

- training FLOPs ``a0 + a1·T + a2·T²`` are :func:`~entrena.planning.llm.llm_step_flops` at
  one sequence of T tokens (a0: the output head at the example's target tokens, k of them;
  a1: the linear layers; a2: causal attention), read off at T = 1, 2, 3 (the formula is
  exactly quadratic in T);
- the bytes kept for backward are :func:`~entrena.planning.llm.llm_memory`'s activation term
  at batch 1 (``saved_per_sample`` + ``saved_linear``·T; no attention matrix is kept, so
  nothing grows with T²), read off at T = 0 and at the run's longest example, so the line is
  exact there (with gradient checkpointing the term holds a ``max`` and is not a line; the
  longest example is where the peak is planned).

A run's own plan calibrates it as any other: the probe measures the FLOP rate of this
machine on the real model and, on a CPU, the memory a training step adds.
"""

from __future__ import annotations

from typing import Any

from entrena.planning.llm import LlmShape, llm_memory, llm_step_flops
from entrena.planning.model import ModelProfile

__all__ = ["llm_profile", "llm_run_profile", "llm_plan_details", "LLM_KIND"]

LLM_KIND = "llm"
"""``ModelProfile.kind`` of a profile made here: activations come from the formula on every
device (:func:`entrena.planning.memory.activation_bytes`)."""


def llm_profile(shape: LlmShape, *, mode: str, lora_rank: int = 16,
                lora_targets: str | tuple[str, ...] = "all-linear",
                target_tokens: float = 1.0, longest_target_tokens: int = 1,
                longest_tokens: int = 512, gradient_checkpointing: bool = False,
                activation_bytes: int = 4, lora_dropout: bool = False,
                lora_layers: int | None = None) -> ModelProfile:
    """The profile of fine-tuning ``shape`` as ``mode`` (``lora``, ``qlora`` or ``full``).

    Args:
        shape: The model.
        mode: ``lora``, ``qlora`` or ``full``.
        lora_rank / lora_targets: The adapters (``lora``/``qlora``).
        target_tokens: Mean tokens per example whose logits are computed (the response and
            its EOS): the head's FLOPs.
        longest_target_tokens: The most of them in one example: the logits' bytes.
        longest_tokens: The longest example (tokens), where the saved-bytes line is exact.
        gradient_checkpointing: Each layer keeps its input only and is recomputed.
        activation_bytes: 4 (fp32) or 2 (16-bit).
        lora_dropout: LoRA dropout is on.
        lora_layers: LoRA on the last N decoder layers only (None: all).

    Raises:
        ConfigError: ``mode`` is not a training mode, or an unknown LoRA target.
    """

    def flops(tokens: int) -> float:
        return llm_step_flops(shape, mode=mode, tokens=tokens, context=tokens,
                              logits_positions=target_tokens,  # type: ignore[arg-type]
                              gradient_checkpointing=gradient_checkpointing,
                              lora_layers=lora_layers)

    def saved(tokens: int) -> float:
        return llm_memory(shape, mode=mode, context=max(tokens, 1), batch_size=1,
                          lora_rank=lora_rank, lora_targets=lora_targets,
                          gradient_checkpointing=gradient_checkpointing,
                          activation_bytes=activation_bytes,
                          logits_positions=longest_target_tokens,
                          lora_dropout=lora_dropout, lora_layers=lora_layers).activations_bytes

    f1, f2, f3 = flops(1), flops(2), flops(3)
    quadratic = (f3 - 2 * f2 + f1) / 2
    linear = f2 - f1 - 3 * quadratic
    longest = max(int(longest_tokens), 2)
    slope = (saved(longest) - saved(1)) / (longest - 1)
    memory = llm_memory(shape, mode=mode, context=1, lora_rank=lora_rank,
                        lora_targets=lora_targets, activation_bytes=activation_bytes,
                        lora_layers=lora_layers)
    linear_params, _ = shape.parameter_counts()
    adapters = memory.trainable_parameters if mode != "full" else 0
    return ModelProfile(
        parameters=shape.parameters + adapters, trainable_parameters=memory.trainable_parameters,
        linear_parameters=linear_params, layers=shape.layers, hidden_size=shape.hidden_size,
        heads=shape.heads, intermediate_size=shape.intermediate_size,
        vocab_size=shape.vocab_size, flops_constant=f1 - linear - quadratic,
        flops_linear=linear, flops_quadratic=quadratic, saved_linear=slope,
        saved_quadratic=0.0, saved_per_sample=saved(1) - slope, kind=LLM_KIND)


def llm_run_profile(llm: dict[str, Any]) -> ModelProfile:
    """The profile of a run described as plain data (``PlanningSpec.llm``: ``shape``, a
    ``config.json`` path or its mapping; ``name``; ``memory``, the keyword arguments of
    :func:`~entrena.planning.llm.llm_memory` at the longest training batch; and
    ``target_tokens``, the mean per example)."""
    memory = llm["memory"]
    batch = max(int(memory["batch_size"]), 1)
    return llm_profile(
        _shape(llm), mode=memory["mode"], lora_rank=memory["lora_rank"],
        lora_targets=memory["lora_targets"], target_tokens=float(llm["target_tokens"]),
        longest_target_tokens=max(1, int(memory["logits_positions"]) // batch),
        longest_tokens=int(memory["context"]),
        gradient_checkpointing=memory["gradient_checkpointing"],
        activation_bytes=memory["activation_bytes"], lora_dropout=memory["lora_dropout"],
        lora_layers=memory.get("lora_layers"))


def llm_plan_details(llm: dict[str, Any]) -> dict[str, Any]:
    """The plan document's ``llm`` block: the settings, :func:`~entrena.planning.llm.llm_memory`
    at them, and the ``entrena plan --llm`` command that gives the same figures."""
    memory = dict(llm["memory"])
    targets = memory["lora_targets"]
    shape = _shape(llm)
    return {"llm": {
        "settings": {**memory, "lora_targets": targets if isinstance(targets, str)
                     else list(targets)},
        "memory": llm_memory(shape, **memory).as_dict(),
        "command": _command(llm, memory)}}


def _shape(llm: dict[str, Any]) -> LlmShape:
    from entrena.planning.llm import load_llm_shape, shape_from_config

    if isinstance(llm["shape"], dict):
        return shape_from_config(llm["shape"], llm["name"], source=llm["name"])
    return load_llm_shape(llm["shape"])


def _command(llm: dict[str, Any], memory: dict[str, Any]) -> str:
    """The ``entrena plan --llm`` line with the same settings (``CONFIG_JSON`` for a model
    built from a mapping: write it to a ``config.json`` first)."""
    targets = memory["lora_targets"]
    parts = ["entrena plan", "CONFIG_JSON" if isinstance(llm["shape"], dict)
             else str(llm["shape"]), "--llm", "--for", memory["mode"],
             "--context", str(memory["context"]), "--batch-size", str(memory["batch_size"]),
             "--lora-rank", str(memory["lora_rank"]),
             "--activation-bytes", str(memory["activation_bytes"]),
             "--logits-positions", str(memory["logits_positions"]),
             "--lora-dropout" if memory["lora_dropout"] else "--no-lora-dropout",
             "--gradient-checkpointing" if memory["gradient_checkpointing"]
             else "--no-gradient-checkpointing"]
    if targets != "all-linear":
        parts += ["--lora-targets", ",".join(targets)]
    if memory.get("lora_layers") is not None:
        parts += ["--lora-layers", str(memory["lora_layers"])]
    return " ".join(parts)
