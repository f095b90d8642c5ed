"""``task: tabular-classification`` on tiny generated tables: preprocessing fitted on training
rows only, bad input, every verb end to end (CLI), export parity, the plan of an MLP."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import run_cli
from entrena.data import preprocessing as pp
from entrena.tasks.registry import load_config

HIDDEN = [16, 8]


def make_table(n: int, seed: int, *, income_shift: float = 0.0) -> pd.DataFrame:
    """Rows whose label follows income and the home category (learnable by both models)."""
    rng = np.random.default_rng(seed)
    income = rng.normal(50, 15, n) + income_shift
    home = rng.choice(["rent", "own", "other"], n)
    age = rng.integers(18, 70, n).astype(float)
    score = (income - 50 - income_shift) / 15 + np.where(home == "own", 1.0, -0.5)
    label = np.where(score > 0, "good", "bad")
    frame = pd.DataFrame({"id": np.arange(n) + seed * 10_000, "age": age,
                          "income": income.round(3), "home": home, "empty": np.nan,
                          "status": label})
    frame.loc[rng.random(n) < 0.05, "income"] = np.nan
    return frame


def table_config(folder: Path, train: pd.DataFrame, test: pd.DataFrame,
                 **data: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    train.to_csv(folder / "train.csv", index=False)
    test.to_csv(folder / "test.csv", index=False)
    config = {"name": "table", "task": "tabular-classification",
              "data": {"train": "train.csv", "test": "test.csv", "label_column": "status",
                       "drop_columns": ["id"], "validation_fraction": 0.2, **data},
              "model": {"hidden_sizes": HIDDEN},
              "train": {"max_epochs": 4, "batch_size": 32, "learning_rate": 0.003,
                        "num_threads": 1},
              "tracking": {"enabled": False}}
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def prepare(path: Path) -> Any:
    from entrena.tasks.tabular.data import prepare_table

    return prepare_table(load_config(path))


def test_preprocessing_is_fitted_on_the_training_rows_only(tmp_path):
    train = make_table(200, 1)
    test = make_table(60, 2, income_shift=10_000.0)  # would move the mean if it leaked
    test.loc[:9, "home"] = "boat"  # a category only the test rows have
    prepared = prepare(table_config(tmp_path, train, test))
    rows = train.iloc[prepared.splits.train.row_ids - 1]  # the training split, no validation
    assert len(rows) < len(train)  # validation was split off and must not count either
    assert prepared.report["validation_split"]["grouped_by"] == "identical rows"
    income = rows["income"].to_numpy(dtype=float)
    filled = np.where(np.isnan(income), np.nanmedian(income), income)
    fitted = {c["name"]: c for c in prepared.preprocessing["numeric"]}["income"]
    assert fitted["median"] == pytest.approx(np.nanmedian(income))
    assert fitted["mean"] == pytest.approx(filled.mean())
    assert fitted["scale"] == pytest.approx(filled.std())
    home = {c["name"]: c for c in prepared.preprocessing["categorical"]}["home"]
    assert "boat" not in home["categories"] + home["infrequent"]
    # the same rows, transformed: standardised on the training split (mean 0, std 1)
    column = prepared.features["train"][:, 1]
    assert column.mean() == pytest.approx(0.0, abs=1e-5)
    assert column.std() == pytest.approx(1.0, abs=1e-4)
    assert np.median(prepared.features["test"][:, 1]) > 100  # test incomes stay far out


def test_unseen_categories_and_an_all_missing_column_are_reported(tmp_path, caplog):
    train, test = make_table(200, 1), make_table(60, 2)
    test.loc[:6, "home"] = "boat"
    with caplog.at_level(logging.WARNING, logger="entrena"):
        prepared = prepare(table_config(tmp_path, train, test))
    report = prepared.report
    assert report["features"]["dropped_all_missing"] == ["empty"]
    assert report["features"]["numeric"] == ["age", "income"]
    assert report["features"]["categorical"] == ["home"]
    assert "column 'empty' of" in caplog.text and "dropped" in caplog.text
    assert report["splits"]["test"]["unseen_categories"] == {"home": 7}
    assert report["splits"]["validation"]["unseen_categories"] == {}
    checks = {c["check"]: c for c in report["checks"]}
    assert checks["unseen_categories"]["found"] == 7
    assert checks["unseen_categories"]["status"] == "warning"
    assert checks["all_missing_columns"]["status"] == "dropped"
    home = report["features"]["names"].index("home=rent")
    boat_rows = prepared.features["test"][:7]
    assert np.all(boat_rows[:, home - 1:home + 2] == 0)  # unknown: all zeros in its block


def test_transform_matches_scikit_learns_column_transformer():
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"x": rng.normal(size=300).astype(str),
                          "c": rng.choice(["a", "b", None], 300),
                          "many": [str(i % 90) for i in range(300)]})
    frame.loc[3, "x"] = None
    transformer = pp.fit_column_transformer(frame, ["x"], ["c", "many"])
    params = pp.fitted_params(transformer, ["x"], ["c", "many"])
    other = frame.sample(frac=1.0, random_state=1).reset_index(drop=True)
    other.loc[0, "c"] = "never seen"
    expected = transformer.transform(pp.sklearn_table(other, ["x"], ["c", "many"]))
    assert np.abs(pp.transform(other, params) - expected).max() < 1e-5
    assert params["width"] == expected.shape[1]
    assert json.loads(json.dumps(params)) == params  # plain JSON


def test_a_missing_label_column_lists_the_columns(tmp_path):
    path = table_config(tmp_path, make_table(50, 1), make_table(20, 2), label_column="outcome")
    result = run_cli("prepare", path, cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert "data.label_column = 'outcome' is not a column of the train data" in lines[0]
    assert "'status'" in lines[0] and "'income'" in lines[0]


def test_a_dropped_column_that_is_not_there_is_named(tmp_path):
    from entrena.errors import DataError

    path = table_config(tmp_path, make_table(50, 1), make_table(20, 2), drop_columns=["ID"])
    with pytest.raises(DataError, match=r"data.drop_columns = 'ID' is not a column of the train "
                                        r"data; columns are: 'id', 'age'"):
        prepare(path)


def test_a_test_file_without_a_feature_column_is_refused(tmp_path):
    from entrena.errors import DataError

    path = table_config(tmp_path, make_table(50, 1), make_table(20, 2).drop(columns=["age"]))
    with pytest.raises(DataError, match=r"test.csv: the test data lacks the feature column\(s\) "
                                        r"'age' that training has"):
        prepare(path)


def test_the_plan_counts_the_mlp(tmp_path):
    from entrena.api.planning import plan

    path = table_config(tmp_path, make_table(120, 1), make_table(30, 2))
    document = plan(path, local_only=True).document
    width = 2 + 3  # age, income; home one-hot (rent, own, other)
    sizes = [width, *HIDDEN, 2]
    macs = sum(a * b for a, b in zip(sizes, sizes[1:], strict=False))
    assert document["model"]["parameters"] == macs + sum(sizes[1:])
    # forward 2 FLOP a multiply-add; backward 2 for the weight gradient and 2 for the input
    # gradient, except the first layer's (the features need none)
    assert document["model"]["flops_per_sample"] == 6 * macs - 2 * width * HIDDEN[0]
    assert document["options"][0]["fits"]


def test_trees_winning_or_tying_gives_the_cpu_advice():
    from entrena.tasks.tabular.task import TabularClassificationTask

    task = TabularClassificationTask()
    baselines = {"boosted_trees": {"test": {"accuracy": 0.80}, "time_s": 0.2}}

    def verdict(model: float) -> dict[str, Any]:
        return {"split": "test", "metric": "accuracy", "model": model}

    assert task.advice(verdict(0.90), baselines) is None
    tie = task.advice(verdict(0.802), baselines)
    assert tie is not None and "a CPU and boosted trees are enough here" in tie["change"]
    assert "tie with" in tie["message"]
    assert "beat" in task.advice(verdict(0.70), baselines)["message"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("table")
    test = make_table(60, 2)
    test.loc[:4, "home"] = "boat"
    path = table_config(folder, make_table(240, 1), test)
    result = run_cli("train", path, cwd=folder, timeout=600)
    assert result.returncode == 0, result.stderr
    return folder


def test_cli_trains_a_table_beside_boosted_trees(trained):
    run = trained / "runs" / "table"
    metrics = json.loads((run / "metrics.json").read_text())
    assert set(metrics["test"]) >= {"accuracy", "macro_f1", "loss"}
    assert metrics["baseline"]["boosted_trees"]["test"]["accuracy"] > 0.7
    assert metrics["baseline"]["comparison"]["split"] == "test"
    assert metrics["fit"]["max_length"] is None
    assert sorted(p.name for p in (run / "model").iterdir()) == [
        "entrena_model.json", "model.safetensors", "preprocessing.json"]
    meta = json.loads((run / "model" / "entrena_model.json").read_text())
    assert meta["task"] == "tabular-classification" and meta["labels"] == ["bad", "good"]
    plan = json.loads((run / "plan.json").read_text())
    assert plan["model"]["kind"] == "fixed"
    assert (run / "report.html").is_file()


def test_export_parity_and_predict_reuse_the_saved_preprocessing(trained):
    run = trained / "runs" / "table"
    result = run_cli("export", run, cwd=trained, timeout=600)
    assert result.returncode == 0, result.stderr
    bundle = run / "export" / "onnx"
    manifest = json.loads((bundle / "export.json").read_text())
    assert manifest["parity"]["passed"] and manifest["parity"]["max_abs_diff"] <= 1e-4
    assert manifest["parity"]["examples"] == 60
    assert {"entrena", "torch", "onnxruntime"} <= set(manifest["versions"])  # as a text export
    outputs = {}
    for name, source in (("torch", run), ("onnx", bundle)):
        out = trained / f"{name}.csv"
        result = run_cli("predict", source, "-i", trained / "test.csv", "--output", out,
                         "--json", cwd=trained)
        assert result.returncode == 0, result.stderr
        summary = json.loads(result.stdout)
        assert summary["rows"] == {"read": 60, "predicted": 60, "skipped": 0}
        assert summary["unseen_categories"] == {"home": 5}
        outputs[name] = pd.read_csv(out)
    assert (outputs["torch"]["predicted_label"] == outputs["onnx"]["predicted_label"]).all()
    assert np.abs(outputs["torch"]["prob_good"] - outputs["onnx"]["prob_good"]).max() < 1e-4
    metrics = json.loads((run / "metrics.json").read_text())
    assert (outputs["torch"]["status"] == "ok").all()
    accuracy = (outputs["torch"]["predicted_label"]
                == pd.read_csv(trained / "test.csv")["status"]).mean()
    assert accuracy == pytest.approx(metrics["test"]["accuracy"])  # same preprocessing


def test_predict_refuses_bad_input_to_a_table_model(trained, caplog):
    """(tests/test_bad_input_tabular.py covers the rest; these need a trained run.)"""
    import entrena
    from entrena.errors import ConfigError, DataError

    run = trained / "runs" / "table"
    with pytest.raises(ConfigError, match=r"^--text-column home: .* holds a tabular model, "
                                          r"which reads the feature columns it was trained "
                                          r"on; leave --text-column out$"):
        entrena.predict(run, trained / "test.csv", output=trained / "x.csv", text_column="home")
    rows = make_table(5, 4).astype({"income": object})
    rows.loc[2, "income"] = "inf"
    rows.to_csv(trained / "inf.csv", index=False)
    with caplog.at_level(logging.WARNING, logger="entrena"):
        result = entrena.predict(run, trained / "inf.csv", output=trained / "inf-out.csv")
    assert result.summary["invalid_numbers"] == {"income": {"count": 1, "rows": [3]}}
    assert "the input's column(s) 'status' are replaced in the output by the columns predict " \
        "adds under the same name(s); rename them in the input to keep them" in caplog.text
    assert pd.read_csv(trained / "inf-out.csv")["prob_good"].notna().all()
    with pytest.raises(DataError, match=r"inf\.csv: input rows 3: numeric column 'income' "
                                        r"holds 'inf', not a finite number"):
        entrena.predict(run, trained / "inf.csv", output=trained / "refused.csv",
                        on_bad_rows="error")
    assert not (trained / "x.csv").exists() and not (trained / "refused.csv").exists()


def test_the_credit_example_prepares_and_plans(credit_data, tmp_path):
    from entrena.api.planning import plan

    config = credit_data.parent / "config.yaml"
    document = plan(config, run_dir=tmp_path / "credit", local_only=True).document
    assert document["model"]["name"] == "mlp [128, 64]"
    assert document["data"]["train_rows"] > 3000
    assert document["options"][0]["fits"]



def test_predict_refuses_an_unknown_backend_and_a_folder_input(trained):
    import entrena
    from entrena.errors import ConfigError, DataError

    run = trained / "runs" / "table"
    with pytest.raises(ConfigError, match=r"^--backend 'bogus' is not a backend; use one of: "
                                          r"torch, onnx$"):  # a table run ignored it
        entrena.predict(run, trained / "test.csv", output=trained / "b.csv", backend="bogus")
    with pytest.raises(DataError, match=r"^input: .* is a folder; give a data file \(\.csv, "):
        entrena.predict(run, trained, output=trained / "b.csv")  # was: "file not found"
    assert not (trained / "b.csv").exists()
