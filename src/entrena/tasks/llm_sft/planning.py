"""The :class:`~entrena.tasks.base.PlanningSpec` of ``task: llm-sft``: the LLM formulas of
:mod:`entrena.planning.llm` at the run's settings, so that ``entrena plan CONFIG`` and
``entrena plan MODEL --llm`` agree (the ``llm`` block of the plan says which command)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from entrena.data.batching import padded_width
from entrena.tasks.base import PlanningSpec
from entrena.tasks.llm_sft.sources import weights_source

if TYPE_CHECKING:
    from entrena.config.loading import LoadedConfig
    from entrena.tasks.llm_sft.config import LlmSftConfig
    from entrena.tasks.llm_sft.data import PreparedSft

__all__ = ["sft_planning", "llm_settings"]

ARCHITECTURE = "model.architecture"
"""The model's name in the plan when it is built from ``model.architecture``."""


def _activation_bytes(precision: str) -> int:
    """4 in fp32 (``32-true``, and ``auto``: fp32 on a CPU, an upper bound under autocast),
    else 2."""
    return 2 if precision in ("bf16-mixed", "16-mixed", "bf16-true") else 4


def llm_settings(loaded: LoadedConfig[LlmSftConfig], prepared: PreparedSft) -> dict[str, Any]:
    """The keyword arguments of :func:`~entrena.planning.llm.llm_memory` for the run's
    longest training batch: mode, context (its longest example, padded as the batches
    are), batch size, LoRA rank,
    targets and dropout, gradient checkpointing, activation bytes, and the positions whose
    logits are computed (the batch's target tokens, at most batch × longest response)."""
    cfg = loaded.config
    model, train = cfg.model, prepared.splits.train
    targets = model.lora.target_modules
    context = padded_width(int(train.lengths.max()), cfg.data.pad_to_multiple_of)
    return {"mode": model.finetuning, "context": context,
            "batch_size": int(cfg.train.batch_size), "lora_rank": int(model.lora.r),
            "lora_targets": targets if isinstance(targets, str) else tuple(targets),
            "gradient_checkpointing": bool(model.gradient_checkpointing),
            "activation_bytes": _activation_bytes(cfg.train.precision),
            "logits_positions": int(cfg.train.batch_size * train.response_lengths.max()),
            "lora_dropout": model.finetuning != "full" and model.lora.dropout > 0,
            "lora_layers": model.lora.layers if model.finetuning != "full" else None}


def _shape(loaded: LoadedConfig[LlmSftConfig], sources: dict[str, str],
           prepared: PreparedSft) -> str | dict[str, Any]:
    """The weights' folder (its ``config.json``), or the mapping of ``model.architecture``."""
    architecture = loaded.config.model.architecture
    if architecture is not None:
        return {**architecture.model_dump(), "vocab_size": len(prepared.tokenizer),
                "model_type": "llama", "tie_word_embeddings": True}
    return weights_source(loaded, sources) or ""


def sft_planning(task: Any, loaded: LoadedConfig[LlmSftConfig], sources: dict[str, str],
                 prepared: PreparedSft) -> PlanningSpec:
    """See :meth:`LlmSftTask.planning <entrena.tasks.llm_sft.task.LlmSftTask.planning>`."""
    cfg = loaded.config

    multiple = cfg.data.pad_to_multiple_of

    def lengths(role: str) -> Any:
        split = getattr(prepared.splits, role, None)
        return split.lengths if split is not None else []

    def batch_width(longest: int) -> int:  # as the chat batches pad
        return int(padded_width(longest, multiple))

    def probe_batches(batch_size: int) -> list[dict[str, Any]]:
        source = task.batches(loaded, prepared, "train", batch_size=batch_size, shuffle=True)
        plan = source.plan(0)
        full = [b for b in plan if len(b) == batch_size] or plan
        by_length = sorted(full, key=lambda b: int(source.lengths[b].max()))
        return [source.collate(b) for b in (by_length[len(by_length) // 2], by_length[-1])]

    def eval_batch(batch_size: int) -> dict[str, Any]:
        longest: tuple[int, Any, list[int]] | None = None
        for role in ("validation", "test"):
            if getattr(prepared.splits, role, None) is None:
                continue
            source = task.batches(loaded, prepared, role, batch_size=batch_size,
                                  shuffle=False)
            for b in source.plan(0):
                tokens = int(source.lengths[b].max()) * len(b)
                if longest is None or tokens > longest[0]:
                    longest = (tokens, source, b)
        assert longest is not None, "no validation split"
        return longest[1].collate(longest[2])

    llm = {"shape": _shape(loaded, sources, prepared),
           "name": ARCHITECTURE if cfg.model.architecture is not None else str(cfg.model.name),
           "memory": llm_settings(loaded, prepared),
           "target_tokens": float(prepared.splits.train.response_lengths.mean())}
    return PlanningSpec(model_name=ARCHITECTURE if cfg.model.architecture is not None
                        else str(cfg.model.name),
                        max_length=int(prepared.max_length), lengths=lengths,
                        probe_batches=probe_batches, eval_batch=eval_batch,
                        llm=llm, batch_width=batch_width)
