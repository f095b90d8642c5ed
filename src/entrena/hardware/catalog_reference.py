"""The hardware catalog as Markdown tables, with the source and date of every number.

``docs/reference/catalog.md`` is rendered from the shipped ``catalog.yaml`` by
:func:`catalog_reference_markdown` (``python -m entrena.cli.docs_reference`` regenerates it;
``tests/test_docs.py`` checks that it is up to date). The file is read as it is written, not
through :func:`~entrena.hardware.catalog.load_catalog`, so every number keeps its source id and
note, and an unknown number shows as unknown rather than as a default.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from entrena.hardware.catalog import CATALOG_FILE

__all__ = ["catalog_reference_markdown"]

_DTYPES = ("fp32", "tf32", "fp16", "bf16")
_UNKNOWN = "—"


def _cell(text: Any) -> str:
    """One table cell: newlines collapsed, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _number(raw: Any, sources: set[str], notes: list[str], label: str) -> str:
    """A catalog number (``null`` or ``{value, source, note}``) as its value; the source id
    goes to ``sources`` and a note, prefixed with ``label``, to ``notes``."""
    if raw is None:
        return _UNKNOWN
    if not isinstance(raw, dict):  # a plain number (user files only)
        return _cell(raw)
    if raw.get("source"):
        sources.add(str(raw["source"]))
    if raw.get("note"):
        notes.append(f"{label}: {raw['note']}")
    return _cell(f"{raw['value']:g}" if isinstance(raw["value"], float) else raw["value"])


def _source_list(sources: set[str]) -> str:
    return ", ".join(f"`{s}`" for s in sorted(sources))


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return [f"| {' | '.join(header)} |", f"|{'---|' * len(header)}",
            *(f"| {' | '.join(row)} |" for row in rows), ""]


def _cpu_section(name: str, raw: dict[str, Any]) -> list[str]:
    rows = []
    for table, dtype in (("flop_per_cycle_fp32", "fp32"), ("flop_per_cycle_bf16", "bf16")):
        for isa, number in (raw.get(table) or {}).items():
            sources: set[str] = set()
            notes: list[str] = []
            value = _number(number, sources, notes, isa)
            rows.append([f"`{isa}`", dtype, value, _source_list(sources),
                         _cell("; ".join(notes))])
    intro = [f"`{name}`: {_cell(raw.get('note', ''))} FLOP per cycle and core by "
             "instruction set (chosen from the CPU's flags) and matrix dtype:", ""]
    return intro + _table(["instruction set", "dtype", "FLOP / cycle / core", "source",
                           "note"], rows)


def _accelerator_rows(accelerators: dict[str, Any]) -> list[list[str]]:
    rows = []
    for name, raw in accelerators.items():
        if raw.get("kind") == "cpu":
            continue
        sources: set[str] = set()
        notes = [raw["note"]] if raw.get("note") else []
        peaks = raw.get("peak_tflops") or {}
        names = ", ".join(f"`{a}`" for a in raw.get("aliases") or [])
        rows.append([
            f"`{name}`" + (f" ({names})" if names else ""), raw.get("kind", ""),
            _number(raw.get("memory_gib"), sources, notes, "memory"),
            _number(raw.get("bandwidth_gbps"), sources, notes, "bandwidth"),
            *(_number(peaks.get(d), sources, notes, d) for d in _DTYPES),
            "yes" if raw.get("bf16") else "no",
            _source_list(sources), _cell("; ".join(notes)),
        ])
    return rows


def _offer_rows(offers: dict[str, Any]) -> list[list[str]]:
    rows = []
    for name, raw in offers.items():
        sources: set[str] = set()
        notes = [raw["note"]] if raw.get("note") else []
        if raw.get("host_included") is False:
            notes.insert(0, "host not included")
        rows.append([
            f"`{name}`", _cell(raw.get("provider", "")), _cell(raw.get("instance", "")),
            f"{raw.get('count', 1)} x `{raw.get('accelerator', '')}`",
            _cell(raw.get("region") or _UNKNOWN),
            _number(raw.get("usd_per_hour"), sources, notes, "on demand"),
            _number(raw.get("usd_per_hour_spot"), sources, notes, "spot"),
            _source_list(sources), _cell("; ".join(notes)),
        ])
    return rows


def catalog_reference_markdown(path: str | Path = CATALOG_FILE) -> str:
    """Render a catalog file as Markdown: sources, accelerators, offers, efficiency factors.

    Args:
        path: The catalog YAML (default: the shipped one).

    Returns:
        Markdown text ending with a newline; it depends only on the file.
    """
    raw = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    accelerators = raw.get("accelerators") or {}
    lines = ["_Generated from `src/entrena/hardware/catalog.yaml`; edit that file, not this "
             "text. Unknown numbers (`null` in the file) show as —._", "",
             "### Accelerators", "",
             "Memory in GiB, bandwidth in GB/s, dense peaks (no 2:4 sparsity) in TFLOP/s; "
             "`bf16`: whether the device runs bf16 natively.", ""]
    lines += _table(["name (aliases)", "kind", "memory GiB", "bandwidth GB/s",
                     *(f"{d} TFLOP/s" for d in _DTYPES), "bf16", "sources", "notes"],
                    _accelerator_rows(accelerators))
    for name, acc in accelerators.items():
        if acc.get("kind") == "cpu":
            lines += _cpu_section(name, acc)
    lines += ["### Offers", "",
              "Prices in USD per hour per instance (`count` accelerators); spot: the "
              "cheapest listed zone unless a note says otherwise.", ""]
    lines += _table(["offer", "provider", "instance", "accelerators", "region",
                     "USD/h", "spot USD/h", "sources", "notes"],
                    _offer_rows(raw.get("offers") or {}))
    efficiency_rows = []
    for key, number in (raw.get("efficiency") or {}).items():
        sources: set[str] = set()
        notes: list[str] = []
        value = _number(number, sources, notes, key)
        efficiency_rows.append([f"`{key}`", value, _source_list(sources),
                                _cell("; ".join(n.removeprefix(f"{key}: ") for n in notes))])
    lines += ["### Efficiency factors", "",
              "Achieved model FLOP/s over the catalog peak of the precision used, where no "
              "probe ran on the device; `gpu_seconds_per_op` is the fixed GPU cost of one ATen "
              "operator of a training step, in seconds.", ""]
    lines += _table(["key", "value", "source", "note"], efficiency_rows)
    local = raw.get("local_usd_per_hour")
    lines += ["### This machine's price", "",
              f"`local_usd_per_hour`: {_number(local, set(), [], 'local')} "
              "(unknown means free; set it in your own catalog file).", "",
              "### Sources", ""]
    source_rows = [[f"`{source_id}`", _cell(source.get("citation", "")),
                    _cell(source.get("date", ""))]
                   for source_id, source in (raw.get("sources") or {}).items()]
    lines += _table(["id", "citation", "date read"], source_rows)
    return "\n".join(lines).rstrip("\n") + "\n"
