"""``entrena plan --llm``: memory of a language model's inference or fine-tuning, and which
catalog hardware holds it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from entrena.errors import ConfigError
from entrena.hardware.catalog import Accelerator, Offer, load_catalog
from entrena.planning.llm import devices_needed, llm_memory, load_llm_shape
from entrena.planning.memory import GPU_MEMORY_RESERVE
from entrena.units import format_bytes, format_usd

__all__ = ["LlmPlanResult", "plan_llm"]


@dataclass
class LlmPlanResult:
    """What ``entrena plan --llm`` found.

    Attributes:
        document: The JSON document (``model``, ``workload``, ``memory``, ``options``,
            ``recommendation``).
    """

    document: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return self.document

    def render(self) -> Any:
        """A Rich renderable: the memory terms and the hardware that holds them."""
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        doc = self.document
        memory, work = doc["memory"], doc["workload"]
        head = Text(
            f"{doc['model']['name']}: {doc['model']['parameters'] / 1e9:.2f}B parameters; "
            f"{work['mode']} at {work['context']} tokens x batch {work['batch_size']}, "
            f"weights {memory['quantization']}"
            + ("" if work["mode"] == "inference" else
               f", LoRA on {work['lora_targets']}, "
               + ("gradient checkpointing" if work["gradient_checkpointing"]
                  else "no gradient checkpointing")) + "\n"
            f"weights {format_bytes(memory['weights_bytes'])}, KV cache "
            f"{format_bytes(memory['kv_cache_bytes'])}, adapters/optimizer "
            f"{format_bytes(memory['adapter_and_optimizer_bytes'])}, activations "
            f"{format_bytes(memory['activations_bytes'])}: total "
            f"{format_bytes(memory['total_bytes'])}")
        table = Table(title="hardware (fewest devices, then cheapest)")
        for column in ("option", "device", "devices needed", "fits", "$/h", "spot $/h"):
            table.add_column(column)
        for option in doc["options"]:
            table.add_row(option["name"], f"{option['count']}x {option['accelerator']}",
                          str(option["devices_needed"] or "?"),
                          {True: "yes", False: "no", None: "?"}[option["fits"]],
                          format_usd(option["usd_per_hour"]),
                          format_usd(option["usd_per_hour_spot"]))
        rec = doc["recommendation"]
        return Group(head, table, Text(f"recommendation: {rec['summary']}"))


def plan_llm(model: str | Path, *, mode: str = "inference", context: int = 4096,
             batch_size: int = 1, quantization: str = "fp16", lora_rank: int = 16,
             hardware: list[str] | None = None, catalog: str | Path | None = None,
             gradient_checkpointing: bool = True, activation_bytes: int = 2,
             logits_positions: int | None = None, lora_dropout: bool = False,
             lora_targets: str | tuple[str, ...] = "all-linear",
             lora_layers: int | None = None) -> LlmPlanResult:
    """Plan a language model's memory and the catalog hardware that holds it.

    Args:
        model: A Hugging Face ``config.json`` (or its folder) or a known name
            (``llama-3-8b``, ``llama-3-70b``, ``mistral-7b``, ``qwen2.5-7b``, ``smollm2-135m``).
        mode: ``inference``, ``lora``, ``qlora`` or ``full``.
        context: Tokens per sequence.
        batch_size: Sequences at once.
        quantization: Weights as ``fp16``, ``int8`` or ``int4`` (QLoRA is always NF4).
        lora_rank: Adapter rank for ``lora``/``qlora`` (on every linear projection).
        gradient_checkpointing: Training keeps each layer's input only (the LLM default).
        activation_bytes: Bytes per activation: 2 (16-bit, the default) or 4 (fp32, a CPU
            without bf16).
        logits_positions: Positions whose logits are computed (default every one, b·s;
            entrena's LLM fine-tuning computes its target tokens' only), each with an fp32
            copy for the loss.
        lora_dropout: LoRA dropout is on (default off).
        lora_targets: ``all-linear`` or projection names
            (:func:`~entrena.planning.llm.llm_memory` has the terms).
        lora_layers: LoRA on the last N decoder layers only (default: all).
        hardware: Only these catalog names (offers or accelerators).
        catalog: A user catalog file.

    Returns:
        The :class:`LlmPlanResult`.

    Raises:
        ConfigError: Unknown model, missing config fields (named), bad mode, quantisation,
            sizes or hardware names.
    """
    from entrena.api.planning import resolve_hardware

    shape = load_llm_shape(model)
    merged = load_catalog(catalog)
    if activation_bytes not in (2, 4):
        raise ConfigError(f"--activation-bytes: {activation_bytes} is not 2 (16-bit) or 4 "
                          "(fp32)")
    if lora_layers is not None and lora_layers < 1:
        raise ConfigError(f"--lora-layers: {lora_layers} is not a positive count of decoder "
                          "layers; leave it out to adapt every layer")
    if logits_positions is not None and logits_positions < 1:
        raise ConfigError(f"--logits-positions: {logits_positions} is not a positive count "
                          "of positions; leave it out for every position (b·s)")
    memory = llm_memory(shape, mode=mode, context=context, batch_size=batch_size,
                        quantization=quantization, lora_rank=lora_rank,
                        lora_targets=lora_targets,
                        gradient_checkpointing=gradient_checkpointing,
                        activation_bytes=activation_bytes, logits_positions=logits_positions,
                        lora_dropout=lora_dropout, lora_layers=lora_layers)
    entries: list[Offer | Accelerator] = []
    if hardware:
        entries = [e for e in resolve_hardware(hardware, merged) if not isinstance(e, str)]
    else:
        entries = [a for a in merged.accelerators.values() if a.kind != "cpu"]
        entries += list(merged.offers.values())
    options: list[dict[str, Any]] = []
    for entry in entries:
        acc = entry.accelerator if isinstance(entry, Offer) else entry
        count = entry.count if isinstance(entry, Offer) else 1
        needed = devices_needed(memory.total_bytes, acc.memory_bytes, GPU_MEMORY_RESERVE)
        options.append({
            "name": entry.name, "kind": "tpu" if acc.kind == "tpu" else
            ("cloud" if isinstance(entry, Offer) else "gpu"),
            "accelerator": acc.name, "count": count,
            "memory_bytes": int(acc.memory_bytes) if acc.memory_bytes else None,
            "devices_needed": needed,
            "fits": None if needed is None else needed <= count,
            "usd_per_hour": entry.usd_per_hour if isinstance(entry, Offer) else None,
            "usd_per_hour_spot": entry.usd_per_hour_spot if isinstance(entry, Offer) else None,
            "host_included": entry.host_included if isinstance(entry, Offer) else None,
        })
    options.sort(key=lambda o: (o["devices_needed"] is None, o["devices_needed"] or 0,
                                o["usd_per_hour"] is None, o["usd_per_hour"] or 0.0))
    priced = [o for o in options if o["fits"] and o["usd_per_hour"] is not None]
    single = [o for o in options if o["devices_needed"] == 1 and o["kind"] != "cloud"]
    if priced:
        best = min(priced, key=lambda o: o["usd_per_hour"])
        summary = (f"{best['name']} ({best['count']}x {best['accelerator']}) is the cheapest "
                   f"offer that holds it, {format_usd(best['usd_per_hour'])}/h"
                   + (f" ({format_usd(best['usd_per_hour_spot'])}/h spot)"
                      if best["usd_per_hour_spot"] is not None else ""))
    elif any(o["fits"] for o in options):
        best = next(o for o in options if o["fits"])
        summary = f"{best['name']} holds it (no priced offer does)"
    else:
        best = None
        summary = ("no catalog option holds it: quantise (--quantization int4), shorten "
                   "--context, lower --batch-size, or shard it over more devices")
    if single:
        smallest = min(single, key=lambda o: o["memory_bytes"] or 0)
        summary += f"; the smallest single device that holds it: {smallest['accelerator']}"
    document = {
        "model": {"name": shape.name, "source": shape.source, "parameters": shape.parameters,
                  "trainable_parameters": memory.trainable_parameters,
                  "layers": shape.layers, "hidden_size": shape.hidden_size,
                  "heads": shape.heads, "kv_heads": shape.kv_heads,
                  "head_dim": shape.head_dim, "vocab_size": shape.vocab_size},
        "workload": {"mode": mode, "context": context, "batch_size": batch_size,
                     "quantization": memory.quantization, "lora_rank": lora_rank,
                     "lora_targets": lora_targets if isinstance(lora_targets, str)
                     else ",".join(lora_targets),
                     "gradient_checkpointing": gradient_checkpointing and mode != "inference",
                     "activation_bytes": activation_bytes,
                     "logits_positions": logits_positions, "lora_dropout": lora_dropout,
                     "lora_layers": lora_layers},
        "memory": memory.as_dict(),
        "options": options,
        "recommendation": {"option": best["name"] if best else None, "summary": summary},
        "catalog": {"files": merged.files},
    }
    return LlmPlanResult(document)
