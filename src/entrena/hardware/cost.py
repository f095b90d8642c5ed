"""What a run cost: the hourly price of this machine, and wall time × price.

The price comes from the hardware catalog, in this order:

1. the catalog offer this machine is, when it is a known cloud instance: named by the
   ``ENTRENA_INSTANCE`` environment variable (an offer's catalog name or instance name, e.g.
   ``aws-p3.2xlarge`` or ``p3.2xlarge``; ``:spot`` after it takes the spot price), else read
   from the DMI product name (``/sys/class/dmi/id/product_name``, which is the instance type
   on AWS EC2);
2. ``local_usd_per_hour`` of a catalog file (``ENTRENA_CATALOG``), this machine's own cost;
3. otherwise 0 USD, with the reason in ``source``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from entrena.errors import ConfigError
from entrena.hardware.catalog import Catalog, Offer, closest_names

__all__ = ["INSTANCE_ENV", "HourlyPrice", "hourly_price", "run_cost"]

INSTANCE_ENV = "ENTRENA_INSTANCE"
"""Environment variable naming the catalog offer this machine is (``aws-p3.2xlarge``,
``p3.2xlarge:spot``)."""

_DMI_PRODUCT = Path("/sys/class/dmi/id/product_name")


@dataclass(frozen=True)
class HourlyPrice:
    """This machine's price.

    Attributes:
        usd_per_hour: USD per hour of the whole machine (0 when unpriced).
        source: Where the price comes from, or why it is 0, in words.
    """

    usd_per_hour: float
    source: str


def _find_offer(catalog: Catalog, name: str) -> Offer | None:
    key = name.strip().lower()
    for offer in catalog.offers.values():
        if key in {offer.name.lower(), offer.instance.lower()}:
            return offer
    return None


def _dmi_product() -> str | None:
    try:
        return _DMI_PRODUCT.read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def hourly_price(catalog: Catalog, *, env: dict[str, str] | None = None,
                 dmi_product: str | None = None) -> HourlyPrice:
    """The hourly price of this machine (see the module docstring for the order).

    Args:
        catalog: The merged hardware catalog (offers, ``local_usd_per_hour``).
        env: Environment variables (default ``os.environ``).
        dmi_product: The DMI product name (default: read from ``/sys``; tests pass one).

    Returns:
        The :class:`HourlyPrice`; 0 USD with the reason when nothing prices this machine.

    Raises:
        ConfigError: ``ENTRENA_INSTANCE`` names no catalog offer, or the offer has no price
            (on demand, or spot with ``:spot``).
    """
    env = os.environ if env is None else env
    named = (env.get(INSTANCE_ENV) or "").strip()
    if named:
        name, _, kind = named.partition(":")
        offer = _find_offer(catalog, name)
        if offer is None:
            close = closest_names(name, list(catalog.offers))
            raise ConfigError(
                f"{INSTANCE_ENV}={named!r}: no such offer in the hardware catalog"
                + (f"; did you mean {close[0]!r}?" if close else "")
                + "; name an offer of `entrena plan` (docs/reference/catalog.md), or add "
                  "yours to a catalog file (ENTRENA_CATALOG)")
        if kind not in ("", "spot", "on-demand"):
            raise ConfigError(f"{INSTANCE_ENV}={named!r}: after ':' write 'spot' or "
                              f"'on-demand', got {kind!r}")
        spot = kind == "spot"
        price = offer.usd_per_hour_spot if spot else offer.usd_per_hour
        if price is None:
            raise ConfigError(f"{INSTANCE_ENV}={named!r}: the catalog has no "
                              f"{'spot' if spot else 'on-demand'} price for {offer.name}; "
                              f"give it one in a catalog file (ENTRENA_CATALOG)")
        return HourlyPrice(price, _offer_source(offer, spot, f"{INSTANCE_ENV}"))
    product = dmi_product if dmi_product is not None else _dmi_product()
    offer = _find_offer(catalog, product) if product else None
    if offer is not None and offer.usd_per_hour is not None:
        return HourlyPrice(offer.usd_per_hour,
                           _offer_source(offer, False, "DMI product name"))
    local = catalog.local_usd_per_hour
    if local is not None:
        return HourlyPrice(local.value, f"local_usd_per_hour ({local.source})")
    return HourlyPrice(0.0, "free: not a known cloud instance and no local_usd_per_hour; "
                            "set local_usd_per_hour in a catalog file (ENTRENA_CATALOG) or "
                            f"{INSTANCE_ENV} to an offer's name")


def _offer_source(offer: Offer, spot: bool, found_by: str) -> str:
    number = offer.figures.get("usd_per_hour_spot" if spot else "usd_per_hour")
    cited = ""
    if number is not None:
        cited = f"; {number.source}" + (f", {number.date}" if number.date else "")
    return (f"catalog offer {offer.name} ({offer.provider} {offer.instance}, "
            f"{'spot' if spot else 'on demand'}; found by {found_by}{cited})")


def run_cost(wall_time_s: float, price: HourlyPrice) -> dict[str, Any]:
    """The ``cost`` section of ``metrics.json``.

    Args:
        wall_time_s: Wall-clock seconds the run held the machine.
        price: This machine's :class:`HourlyPrice`.

    Returns:
        ``{"usd": wall_time_s / 3600 × usd_per_hour, "usd_per_hour", "wall_time_s",
        "source"}``.
    """
    return {"usd": wall_time_s / 3600.0 * price.usd_per_hour,
            "usd_per_hour": price.usd_per_hour, "wall_time_s": wall_time_s,
            "source": price.source}
