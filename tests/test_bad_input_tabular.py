"""Bad input for ``task: tabular-classification`` and its ``predict``: each case is refused
with one line naming the file, the column and the rows (exit 2 at the CLI), or handled and
counted; never an internal error or NaN probabilities."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import run_cli
from entrena.errors import DataError
from test_tabular import make_table, prepare, table_config


def with_value(frame: pd.DataFrame, column: str, rows: dict[int, str]) -> pd.DataFrame:
    frame = frame.astype({column: object})
    for row, value in rows.items():
        frame.loc[row, column] = value
    return frame


def test_an_infinite_training_number_is_named_not_an_internal_error(tmp_path):
    train = with_value(make_table(80, 1), "income", {3: "inf", 9: "-1e400"})
    config = table_config(tmp_path, train, make_table(20, 2))
    with pytest.raises(DataError) as caught:
        prepare(config)
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / 'train.csv'}: numeric column 'income' holds "
                              "infinite numbers in train rows 4, 10 ('inf', '-1e400')")
    assert "leave those cells empty" in message


def test_an_infinite_test_number_names_the_test_file(tmp_path):
    test = with_value(make_table(20, 2), "income", {0: "Infinity"})
    config = table_config(tmp_path, make_table(80, 1), test)
    with pytest.raises(DataError, match=r"test\.csv: numeric column 'income' holds infinite "
                                        r"numbers in test rows 1 \('Infinity'\)"):
        prepare(config)


def test_numbers_too_large_to_standardise_are_refused(tmp_path):
    train = make_table(80, 1)
    train["income"] = train["income"] * 1e306
    config = table_config(tmp_path, train, make_table(20, 2))
    with pytest.raises(DataError, match=r"train\.csv: numeric column 'income' holds numbers "
                                        r"too large to standardise \(up to .*e\+30\d\); rescale"):
        prepare(config)


def test_cli_exit_2_one_line_for_an_infinite_number(tmp_path):
    train = with_value(make_table(80, 1), "age", {0: "inf"})
    config = table_config(tmp_path, train, make_table(20, 2))
    result = run_cli("prepare", config, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error")]
    assert errors == [f"error: {tmp_path / 'train.csv'}: numeric column 'age' holds infinite "
                      "numbers in train rows 1 ('inf'); replace them with finite numbers or "
                      "leave those cells empty (a missing number takes the training median)"]
    assert not (tmp_path / "runs" / "table" / "data_report.json").exists()


@pytest.fixture
def predictor(tmp_path: Path):
    """A TablePredictor over an untrained MLP with preprocessing fitted on a tiny table."""
    from entrena.tasks.tabular.model import TabularMLP, save_mlp
    from entrena.tasks.tabular.predict import TablePredictor

    prepared = prepare(table_config(tmp_path / "data", make_table(80, 1), make_table(20, 2)))
    model = TabularMLP(int(prepared.preprocessing["width"]), [4],
                       len(prepared.splits.labels), 0.0)
    save_mlp(model, tmp_path / "model", labels=prepared.splits.labels,
             preprocessing=prepared.preprocessing,
             columns={"numeric": prepared.numeric, "categorical": prepared.categorical})
    return TablePredictor(tmp_path / "model", "run")


def test_predict_gives_infinite_and_non_numbers_the_median_and_counts_them(predictor):
    rows = with_value(make_table(6, 3), "income", {0: "inf", 1: "abc", 2: "1e400"})
    out, skipped = predictor.annotate(rows, first_row=1, on_bad_rows="skip")
    assert not skipped.any()
    probs = out[[c for c in out.columns if c.startswith("prob_")]].to_numpy(dtype=float)
    assert np.isfinite(probs).all()  # inf used to reach the network: NaN probabilities
    assert predictor.invalid == {"income": {"count": 3, "rows": [1, 2, 3]}}
    missing = rows.iloc[[0]].reset_index(drop=True)
    missing.loc[0, "income"] = np.nan  # what a missing income gets: the training median
    same, _ = predictor.annotate(missing, first_row=1, on_bad_rows="skip")
    assert out.loc[0, "prob_good"] == pytest.approx(same.loc[0, "prob_good"])


def test_predict_without_a_feature_column_says_how_to_fix_it(predictor):
    # Before: the missing and present columns were named, but not what to do about it.
    with pytest.raises(DataError) as caught:
        predictor.check_columns(["id", "age", "status"], Path("new.csv"))
    assert str(caught.value) == (
        "new.csv: the input lacks the feature column(s) 'income', 'home' the model was "
        "trained on; the input's columns are: 'id', 'age', 'status'; add them (empty cells are "
        "read as missing values), or retrain with them in data.drop_columns")
    predictor.check_columns(["age", "income", "home"], Path("new.csv"))  # all there: passes


def test_predict_refuses_non_numbers_under_on_bad_rows_error(predictor):
    rows = with_value(make_table(6, 3), "income", {4: "12,5"})
    predictor.source = "new.csv"  # the input file the messages name
    with pytest.raises(DataError) as caught:
        predictor.annotate(rows, first_row=101, on_bad_rows="error")
    assert str(caught.value) == ("new.csv: input rows 105: numeric column 'income' holds "
                                 "'12,5', not a finite number; fix them, or pass --on-bad-rows "
                                 "skip to give them the training median")


def test_a_header_naming_a_column_twice_is_refused(tmp_path):
    config = table_config(tmp_path, make_table(40, 1), make_table(20, 2))
    train = (tmp_path / "train.csv").read_text().splitlines()
    train[0] = train[0].replace("income", " age")  # ' age' and 'age' once stripped
    (tmp_path / "train.csv").write_text("\n".join(train) + "\n")
    with pytest.raises(DataError) as caught:
        prepare(config)
    assert str(caught.value) == (f"data.train: {tmp_path / 'train.csv'}: the header names "
                                 "column 'age' 2 times (columns 2, 3); rename or remove the "
                                 "copies")


def report_check(prepared, name: str) -> dict:
    return next(c for c in prepared.report["checks"] if c["check"] == name)


def test_a_numeric_column_with_stray_strings_is_flagged_with_its_rows(tmp_path):
    train = with_value(make_table(80, 1), "income", {3: "n/a?", 7: "12,5"})
    prepared = prepare(table_config(tmp_path, train, make_table(20, 2),
                                    validation=str(tmp_path / "test.csv")))  # all 80 train
    assert "income" in prepared.categorical  # the documented rule: not every value a number
    check = report_check(prepared, "mostly_numeric")
    assert check["status"] == "warning"
    present = int(train["income"].notna().sum())  # make_table leaves ~5% of incomes empty
    assert f"'income' is a number in {present - 2} of {present} training rows but not in 2: " \
        "'n/a?' (row 4), '12,5' (row 8)" in check["message"]
    assert report_check(prepared, "identifier_columns")["status"] == "ok"  # one finding only


def test_decimal_commas_are_read_and_identifier_columns_are_flagged(tmp_path):
    train = make_table(80, 1)
    train["ref"] = [f"R{i:04d}" for i in range(80)]  # an id the config does not drop
    test = make_table(20, 2).assign(ref="R9999")
    config = table_config(tmp_path, train, test)
    (tmp_path / "train.csv").write_text(train.to_csv(index=False, sep=";", decimal=","))
    (tmp_path / "test.csv").write_text(test.to_csv(index=False, sep=";", decimal=","))
    prepared = prepare(config)
    # was: categories, and the advice to write them with a point
    assert prepared.numeric == ["age", "income"]
    assert prepared.preprocessing["number_styles"] == {"age": "1234,5", "income": "1234,5"}
    assert report_check(prepared, "number_styles")["found"] == 2
    assert report_check(prepared, "mostly_numeric")["status"] == "ok"
    assert prepared.report["splits"]["test"]["invalid_numbers"] == {}
    ident = report_check(prepared, "identifier_columns")
    assert ident["status"] == "warning" and ident["found"] == 1
    assert "'ref' has" in ident["message"] and "data.drop_columns" in ident["message"]


def test_export_parity_data_without_a_feature_column_names_it(tmp_path):
    from entrena.exporting.bundle import RunModel
    from entrena.tasks.tabular.export import table_rows

    path = tmp_path / "parity.csv"
    make_table(5, 1).drop(columns=["home"]).to_csv(path, index=False)
    run = RunModel(None, {"labels": ["bad", "good"], "numeric": ["age", "income"],
                          "categorical": ["home"]}, {"data": {"label_column": "status"}})
    with pytest.raises(DataError) as caught:
        table_rows(run, path)
    # was: "feature column 'home' = 'home' is not a column …; set feature column 'home' to …"
    assert str(caught.value) == (f"{path}: the parity data lacks the feature column(s) 'home' "
                                 "the model was trained on (its columns: 'id', 'age', 'income', "
                                 "'empty', 'status'); pass --parity-data with a file that has "
                                 "them")


def test_predict_reads_a_file_as_training_does_latin_1_and_semicolons(tmp_path):
    from entrena.data.streaming import iter_table, table_columns

    frame = pd.DataFrame({"age": ["30", "41"], "home": ["propriété", "rent"]})
    path = tmp_path / "new.csv"
    path.write_bytes(frame.to_csv(index=False, sep=";").encode("latin-1"))
    assert table_columns(path) == ["age", "home"]  # was one column 'age;home'
    rows = pd.concat([c.frame for c in iter_table(path)], ignore_index=True)
    assert rows["home"].tolist() == ["propriété", "rent"]  # was: not UTF-8 text at byte 16
    path.write_bytes(b"age,home\n30,own\n" + "41,propriété\n".encode("latin-1")
                     + "52,propriété\n".encode())
    with pytest.raises(DataError) as caught:
        list(iter_table(path))
    assert str(caught.value) == (f"input: {path}: byte 25 (0xe9, line 3) is not valid UTF-8, "
                                 "though the rest of the file is UTF-8; fix or remove it "
                                 "(re-save the file as UTF-8)")


def test_a_continuous_label_column_is_refused_as_a_regression_target(tmp_path):
    config = table_config(tmp_path, make_table(80, 1).dropna(subset=["income"]),
                          make_table(20, 2), label_column="age", drop_columns=["id", "status"])
    config.write_text(config.read_text().replace("label_column: age", "label_column: income")
                      .replace("- status", "- age"))
    with pytest.raises(DataError) as caught:
        prepare(config)
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / 'train.csv'}: data.label_column 'income' has ")
    assert "numbers to predict (a regression target), not classes; to predict the numbers " \
        "use task: tabular-regression, or set data.label_column to the column of class " \
        "labels" in message


def test_many_unseen_test_labels_make_one_short_line(tmp_path):
    test = make_table(40, 2).astype({"status": object})
    test["status"] = [f"class-{i}" for i in range(40)]
    with pytest.raises(DataError) as caught:
        prepare(table_config(tmp_path, make_table(80, 1), test))
    message = str(caught.value)
    assert "label(s) 'class-0', 'class-1', 'class-10'" in message
    assert "'class-17' and 30 more in test rows" in message  # all 40 used to be listed
    assert len(message) < 400


def test_max_train_samples_leaving_one_class_is_refused(tmp_path):
    config = table_config(tmp_path, make_table(80, 1), make_table(20, 2),
                          validation=str(tmp_path / "test.csv"), max_train_samples=1)
    with pytest.raises(DataError) as caught:
        prepare(config)  # it used to train a 'classifier' on one row of one class
    assert str(caught.value).startswith(f"{tmp_path / 'train.csv'}: only the class ")
    assert str(caught.value).endswith(" is left in training once the data checks have run "
                                      "(rows removed: 79 subsampled); a classifier needs at "
                                      "least 2 classes: raise data.max_train_samples (1), keep "
                                      "more rows (data.checks.*) or add rows of other classes")


def test_a_run_dir_that_is_a_file_is_bad_input_not_an_internal_error(tmp_path):
    from entrena.core.rundir import resolve_run_dir
    from entrena.errors import ConfigError
    from entrena.tasks.registry import load_config

    config = load_config(table_config(tmp_path, make_table(40, 1), make_table(20, 2))).config
    (tmp_path / "afile").write_text("x")
    for run_dir in (tmp_path / "afile", tmp_path / "afile" / "run"):
        with pytest.raises(ConfigError) as caught:  # was NotADirectoryError: exit 1
            resolve_run_dir(config.name, run_dir)
        assert str(caught.value) == (f"--run-dir {run_dir}: {tmp_path / 'afile'} is a file, "
                                     "not a folder; give a folder path (it is created when "
                                     "missing)")
    assert resolve_run_dir(config.name, tmp_path / "new" / "run") == tmp_path / "new" / "run"


def test_predict_input_naming_a_column_twice_is_refused(tmp_path):
    from entrena.data.streaming import iter_table

    path = tmp_path / "new.csv"
    path.write_text("age,home,home\n30,own,rent\n")  # pandas made the copy 'home.1'
    with pytest.raises(DataError) as caught:
        list(iter_table(path))
    assert str(caught.value) == (f"input: {path}: the header names column 'home' 2 times "
                                 "(columns 2, 3); rename or remove the copies")


def test_test_values_that_are_not_numbers_are_counted_with_their_rows(tmp_path):
    test = with_value(make_table(20, 2), "age", {2: "forty", 5: "n.a."})
    prepared = prepare(table_config(tmp_path, make_table(80, 1), test))
    assert prepared.report["splits"]["test"]["invalid_numbers"] == {"age": 2}
    check = report_check(prepared, "invalid_numbers")
    assert check["status"] == "warning"  # they used to become the median without a word
    assert check["message"] == ("2 validation/test value(s) of numeric columns are not numbers "
                                "and take the training median: test 'age' rows 3, 6 ('forty', "
                                "'n.a.'); fix them or leave those cells empty")


def test_export_without_the_runs_test_file_asks_for_parity_data(tmp_path):
    from entrena.exporting.bundle import RunModel
    from entrena.tasks.tabular.export import table_rows

    gone = tmp_path / "test.csv"
    run = RunModel(None, {"labels": ["bad", "good"], "numeric": ["age"], "categorical": []},
                   {"data": {"label_column": "status"}},
                   data_report={"splits": {"test": {"file": str(gone)}}})
    with pytest.raises(DataError) as caught:  # was "data.parity: file not found: …; check
        table_rows(run, None)                  # the path in the config"
    assert str(caught.value) == (f"{gone}: the run's test file, which the parity check reads, "
                                 "is no longer there; pass --parity-data FILE (a file with the "
                                 "run's feature columns)")


def test_a_split_made_impossible_by_dropped_duplicates_says_so(tmp_path):
    train, test = make_table(80, 1)[["home", "status"]], make_table(20, 2)[["home", "status"]]
    config = table_config(tmp_path, train, test, drop_columns=[])
    with pytest.raises(DataError) as caught:  # 3 categories x 2 labels: nearly every row repeats
        prepare(config)
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / 'train.csv'}: no class has 2 training rows (or "
                              "groups) once the checks removed rows (")
    assert " exact_duplicates" in message
    assert message.endswith("keep those rows (data.checks.<check>: warn), add rows or give a "
                            "validation file (data.validation)")


def test_predict_on_absurdly_large_numbers_gives_finite_probabilities(predictor):
    rows = with_value(make_table(4, 3), "income", {0: "1e300", 1: "-1e300"})
    rows = with_value(rows, "age", {2: "1e39"})  # beyond float32 once standardised
    out, skipped = predictor.annotate(rows, first_row=1, on_bad_rows="skip")
    probs = out[[c for c in out.columns if c.startswith("prob_")]].to_numpy(dtype=float)
    assert np.isfinite(probs).all()  # 1e300 gave NaN probabilities with status ok
    assert out["predicted_label"].notna().all() and not predictor.invalid


def test_the_label_column_as_group_column_is_refused(tmp_path):
    config = table_config(tmp_path, make_table(80, 1), make_table(20, 2), group_column="status")
    with pytest.raises(DataError, match=r"^data\.group_column = 'status' is the label column; "):
        prepare(config)  # was: "no class has 2 training rows (or groups)"


def test_labels_differing_only_in_case_are_flagged(tmp_path):
    train = make_table(80, 1)
    train.loc[::7, "status"] = train.loc[::7, "status"].str.upper()
    prepared = prepare(table_config(tmp_path, train, make_table(20, 2),
                                    validation=str(tmp_path / "test.csv")))
    check = report_check(prepared, "label_spelling")
    assert check["status"] == "warning" and check["found"] == len(prepared.splits.labels) - 2
    assert "differ only in case or spacing, so they are separate classes: " in check["message"]
    assert "'BAD' / 'bad'" in check["message"] or "'GOOD' / 'good'" in check["message"]


def test_a_predict_jsonl_line_that_is_not_utf8_is_named(tmp_path):
    from entrena.data.streaming import iter_table

    path = tmp_path / "new.jsonl"
    path.write_bytes(b'{"age": 30, "home": "own"}\n' + '{"age": 41, "home": "propriété"}\n'
                     .encode("latin-1"))
    with pytest.raises(DataError) as caught:  # was "not UTF-8 text at byte 26", no line
        list(iter_table(path))
    assert str(caught.value) == (f"input: {path}: line 2 is not UTF-8 (byte 0xe9 at column 28); "
                                 "JSON lines are UTF-8: re-save the file as UTF-8")


def test_parquet_output_of_a_column_mixing_types_is_bad_input(tmp_path):
    from entrena.data.streaming import TableWriter

    out = tmp_path / "out.parquet"
    with pytest.raises(DataError) as caught:  # was ArrowInvalid: an internal error
        with TableWriter(out) as writer:
            writer.write(pd.DataFrame({"age": [30, "x"], "home": ["own", "rent"]}))
    assert str(caught.value) == (f"output: {out}: a column mixes value types that Parquet "
                                 "cannot hold in one column (Conversion failed for column age "
                                 "with type object); write CSV or JSONL instead, which keep "
                                 "each value as it is")
    assert list(tmp_path.iterdir()) == []  # no output, no temporary file


def test_predict_with_torch_on_a_table_bundle_names_the_run(tmp_path):
    import json

    import entrena

    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "export.json").write_text(json.dumps({"format": "onnx", "run": "/runs/credit"}))
    (bundle / "entrena_model.json").write_text(json.dumps({"task": "tabular-classification"}))
    make_table(3, 1).to_csv(tmp_path / "new.csv", index=False)
    with pytest.raises(DataError) as caught:  # it used ONNX Runtime without a word
        entrena.predict(bundle, tmp_path / "new.csv", output=tmp_path / "out.csv",
                        backend="torch")
    assert str(caught.value) == (f"{bundle}: this bundle holds an onnx model, which runs with "
                                 "--backend onnx; for --backend torch give the run directory "
                                 "(/runs/credit)")
