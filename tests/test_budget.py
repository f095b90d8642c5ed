"""``entrena.units.parse_budget``: the one parser of ``--budget`` and ``--deadline``."""

from __future__ import annotations

import pytest

from entrena.units import Budget, format_usd, parse_budget


@pytest.mark.parametrize(("text", "expected"), [
    ("20usd", Budget(usd=20.0)), ("20 USD", Budget(usd=20.0)), ("$20", Budget(usd=20.0)),
    ("20$", Budget(usd=20.0)), ("20", Budget(usd=20.0)), ("0.5usd", Budget(usd=0.5)),
    ("30m", Budget(seconds=1800.0)), ("2h", Budget(seconds=7200.0)),
    ("1.5d", Budget(seconds=129600.0)), ("90s", Budget(seconds=90.0)),
])
def test_amounts_and_durations(text, expected):
    assert parse_budget(text) == expected


def test_a_bare_number_takes_the_given_unit():
    assert parse_budget("90", bare="s") == Budget(seconds=90.0)
    assert parse_budget(15) == Budget(usd=15.0)


@pytest.mark.parametrize("text", ["", "abc", "20eur", "-5", "2 hours", "h2"])
def test_malformed_limits_name_the_accepted_forms(text):
    with pytest.raises(ValueError, match=r"write an amount such as '20usd'.*'30m'"):
        parse_budget(text, what="--budget")


@pytest.mark.parametrize("text", ["0usd", "0", "0m"])
def test_limits_must_be_positive(text):
    with pytest.raises(ValueError, match="must be"):
        parse_budget(text)


def test_format_usd():
    assert format_usd(0.0421) == "$0.042"
    assert format_usd(12.5) == "$12.50"
    assert format_usd(1234.0) == "$1,234"
    assert format_usd(None) == "-"
    assert str(Budget(usd=3.0)) == "$3.00" and str(Budget(seconds=5400)) == "1h 30m"
