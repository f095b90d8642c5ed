"""Numbers as people write them in tables (``5,632``, ``1.234,5``, ``12 500``): the styles of
:mod:`entrena.data.numbers`, their detection per column in the tabular tasks, the
``data.number_format`` override, and the saved style reused by ``predict``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import run_cli
from entrena.data import preprocessing as pp
from entrena.data.numbers import (
    DETECTION_ORDER,
    STYLES,
    as_written,
    detect_style,
    parse_numbers,
    unreadable,
)
from entrena.errors import DataError
from test_tabular import make_table, prepare, table_config


def column(*values: object) -> pd.Series:
    return pd.Series(list(values), dtype=object)


def numbers(*values: object, style: str | None) -> list[float]:
    return parse_numbers(column(*values), style).tolist()


# --- parsing and detection ----------------------------------------------------------------

@pytest.mark.parametrize(("style", "written", "value"), [
    ("1234.5", "-1234.5", -1234.5),
    ("1,234.5", "1,234,567.25", 1234567.25),
    ("1.234,5", "+1.234.567,25", 1234567.25),
    ("1 234.5", "1 234 567.25", 1234567.25),
    ("1 234.5", "1\u00a0234.5", 1234.5),  # a no-break space
    ("1 234,5", "1\u202f234\u202f567,25", 1234567.25),  # a narrow no-break space
    ("1 234,5", "-12 500", -12500.0),
    ("1'234.5", "1'234'567.25", 1234567.25),
    ("1234,5", "1234,5", 1234.5),
    ("1,234.5", " 12 ", 12.0),  # ungrouped digits and outer spaces read in every style
    ("1.234,5", ",5", 0.5),
])
def test_each_style_reads_its_numbers(style, written, value):
    assert numbers(written, style=style) == [value]


@pytest.mark.parametrize(("style", "written"), [
    ("1,234.5", "12,5"),       # a group after the first has exactly 3 digits
    ("1,234.5", "1,2345"),
    ("1,234.5", "1234,567"),   # the first group has 1-3 digits
    ("1,234.5", "1.234,5"),
    ("1.234,5", "12.5"),
    ("1 234.5", "12  500"),
    ("1234,5", "1.234,5"),     # no thousands separator in this style
    ("1'234.5", "abc"),
    ("1,234.5", "1,234.5.6"),
])
def test_a_value_that_does_not_follow_the_style_is_nan(style, written):
    assert np.isnan(numbers(written, style=style)[0])


def test_missing_values_numbers_and_the_plain_default():
    assert np.isnan(numbers(None, np.nan, "", "  ", style="1,234.5")).all()
    assert numbers(3.5, 7, "1,000", style="1,234.5") == [3.5, 7.0, 1000.0]  # JSON numbers
    typed = pd.Series([1.5, 2.0, np.nan])
    assert np.array_equal(parse_numbers(typed, "1.234,5"), typed.to_numpy(), equal_nan=True)
    plain = column("12", "1e3", "inf", "12,5", "x")
    expected = pd.to_numeric(plain, errors="coerce").to_numpy(dtype=float)
    for style in (None, "1234.5"):
        assert np.array_equal(parse_numbers(plain, style), expected, equal_nan=True)
    assert pp.as_numbers(column("5,632"), "1,234.5").tolist() == [5632.0]
    assert unreadable(column("1,234", None, "", "12,5", "x"), "1,234.5").tolist() == [3, 4]


def test_an_unknown_style_lists_the_styles():
    with pytest.raises(ValueError) as caught:
        parse_numbers(column("1"), "1,234.50")
    assert str(caught.value) == (
        "unknown number style '1,234.50'; the styles are '1234.5', '1,234.5', '1.234,5', "
        "'1 234.5', '1 234,5', \"1'234.5\", '1234,5' (did you mean '1,234.5'?)")


@pytest.mark.parametrize(("values", "style", "read"), [
    (("5,632", "12", "1,234,567"), "1,234.5", [5632, 12, 1234567]),
    (("5,632", "12,5"), "1234,5", [5.632, 12.5]),  # 12,5 cannot be thousands: a decimal comma
    (("3,14", "12,5"), "1234,5", [3.14, 12.5]),
    (("1.234.567,89", "3"), "1.234,5", [1234567.89, 3]),
    (("1.234", "5,5"), "1.234,5", [1234, 5.5]),
    (("12 500",), "1 234.5", [12500]),
    (("12\u00a0500,5", "3"), "1 234,5", [12500.5, 3]),
    (("1'234.5", "-7"), "1'234.5", [1234.5, -7]),
    (("-1,234.5", None, ""), "1,234.5", [-1234.5, np.nan, np.nan]),
    (("5,632",), "1,234.5", [5632]),  # ambiguous: read as thousands (documented)
])
def test_detection_picks_the_first_style_reading_every_value(values, style, read):
    assert detect_style(column(*values)) == style
    assert np.allclose(parse_numbers(column(*values), style), read, equal_nan=True)


def test_detection_of_plain_text_and_empty_columns():
    assert detect_style(column("1.5", "2", None)) == "1234.5"
    assert detect_style(pd.Series([1.5, 2.0])) == "1234.5"
    assert detect_style(column("1.2.3", "4")) is None  # reads in no style
    assert detect_style(column("rent", "own")) is None
    assert detect_style(column("5,632", "n/a")) is None  # one stray value: none reads all
    assert detect_style(column(None, "")) is None
    assert detect_style(pd.Series([True, False])) is None  # booleans are categories
    assert set(DETECTION_ORDER) < set(STYLES)
    assert as_written(column("12", "5,632"), "1,234.5") == ("5,632", 5632.0)


def test_the_config_offers_exactly_the_styles():
    from entrena.tasks.tabular.config import NUMBER_FORMATS

    assert NUMBER_FORMATS == (*STYLES, "category")


# --- tables -------------------------------------------------------------------------------

def thousands(frame: pd.DataFrame, name: str = "income", factor: float = 100.0
              ) -> pd.DataFrame:
    """``frame`` with ``name`` times ``factor`` written ``5,518.400`` (NaN: empty)."""
    out = frame.astype({name: object})
    out[name] = [f"{v * factor:,.3f}" if v == v else "" for v in frame[name]]
    return out


def read_as(written: str) -> str:
    """``5,518.400`` as the report shows the number it became: ``5518.4`` (``5632``)."""
    value = float(written.replace(",", ""))
    return str(int(value)) if value.is_integer() else repr(value)


def scaled(frame: pd.DataFrame, name: str = "income", factor: float = 100.0) -> pd.DataFrame:
    return frame.assign(**{name: frame[name] * factor})


def check(prepared, name: str) -> dict:
    return next(c for c in prepared.report["checks"] if c["check"] == name)


def test_a_thousands_separated_feature_is_numeric_with_the_plain_files_values(tmp_path):
    train, test = make_table(200, 1), make_table(60, 2)
    plain = prepare(table_config(tmp_path / "plain", scaled(train), scaled(test)))
    written = thousands(train)
    assert written["income"].str.contains(",").mean() > 0.9  # 5,518.400: really grouped
    styled = prepare(table_config(tmp_path / "styled", written, thousands(test)))
    assert styled.numeric == plain.numeric == ["age", "income"]  # was categorical
    assert styled.preprocessing["number_styles"] == {"income": "1,234.5"}
    assert plain.preprocessing["number_styles"] == {}
    for role in plain.features:
        assert np.array_equal(styled.features[role], plain.features[role])
    record = check(styled, "number_styles")
    assert record["found"] == 1 and record["action"] == "read" and record["status"] == "read"
    first = next(v for v in written["income"] if "," in v)
    assert f"'income' in style '1,234.5' ({first!r} read as {read_as(first)})" in \
        record["message"]
    assert "data.number_format" in record["message"]
    assert check(plain, "number_styles")["status"] == "ok"
    assert check(styled, "mostly_numeric")["status"] == "ok"


def test_test_values_not_in_the_training_style_are_invalid_numbers(tmp_path):
    test = thousands(make_table(20, 2))
    test.loc[[2, 5], "income"] = ["12,5", "abc"]
    prepared = prepare(table_config(tmp_path, thousands(make_table(80, 1)), test))
    assert prepared.report["splits"]["test"]["invalid_numbers"] == {"income": 2}
    assert "test 'income' rows 3, 6 ('12,5', 'abc')" in check(prepared, "invalid_numbers")[
        "message"]


def test_number_format_overrides_detection(tmp_path):
    train = make_table(80, 1).astype({"income": object})
    train["income"] = [f"{int(v)},{int(v * 1000) % 1000:03d}" if v == v else None
                       for v in make_table(80, 1)["income"]]  # every value like 47,123
    assert detect_style(train["income"]) == "1,234.5"  # the ambiguous case: thousands
    test = make_table(20, 2)
    decimal = prepare(table_config(tmp_path / "d", train, test,
                                   number_format={"income": "1234,5"}))
    fitted = {c["name"]: c for c in decimal.preprocessing["numeric"]}["income"]
    assert 30 < fitted["mean"] < 70  # 47,123 read as 47.123, not 47123
    assert decimal.preprocessing["number_styles"] == {"income": "1234,5"}
    as_categories = prepare(table_config(tmp_path / "c", make_table(80, 1), test,
                                         number_format={"age": "category"}))
    assert as_categories.categorical == ["age", "home"]  # plain numbers, kept as categories
    assert as_categories.numeric == ["income"]


def test_old_parameters_without_number_styles_read_plain_numbers():
    frame = pd.DataFrame({"x": ["1", "2", "3,5"]})
    params = pp.fit_preprocessing(frame, ["x"], [])
    del params["number_styles"]  # saved before the key existed
    assert pp.transform(frame, params).shape == (3, 1)
    assert pp.invalid_numbers(frame, params)["x"].tolist() == [2]


def test_a_column_mixing_styles_stays_categorical_with_the_style_named(tmp_path):
    from entrena.data.tabular import suspicious_columns

    frame = pd.DataFrame({"price": [f"{1000 + i * 37:,}.5" for i in range(40)]})
    frame.loc[[3, 8], "price"] = ["1.234,5", "n/a"]
    found = suspicious_columns(frame, ["price"], np.arange(1, 41))
    assert found["mostly_numeric"] == [
        "'price' is a number written like '1,234.5' in 38 of 40 training rows but not in 2: "
        "'1.234,5' (row 4), 'n/a' (row 9) (data.number_format names a column's style when it "
        "is ambiguous)"]


def test_a_regression_target_with_thousands_separators_trains(tmp_path):
    from test_regression import make_prices
    from test_regression import table_config as regression_config

    train, test = make_prices(200, 1), make_prices(60, 2)
    written = {name: frame.assign(price=[f"{v * 10:,.2f}" for v in frame["price"]])
               for name, frame in (("train", train), ("test", test))}
    path = regression_config(tmp_path, written["train"], written["test"])
    result = run_cli("train", path, cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr
    run = tmp_path / "runs" / "prices"
    report = json.loads((run / "data_report.json").read_text())
    record = next(c for c in report["checks"] if c["check"] == "number_styles")
    first = next(v for v in written["train"]["price"] if "," in v)
    assert record["found"] == 1 and f"'price' in style '1,234.5' ({first!r} read as " \
        f"{read_as(first)})" in record["message"]
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["test"]["r2"] > 0.5  # the target read as 1,234.56 → 1234.56
    params = json.loads((run / "model" / "preprocessing.json").read_text())
    assert params["number_styles"] == {"price": "1,234.5"}


# --- a trained model reads new files in the training style --------------------------------

@pytest.fixture(scope="module")
def styled_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("styled")
    table_config(folder, thousands(make_table(240, 1)), thousands(make_table(60, 2)))
    scaled(make_table(60, 2)).to_csv(folder / "plain.csv", index=False)
    result = run_cli("train", folder / "config.yaml", cwd=folder, timeout=600)
    assert result.returncode == 0, result.stderr
    return folder


def test_predict_and_export_read_new_files_in_the_training_style(styled_run):
    run = styled_run / "runs" / "table"
    outputs = {}
    result = run_cli("export", run, cwd=styled_run, timeout=600)
    assert result.returncode == 0, result.stderr
    bundle = run / "export" / "onnx"
    assert json.loads((bundle / "preprocessing.json").read_text())["number_styles"] == {
        "income": "1,234.5"}
    for name, source, data in (("styled", run, "test.csv"), ("plain", run, "plain.csv"),
                               ("onnx", bundle, "test.csv")):
        out = styled_run / f"{name}-out.csv"
        result = run_cli("predict", source, "-i", styled_run / data, "--output", out, "--json",
                         cwd=styled_run)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["invalid_numbers"] == {}
        outputs[name] = pd.read_csv(out)
    assert np.abs(outputs["styled"]["prob_good"] - outputs["plain"]["prob_good"]).max() < 1e-6
    assert np.abs(outputs["styled"]["prob_good"] - outputs["onnx"]["prob_good"]).max() < 1e-4
    accuracy = (outputs["styled"]["predicted_label"]
                == pd.read_csv(styled_run / "test.csv")["status"]).mean()
    metrics = json.loads((run / "metrics.json").read_text())
    assert accuracy == pytest.approx(metrics["test"]["accuracy"])


# --- bad input: one line, exit 2, nothing written -----------------------------------------

def one_line(result) -> str:
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.strip().splitlines() if line]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def test_number_format_mistakes_are_one_line_errors(tmp_path):
    train = thousands(make_table(80, 1))
    train.loc[[4, 9], "income"] = ["12,5", "1.5"]
    cases = {"style": {"income": "1,234.50"}, "column": {"incme": "1,234.5"},
             "forced": {"income": "1,234.5"}}
    lines = {}
    for name, number_format in cases.items():
        folder = tmp_path / name
        path = table_config(folder, train, make_table(20, 2), number_format=number_format)
        lines[name] = one_line(run_cli("train", path, cwd=folder))
        assert not (folder / "runs").exists()  # nothing written
    assert lines["style"].endswith(
        "data.number_format = {'income': '1,234.50'} is invalid: unknown number style "
        "(income: '1,234.50' (did you mean '1,234.5'?)); use one of '1234.5', '1,234.5', "
        "'1.234,5', '1 234.5', '1 234,5', \"1'234.5\", '1234,5', 'category'")
    assert lines["column"] == (
        f"error: {tmp_path / 'column' / 'train.csv'}: data.number_format names column "
        "'incme', which is not a column of the train data (columns: 'id', 'age', 'income', "
        "'home', 'empty', 'status'); did you mean 'income'?")
    assert lines["forced"] == (
        f"error: {tmp_path / 'forced' / 'train.csv'}: data.number_format reads column "
        "'income' as '1,234.5', but 1 training value(s) do not read in that style (rows 5: "
        "'12,5'); fix or empty those values, or give the style the column is written in (one "
        "of '1234.5', '1,234.5', '1.234,5', '1 234.5', '1 234,5', \"1'234.5\", '1234,5', or "
        "'category' to keep it as categories)")


def test_number_format_on_a_classifiers_label_is_refused(tmp_path):
    path = table_config(tmp_path, make_table(80, 1), make_table(20, 2),
                        number_format={"status": "1,234.5"})
    with pytest.raises(DataError, match=r"data\.number_format names 'status', the label "
                                        r"column, whose values are class names"):
        prepare(path)
