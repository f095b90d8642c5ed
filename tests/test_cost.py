"""Cost per experiment: the hourly price of this machine and ``metrics.json``'s ``cost``."""

from __future__ import annotations

import pytest

from entrena.errors import ConfigError
from entrena.hardware.catalog import load_catalog
from entrena.hardware.cost import hourly_price, run_cost


def test_a_named_instance_is_priced_by_its_catalog_offer():
    catalog = load_catalog(env={})
    offer = catalog.offers["aws-p3.2xlarge"]
    price = hourly_price(catalog, env={"ENTRENA_INSTANCE": "p3.2xlarge"}, dmi_product="")
    assert price.usd_per_hour == offer.usd_per_hour
    assert "catalog offer aws-p3.2xlarge" in price.source and "on demand" in price.source
    spot = hourly_price(catalog, env={"ENTRENA_INSTANCE": "aws-p3.2xlarge:spot"},
                        dmi_product="")
    assert spot.usd_per_hour == offer.usd_per_hour_spot and "spot" in spot.source


def test_the_dmi_product_name_finds_an_aws_instance():
    catalog = load_catalog(env={})
    price = hourly_price(catalog, env={}, dmi_product="g5.xlarge")
    assert price.usd_per_hour == catalog.offers["aws-g5.xlarge"].usd_per_hour
    assert "DMI" in price.source


def test_local_price_from_a_catalog_file_else_free_with_the_reason(tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text("local_usd_per_hour: 0.25\n", encoding="utf-8")
    price = hourly_price(load_catalog(mine, env={}), env={}, dmi_product="Standard PC")
    assert price.usd_per_hour == 0.25 and "local_usd_per_hour" in price.source
    assert str(mine) in price.source
    free = hourly_price(load_catalog(env={}), env={}, dmi_product="Standard PC")
    assert free.usd_per_hour == 0.0
    assert free.source.startswith("free: not a known cloud instance")
    cost = run_cost(5400.0, price)
    assert cost == {"usd": 0.375, "usd_per_hour": 0.25, "wall_time_s": 5400.0,
                    "source": price.source}


def test_an_unknown_instance_name_is_refused_with_the_closest_offer():
    with pytest.raises(ConfigError, match=r"ENTRENA_INSTANCE='p3.2xlarg': no such offer .*"
                                          r"did you mean 'aws-p3.2xlarge'"):
        hourly_price(load_catalog(env={}), env={"ENTRENA_INSTANCE": "p3.2xlarg"})
    with pytest.raises(ConfigError, match="after ':' write 'spot' or 'on-demand'"):
        hourly_price(load_catalog(env={}), env={"ENTRENA_INSTANCE": "p3.2xlarge:cheap"})
