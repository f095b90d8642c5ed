"""What the planner needs of a text encoder (:class:`~entrena.tasks.base.PlanningSpec`),
for ``text-classification`` and ``text-regression`` alike: token lengths per split, the model
on the meta device, the probe's batches."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from entrena.tasks.base import PlanningSpec
from entrena.tasks.text.config import resolve_attention_dropout

if TYPE_CHECKING:
    from entrena.tasks.regression import WithTarget
    from entrena.tasks.text.data import PreparedData, TextLoaded

__all__ = ["text_planning"]


def text_planning(loaded: TextLoaded, sources: dict[str, str],
                  prepared: PreparedData | WithTarget, outputs: int) -> PlanningSpec:
    """The :class:`PlanningSpec` of a text encoder with ``outputs`` outputs (the classes; 1
    for a regressor): token lengths per split at ``max_length``; the model profiled on the
    meta device at three lengths; probed on the median-length and the longest batch of
    epoch 0."""
    from pathlib import Path as _Path

    from entrena.data.batching import padded_width
    from entrena.data.loaders import TextBatches
    from entrena.tasks.text.model import meta_classifier

    cfg = loaded.config
    max_length = int(prepared.max_length)
    multiple = cfg.data.pad_to_multiple_of
    architecture = cfg.model.architecture.model_dump() if cfg.model.architecture else None
    num_labels = outputs

    def lengths(role: str) -> Any:
        encoded = prepared.encoded.get(role)
        return encoded.lengths(max_length) if encoded is not None else []

    def batch_width(longest: int) -> int:  # as TextBatches pads
        return int(padded_width(longest, multiple, max_length))

    def probe_batches(batch_size: int) -> list[dict[str, Any]]:
        t = cfg.train
        batches = TextBatches(prepared.encoded["train"], prepared.targets("train"),
                              max_length=max_length, batch_size=batch_size,
                              pad_id=prepared.pad_token_id, shuffle=True,
                              group_by_length=t.group_by_length, seed=t.seed,
                              pad_to_multiple_of=multiple)
        plan = batches.plan(0)
        full = [b for b in plan if len(b) == batch_size] or plan
        by_length = sorted(full, key=lambda b: int(batches.lengths[b].max()))
        return [batches.collate(b) for b in (by_length[len(by_length) // 2], by_length[-1])]

    def eval_batch(batch_size: int) -> dict[str, Any]:
        longest: tuple[int, Any, list[int]] | None = None
        for role in ("validation", "test"):
            if prepared.encoded.get(role) is None:
                continue
            batches = TextBatches(prepared.encoded[role], prepared.targets(role),
                                  max_length=max_length, batch_size=batch_size,
                                  pad_id=prepared.pad_token_id, shuffle=False,
                                  pad_to_multiple_of=multiple)
            for b in batches.plan(0):
                tokens = padded_width(int(batches.lengths[b].max()), multiple,
                                      max_length) * len(b)
                if longest is None or tokens > longest[0]:
                    longest = (tokens, batches, b)
        assert longest is not None, "no evaluation split"
        return longest[1].collate(longest[2])

    def meta_model() -> Any:
        return meta_classifier(
            num_labels=num_labels, pretrained=sources.get("weights"),
            architecture=architecture, vocab_size=prepared.vocab_size,
            pad_token_id=prepared.pad_token_id, pooling=cfg.model.pooling,
            dropout=cfg.model.dropout, attention_dropout=resolve_attention_dropout(cfg))

    shape: Any = architecture
    if shape is None:
        config_file = _Path(sources.get("weights") or "") / "config.json"
        shape = config_file.read_text(encoding="utf-8") if config_file.is_file() else None
    # The attention dropout changes the saved activations (the unfused attention keeps its
    # probabilities), so the cached profile is keyed by it too.
    key = None if shape is None else [shape, prepared.vocab_size, prepared.facts.pad_token_id,
                                      num_labels, cfg.model.pooling, max_length,
                                      resolve_attention_dropout(cfg)]
    return PlanningSpec(
        model_name=str(cfg.model.name) if cfg.model.architecture is None else "architecture",
        max_length=max_length, lengths=lengths, probe_batches=probe_batches,
        meta_model=meta_model, profile_key=key, eval_batch=eval_batch, batch_width=batch_width)
