"""The hardware catalog: accelerators (memory, bandwidth, peaks) and cloud offers (prices).

The data lives in ``catalog.yaml`` beside this module (shipped as package data); a user file
(``--catalog FILE`` or ``ENTRENA_CATALOG``) adds entries or overrides fields of existing ones,
merged by name. Every number is ``null`` (unknown) or ``{value, source}`` whose source names a
citation and a date; a user file may also write plain numbers (their source is the file).

Validation collects every problem (a missing required number, a negative number, an unknown
accelerator or source, a wrong type) and raises one :class:`~entrena.errors.ConfigError`
naming the file and the key of each.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from entrena.errors import ConfigError
from entrena.hardware.validation import (
    Errors,
    Number,
    check_keys,
    closest_names,
    parse_number,
    scan_user_numbers,
)

__all__ = ["Number", "Accelerator", "Offer", "Catalog", "load_catalog", "CATALOG_FILE",
           "CATALOG_ENV", "closest_names", "PRECISION_DTYPE"]

CATALOG_FILE = Path(__file__).with_name("catalog.yaml")
"""The shipped catalog."""

CATALOG_ENV = "ENTRENA_CATALOG"
"""Environment variable naming a user catalog file (the ``--catalog`` option wins)."""

PRECISION_DTYPE = {"32-true": "fp32", "bf16-mixed": "bf16", "bf16-true": "bf16",
                   "16-mixed": "fp16"}
"""Which peak of the catalog a training precision runs at (matrix maths)."""

_DTYPES = ("fp32", "tf32", "fp16", "bf16")
_KINDS = ("cpu", "gpu", "tpu")
_ACCELERATOR_KEYS = {"kind", "aliases", "match", "note", "memory_gib", "bandwidth_gbps",
                     "peak_tflops", "bf16", "flop_per_cycle_fp32",
                     "flop_per_cycle_bf16"}
_OFFER_KEYS = {"provider", "instance", "accelerator", "count", "region", "usd_per_hour",
               "usd_per_hour_spot", "host_included", "note"}
_TOP_KEYS = {"sources", "accelerators", "offers", "efficiency", "local_usd_per_hour"}
_EFFICIENCY_KEYS = {"cpu_fp32", "cpu_avx512", "cpu_avx512_bf16", "cpu_amx_bf16", "gpu_fp32",
                    "gpu_mixed", "tpu_bf16", "gpu_seconds_per_op", "cpu_seconds_per_op"}


@dataclass(frozen=True)
class Accelerator:
    """One device type.

    Attributes:
        name: Catalog name (``H100``).
        kind: ``cpu``, ``gpu`` or ``tpu``.
        memory_bytes: Device memory (per device), or ``None`` when unknown.
        bandwidth_bytes_per_s: Memory bandwidth, or ``None``.
        peak_flops: Dense peak FLOP/s per dtype (``fp32``, ``tf32``, ``fp16``, ``bf16``);
            unknown dtypes are absent.
        bf16: Native bfloat16 support.
        aliases: Other names ``--hardware`` accepts.
        match: Substrings of the device name torch reports that identify this type.
        figures: The raw :class:`Number` of every figure (for reports).
        note: Free text.
    """

    name: str
    kind: str
    memory_bytes: float | None
    bandwidth_bytes_per_s: float | None
    peak_flops: dict[str, float]
    bf16: bool
    aliases: tuple[str, ...] = ()
    match: tuple[str, ...] = ()
    figures: dict[str, Number] = field(default_factory=dict)
    note: str | None = None


@dataclass(frozen=True)
class Offer:
    """An instance one can rent.

    Attributes:
        name: Catalog name (``aws-p3.2xlarge``).
        provider: ``aws``, ``gcp``, ``azure``, ``colab``, ``paperspace``, ``runpod``…
        instance: The provider's instance or product name.
        accelerator: The :class:`Accelerator` it carries.
        count: How many of them.
        usd_per_hour: On-demand price of the whole instance, or ``None`` when unknown.
        usd_per_hour_spot: Spot / preemptible price, or ``None``.
        region: Where the price was read.
        host_included: ``False`` when the price covers the accelerator only (GCP GPU rows).
        figures: The raw :class:`Number` of the prices.
        note: Free text.
    """

    name: str
    provider: str
    instance: str
    accelerator: Accelerator
    count: int
    usd_per_hour: float | None
    usd_per_hour_spot: float | None
    region: str | None = None
    host_included: bool = True
    figures: dict[str, Number] = field(default_factory=dict)
    note: str | None = None


@dataclass
class Catalog:
    """The merged catalog.

    Attributes:
        accelerators: By name.
        offers: By name.
        efficiency: MFU assumed without a probe: ``cpu_fp32`` (AVX2/FMA or SSE),
            ``cpu_avx512``, ``cpu_avx512_bf16``, ``cpu_amx_bf16`` (of the nominal peak of that
            instruction set), ``gpu_fp32``, ``gpu_mixed``, ``tpu_bf16``; and
            ``gpu_seconds_per_op`` and ``cpu_seconds_per_op``, the fixed cost of one operator
            in eager mode on that device (:class:`Number` or ``None``).
        local_usd_per_hour: This machine's own hourly cost, or ``None`` (free).
        files: The files merged, shipped one first.
    """

    accelerators: dict[str, Accelerator]
    offers: dict[str, Offer]
    efficiency: dict[str, Number | None]
    local_usd_per_hour: Number | None
    files: list[str]

    def names(self) -> list[str]:
        """Every name ``--hardware`` accepts (offers, accelerators and their aliases)."""
        names = list(self.offers)
        for acc in self.accelerators.values():
            if acc.kind != "cpu":
                names.extend([acc.name, *acc.aliases])
        return names

    def find(self, name: str) -> Offer | Accelerator | None:
        """An offer or accelerator by name or alias, case-insensitively."""
        key = name.strip().lower()
        for offer in self.offers.values():
            if offer.name.lower() == key:
                return offer
        for acc in self.accelerators.values():
            if acc.kind != "cpu" and key in {acc.name.lower(), *(a.lower() for a in acc.aliases)}:
                return acc
        return None

    def accelerator_for_device(self, device_name: str) -> Accelerator | None:
        """The accelerator whose ``match`` substrings appear in a device name torch reports
        (``"NVIDIA H100 80GB HBM3"`` → ``H100``); the longest match wins."""
        best: tuple[int, Accelerator] | None = None
        lowered = device_name.lower()
        for acc in self.accelerators.values():
            for pattern in acc.match:
                if pattern.lower() in lowered and (best is None or len(pattern) > best[0]):
                    best = (len(pattern), acc)
        return best[1] if best else None


def _accelerator(name: str, raw: dict[str, Any], errors: Errors,
                 sources: dict[str, dict[str, Any]], user_file: str | None,
                 new: bool) -> Accelerator | None:
    key = f"accelerators.{name}"
    check_keys(raw, _ACCELERATOR_KEYS, key, errors)
    kind = raw.get("kind")
    if kind not in _KINDS:
        errors.add(f"{key}.kind", f"must be one of {', '.join(_KINDS)}, got {kind!r}")
        return None
    figures: dict[str, Number] = {}
    if kind == "cpu":
        for table in ("flop_per_cycle_fp32", "flop_per_cycle_bf16"):
            for flag, raw_number in (raw.get(table) or {}).items():
                number = parse_number(raw_number, f"{key}.{table}.{flag}", errors, sources,
                                      user_file, required=True)
                if number:
                    figures[f"{table}.{flag}"] = number
        return Accelerator(name, "cpu", None, None, {}, False, figures=figures,
                           note=raw.get("note"))
    required = new and user_file is not None
    if "memory_gib" not in raw and not required and user_file is None:
        errors.add(f"{key}.memory_gib", "is missing (write null when unknown)")
    memory = parse_number(raw.get("memory_gib"), f"{key}.memory_gib", errors, sources, user_file,
                     required=required)
    bandwidth = parse_number(raw.get("bandwidth_gbps"), f"{key}.bandwidth_gbps", errors, sources,
                        user_file, required=False)
    peaks: dict[str, float] = {}
    raw_peaks = raw.get("peak_tflops") or {}
    if not isinstance(raw_peaks, dict):
        errors.add(f"{key}.peak_tflops", "must be a mapping of fp32, tf32, fp16, bf16")
        raw_peaks = {}
    check_keys(raw_peaks, set(_DTYPES), f"{key}.peak_tflops", errors)
    for dtype in _DTYPES:
        number = parse_number(raw_peaks.get(dtype), f"{key}.peak_tflops.{dtype}", errors, sources,
                         user_file, required=False)
        if number is not None:
            peaks[dtype] = number.value * 1e12
            figures[f"peak_tflops.{dtype}"] = number
    if required and not peaks:
        errors.add(f"{key}.peak_tflops", "needs at least one peak (fp32, tf32, fp16 or bf16)")
    if memory:
        figures["memory_gib"] = memory
    if bandwidth:
        figures["bandwidth_gbps"] = bandwidth
    bf16 = raw.get("bf16", False)
    if not isinstance(bf16, bool):
        errors.add(f"{key}.bf16", f"must be true or false, got {bf16!r}")
        bf16 = False
    return Accelerator(name=name, kind=kind,
                       memory_bytes=memory.value * 2**30 if memory else None,
                       bandwidth_bytes_per_s=bandwidth.value * 1e9 if bandwidth else None,
                       peak_flops=peaks, bf16=bf16,
                       aliases=tuple(str(a) for a in raw.get("aliases") or ()),
                       match=tuple(str(m) for m in raw.get("match") or ()),
                       figures=figures, note=raw.get("note"))


def _offer(name: str, raw: dict[str, Any], accelerators: dict[str, Accelerator],
           errors: Errors, sources: dict[str, dict[str, Any]], user_file: str | None,
           new: bool) -> Offer | None:
    key = f"offers.{name}"
    check_keys(raw, _OFFER_KEYS, key, errors)
    required = new and user_file is not None
    for field_name in ("provider", "accelerator", "count"):
        if field_name not in raw:
            errors.add(f"{key}.{field_name}", "is missing")
    acc_name = raw.get("accelerator")
    accelerator = accelerators.get(str(acc_name)) if acc_name is not None else None
    if acc_name is not None and accelerator is None:
        choices = closest_names(str(acc_name), [a for a in accelerators if a != "cpu"])
        errors.add(f"{key}.accelerator", f"unknown accelerator {acc_name!r}"
                   + (f"; did you mean {choices[0]!r}?" if choices else ""))
    count = raw.get("count")
    if "count" in raw and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
        errors.add(f"{key}.count", f"must be a whole number >= 1, got {count!r}")
    if required and "usd_per_hour" not in raw:
        errors.add(f"{key}.usd_per_hour", "is missing (USD per hour of the whole instance)")
    on_demand = parse_number(raw.get("usd_per_hour"), f"{key}.usd_per_hour", errors, sources,
                        user_file, required=required)
    spot = parse_number(raw.get("usd_per_hour_spot"), f"{key}.usd_per_hour_spot", errors, sources,
                   user_file, required=False)
    if accelerator is None or not isinstance(count, int) or isinstance(count, bool) or count < 1:
        return None
    figures = {k: v for k, v in (("usd_per_hour", on_demand), ("usd_per_hour_spot", spot)) if v}
    return Offer(name=name, provider=str(raw.get("provider")),
                 instance=str(raw.get("instance") or name), accelerator=accelerator,
                 count=count, usd_per_hour=on_demand.value if on_demand else None,
                 usd_per_hour_spot=spot.value if spot else None, region=raw.get("region"),
                 host_included=bool(raw.get("host_included", True)), figures=figures,
                 note=raw.get("note"))


def _read(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the catalog file ({exc.strerror or exc}); "
                          f"check the path given to --catalog or {CATALOG_ENV}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        raise ConfigError(f"{path}{where}: not valid YAML ({getattr(exc, 'problem', exc)})"
                          ) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a catalog is a mapping with `accelerators:` and/or "
                          f"`offers:`, got a {type(data).__name__}")
    return data


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict) \
                and not {"value", "source"} & set(value):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def load_catalog(user_file: str | Path | None = None, *,
                 env: dict[str, str] | None = None) -> Catalog:
    """Load the shipped catalog and merge a user file over it.

    Args:
        user_file: A YAML file with ``accelerators:``, ``offers:``, ``efficiency:`` or
            ``local_usd_per_hour:``; entries merge by name (fields of an existing entry are
            replaced one by one; a new entry must give its required numbers). Default: the
            file named by ``ENTRENA_CATALOG``, if set.
        env: Environment variables (default ``os.environ``).

    Returns:
        The merged :class:`Catalog`.

    Raises:
        ConfigError: The user file is unreadable or invalid; the message lists every problem
            with the file and key (a missing or negative number, an unknown accelerator or
            key, with the closest valid name).
    """
    env = os.environ if env is None else env
    if user_file is None and env.get(CATALOG_ENV):
        user_file = env[CATALOG_ENV]
    shipped = _read(CATALOG_FILE)
    sources = dict(shipped.get("sources") or {})
    user: dict[str, Any] = {}
    files = [str(CATALOG_FILE)]
    if user_file is not None:
        path = Path(user_file)
        user = _read(path)
        files.append(str(path))
        sources.update(user.get("sources") or {})
    errors = Errors(files[-1])
    shipped_errors = Errors(files[0])
    check_keys(user, _TOP_KEYS, "(top level)", errors)
    scan_user_numbers(user, errors)

    accelerators: dict[str, Accelerator] = {}
    raw_accelerators = shipped.get("accelerators") or {}
    user_accelerators = user.get("accelerators") or {}
    for name in [*raw_accelerators, *(n for n in user_accelerators if n not in raw_accelerators)]:
        raw = _merge(raw_accelerators.get(name) or {}, user_accelerators.get(name) or {})
        from_user = name in user_accelerators
        parsed = _accelerator(str(name), raw, errors if from_user else shipped_errors,
                              sources, files[-1] if from_user else None,
                              new=name not in raw_accelerators)
        if parsed is not None:
            accelerators[str(name)] = parsed

    offers: dict[str, Offer] = {}
    raw_offers = shipped.get("offers") or {}
    user_offers = user.get("offers") or {}
    for name in [*raw_offers, *(n for n in user_offers if n not in raw_offers)]:
        raw = _merge(raw_offers.get(name) or {}, user_offers.get(name) or {})
        from_user = name in user_offers
        parsed = _offer(str(name), raw, accelerators, errors if from_user else shipped_errors,
                        sources, files[-1] if from_user else None,
                        new=name not in raw_offers)
        if parsed is not None:
            offers[str(name)] = parsed

    raw_efficiency = _merge(shipped.get("efficiency") or {}, user.get("efficiency") or {})
    check_keys(user.get("efficiency") or {}, _EFFICIENCY_KEYS, "efficiency", errors)
    efficiency: dict[str, Number | None] = {}
    for name in sorted(_EFFICIENCY_KEYS):
        from_user = name in (user.get("efficiency") or {})
        number = parse_number(raw_efficiency.get(name), f"efficiency.{name}",
                         errors if from_user else shipped_errors, sources,
                         files[-1] if from_user else None, required=False)
        if number is not None and number.value > 1 and not name.endswith("_per_op"):
            errors.add(f"efficiency.{name}", f"is a fraction of the peak (0 to 1), got "
                                             f"{number.value}")
        efficiency[name] = number
    local_raw = user.get("local_usd_per_hour", shipped.get("local_usd_per_hour"))
    local = parse_number(local_raw, "local_usd_per_hour", errors, sources,
                    files[-1] if "local_usd_per_hour" in user else None, required=False)
    problems = shipped_errors.items + errors.items
    if problems:
        raise ConfigError("invalid hardware catalog:\n  " + "\n  ".join(problems))
    return Catalog(accelerators=accelerators, offers=offers, efficiency=efficiency,
                   local_usd_per_hour=local, files=files)
