"""Issue 19, "your own data, as it comes": several text columns, label clean-up, per-row
predictions kept by the run, predict writing the input's delimiter and encoding.

The data is ``examples/tickets/make_tickets.py``'s made-up help-desk export: ``;``-separated
Windows-1252, ``subject`` and ``description`` columns (some descriptions empty), categories
spelled several ways.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import entrena
from conftest import EXAMPLES, TINY_ARCHITECTURE, run_cli, write_config
from entrena.data.labels import LabelCleanup, spelling_twins
from entrena.data.text_fields import join_text_columns
from entrena.errors import ConfigError, DataError

MAKE_TICKETS = EXAMPLES / "tickets" / "make_tickets.py"


def make_tickets(folder: Path, rows: int = 120) -> Path:
    spec = importlib.util.spec_from_file_location("make_tickets", MAKE_TICKETS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main([str(folder), "--rows", str(rows)])
    return folder


def ticket_config(folder: Path, **data: object) -> dict:
    return {
        "name": "tickets", "task": "text-classification",
        "data": {"train": str(folder / "train.csv"), "test": str(folder / "test.csv"),
                 "text_column": ["subject", "description"], "label_column": "category",
                 "label_map": {"Invoices": "billing"}, "normalise_labels": "case_and_space",
                 "validation_fraction": 0.2, **data},
        "model": {"architecture": dict(TINY_ARCHITECTURE), "tokenizer": "minilm-l6",
                  "max_length": 32},
        "train": {"max_epochs": 1, "batch_size": 16, "learning_rate": 1.0e-3, "seed": 0,
                  "num_threads": 1},
        "tracking": {"enabled": False},
    }


@pytest.fixture(scope="module")
def tickets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tickets(tmp_path_factory.mktemp("tickets") / "data")


@pytest.fixture(scope="module")
def ticket_run(tickets: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One tiny run on the tickets, both text columns, the label clean-up on."""
    root = tmp_path_factory.mktemp("ticket-run")
    config = write_config(ticket_config(tickets), root / "config.yaml")
    run_dir = root / "runs" / "tickets"
    entrena.train(config, run_dir=run_dir)
    return run_dir


# --- several text columns ----------------------------------------------------------------------

def test_join_text_columns_marks_each_field_and_leaves_out_empty_ones():
    frame = pd.DataFrame({"subject": ["Refund", "  ", None, "Crash"],
                          "description": ["Charged twice", "Only body", "", "NA"]})
    joined = join_text_columns(frame, ["subject", "description"],
                               missing={"description": np.array([0, 0, 0, 1], dtype=bool)})
    assert joined.tolist() == ["subject: Refund\ndescription: Charged twice",
                               "description: Only body", "", "subject: Crash"]
    pd.testing.assert_series_equal(join_text_columns(frame, "subject"), frame["subject"])


@pytest.mark.parametrize(("value", "message"), [
    ([], "an empty list"),
    (["subject", "subject"], "'subject' more than once"),
    (["subject", " "], "a column name is empty"),
])
def test_bad_text_column_lists_are_config_errors(tmp_path, value, message):
    path = write_config(ticket_config(tmp_path, text_column=value), tmp_path / "c.yaml")
    with pytest.raises(ConfigError, match=message):
        entrena.load_config(path)


def test_a_missing_one_of_several_text_columns_is_named(tickets, tmp_path):
    path = write_config(ticket_config(tickets, text_column=["subject", "body"]),
                        tmp_path / "c.yaml")
    with pytest.raises(DataError, match=r"data.text_column\[1\] = 'body' is not a column"):
        entrena.prepare(path)


# --- label clean-up -------------------------------------------------------------------------

def test_label_cleanup_maps_then_merges_to_the_most_frequent_spelling():
    cleanup = LabelCleanup({"Invoices": "billing"}, "case_and_space")
    renames = cleanup.renames({"Billing": 10, "billing": 3, "billing ": 1, "Invoices": 2,
                               "Tech": 5}, others=["TECH"])
    assert renames == {"Billing": "Billing", "billing": "Billing", "billing ": "Billing",
                       "Invoices": "Billing", "Tech": "Tech", "TECH": "Tech"}
    assert LabelCleanup({"a": "b"}).renames({"a": 1, "A": 1}) == {"a": "b", "A": "A"}
    assert spelling_twins(["Billing", "billing", "Tech"]) == [["Billing", "billing"]]


def test_label_spelling_names_the_option_that_fixes_it(tickets, tmp_path):
    config = ticket_config(tickets)
    del config["data"]["normalise_labels"]
    result = entrena.prepare(write_config(config, tmp_path / "c.yaml"))
    check = next(c for c in result.report["checks"] if c["check"] == "label_spelling")
    assert check["found"] == 2 and "data.normalise_labels: case_and_space" in check["message"]
    assert result.report["labels"] == ["Account", "Billing", "Technical", "billing",
                                       "technical"]


def test_cleanup_gives_three_classes_and_reports_what_it_merged(ticket_run):
    metrics = json.loads((ticket_run / "metrics.json").read_text())
    assert metrics["data"]["labels"] == ["Account", "Billing", "Technical"]
    report = json.loads((ticket_run / "data_report.json").read_text())
    merged = report["label_cleanup"]["merged"]
    assert merged["Billing"] == ["Billing", "Invoices", "billing"]  # "billing " reads trimmed
    assert merged["Technical"] == ["Technical", "technical"]
    spelling = next(c for c in report["checks"] if c["check"] == "label_spelling")
    assert spelling["found"] == 0


# --- predictions kept by the run -----------------------------------------------------------

def test_run_keeps_per_row_predictions_of_validation_and_test(ticket_run):
    metrics = json.loads((ticket_run / "metrics.json").read_text())
    for role in ("validation", "test"):
        frame = pd.read_csv(ticket_run / "predictions" / f"{role}.csv", keep_default_na=False)
        assert list(frame.columns) == ["row", "text", "label", "predicted_label",
                                       "prob_Account", "prob_Billing", "prob_Technical",
                                       "correct"]
        assert len(frame) == metrics["data"][f"{role}_rows"]
        assert frame["text"].str.startswith("subject: ").all()
        probs = frame[["prob_Account", "prob_Billing", "prob_Technical"]].to_numpy()
        np.testing.assert_allclose(probs.sum(1), 1.0, atol=1e-6)
        correct = (frame["label"] == frame["predicted_label"]).map({True: "yes", False: "no"})
        assert (frame["correct"] == correct).all()
        accuracy = (frame["correct"] == "yes").mean()
        assert accuracy == pytest.approx(metrics[role]["accuracy"])
        saved = metrics["predictions"][role]
        assert saved["file"] == f"predictions/{role}.csv"
        assert saved["mistakes"] == int((frame["correct"] == "no").sum())
        confidences = [m["confidence"] for m in saved["most_confident_mistakes"]]
        assert confidences == sorted(confidences, reverse=True)
    page = (ticket_run / "report.html").read_text()
    assert "<h2>Predictions</h2>" in page and "href='predictions/test.csv'" in page


def test_predict_joins_the_columns_as_training_did(ticket_run, tickets, tmp_path):
    """Predicting the test file gives the run's own test probabilities: the same joined
    texts, the same labels."""
    out = tmp_path / "out.csv"
    entrena.predict(ticket_run, tickets / "test.csv", output=out, progress=False)
    predicted = pd.read_csv(out, sep=";", encoding="cp1252", keep_default_na=False)
    kept = pd.read_csv(ticket_run / "predictions" / "test.csv", keep_default_na=False)
    rows = kept["row"].to_numpy() - 1
    np.testing.assert_allclose(predicted["prob_Billing"].to_numpy()[rows],
                               kept["prob_Billing"].to_numpy(), atol=1e-5)


# --- predict output format ---------------------------------------------------------------

def test_predict_writes_the_inputs_delimiter_and_encoding(ticket_run, tickets, tmp_path):
    out = tmp_path / "out.csv"
    result = entrena.predict(ticket_run, tickets / "test.csv", output=out, progress=False,
                             chunk_rows=7)
    raw = out.read_bytes()
    assert raw.decode("cp1252").splitlines()[0].startswith("subject;description;category;")
    with pytest.raises(UnicodeDecodeError):
        raw.decode("utf-8")  # the € and é stay single cp1252 bytes
    assert result.summary["output_format"] == {"delimiter": ";", "encoding": "cp1252"}
    entrena.predict(ticket_run, tickets / "test.csv", output=tmp_path / "out.tsv",
                    progress=False)
    assert (tmp_path / "out.tsv").read_bytes().decode("cp1252").startswith("subject\t")
    entrena.predict(ticket_run, tickets / "test.csv", output=tmp_path / "out.jsonl",
                    progress=False)
    first = json.loads((tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert set(first) >= {"subject", "description", "predicted_label"}


def test_predict_text_column_option_names_several_columns(ticket_run, tickets, tmp_path):
    frame = pd.read_csv(tickets / "test.csv", sep=";", encoding="cp1252",
                        keep_default_na=False).rename(columns={"subject": "title"})
    renamed = tmp_path / "renamed.csv"
    frame.to_csv(renamed, index=False)
    result = run_cli("predict", ticket_run, "-i", renamed, "-o", tmp_path / "o.csv",
                     cwd=tmp_path)
    assert result.returncode == 2
    assert "no column 'subject'" in result.stderr and "--text-column" in result.stderr
    assert not (tmp_path / "o.csv").exists()
    result = run_cli("predict", ticket_run, "-i", renamed, "-o", tmp_path / "o.csv",
                     "--text-column", "title,description", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["text_column"] == ["title", "description"]


def test_predict_summary_keeps_the_output_path_on_one_line(ticket_run, tickets, tmp_path):
    out = tmp_path / ("a-rather-long-folder-name-for-the-output" * 2) / "predictions.csv"
    result = run_cli("predict", ticket_run, "-i", tickets / "test.csv", "-o", out,
                     cwd=tmp_path, COLUMNS="40")
    assert result.returncode == 0, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.endswith(f": {out}") and "rows predicted" in last


# --- clearer words ---------------------------------------------------------------------------

def test_a_tie_with_the_baseline_is_called_a_tie():
    from entrena.tasks.baselines import compare_with_baseline

    baselines = {"tfidf_logreg": {"validation": {"accuracy": 0.97800001}}}
    tie = compare_with_baseline({"accuracy": 0.978}, baselines, "validation")
    assert tie["outcome"] == "ties" and tie["model_beats_baseline"] is False
    assert compare_with_baseline({"accuracy": 0.99}, baselines, "validation")["outcome"] == \
        "beats"
    assert compare_with_baseline({"accuracy": 0.9}, baselines, "validation")["outcome"] == \
        "loses"


def test_diagnosis_puts_what_the_user_can_change_first(ticket_run):
    from entrena.callbacks.diagnosis import GROUPS, diagnose

    found = diagnose({"data_wait_fraction": 0.5, "padding_fraction": 0.5, "mfu": 0.01,
                      "device": "cpu", "peak_flops_per_s": 1e11, "threads": 2,
                      "cpu_utilisation": 0.1},
                     fit={"stop_reason": "early_stopping", "epochs": 1, "max_epochs": 3,
                          "epoch_time_s": 60})
    groups = [f["group"] for f in found]
    assert groups == sorted(groups, key=GROUPS.index)
    assert groups[0] == "training" and "hardware" in groups
    assert [f["code"] for f in found][:2] == ["padding_waste", "early_stopping_saved"]
    metrics = json.loads((ticket_run / "metrics.json").read_text())
    assert all(f["group"] in GROUPS and f["code"] for f in metrics["diagnosis"])
    ranks = [GROUPS.index(f["group"]) for f in metrics["diagnosis"]]
    assert ranks == sorted(ranks)


def test_no_test_file_is_said_in_metrics_and_report(tickets, tmp_path):
    config = ticket_config(tickets, test=None, max_train_samples=60)
    config["train"]["max_steps"] = 2
    run_dir = tmp_path / "runs" / "no-test"
    entrena.train(write_config(config, tmp_path / "c.yaml"), run_dir=run_dir)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert "test" not in metrics and metrics["diagnosis"][0]["code"] == "no_test_split"
    assert metrics["diagnosis"][0]["group"] == "data"
    assert set(metrics["predictions"]) == {"validation"}
    assert not (run_dir / "predictions" / "test.csv").exists()
    page = (run_dir / "report.html").read_text()
    assert "No test file (data.test)" in page


def test_library_banners_and_warnings_go_to_the_log_file_only(tmp_path, capfd):
    import logging
    import warnings

    from entrena.api.training import library_output_to
    from entrena.engine.backend import create_backend

    log_file = tmp_path / "train.log"
    handler = logging.FileHandler(log_file, encoding="utf-8")
    with library_output_to(handler):
        create_backend(accelerator="cpu", devices=1, precision="bf16-mixed", seed=0,
                       deterministic=False, num_nodes=1, strategy="auto")
        from sklearn.exceptions import ConvergenceWarning

        warnings.warn("lbfgs failed to converge", ConvergenceWarning, stacklevel=1)
    handler.close()
    written = log_file.read_text(encoding="utf-8")
    assert "Automatic Mixed Precision" in written and "failed to converge" in written
    err = capfd.readouterr().err
    assert "Automatic Mixed Precision" not in err and "failed to converge" not in err


def test_long_label_lists_are_shortened():
    from entrena.api.preparing import LABELS_SHOWN, _labels_shown
    from entrena.units import short_list

    names = [f"c{i:03d}" for i in range(200)]
    assert short_list(names) == "c000, c001, c002, c003, c004, c005, c006, c007, c008, " \
        "c009 and 190 more"
    counts = {n: i for i, n in enumerate(names)}
    shown, hidden = _labels_shown({"labels": names,
                                   "splits": {"train": {"label_counts": counts}}})
    assert len(shown) == LABELS_SHOWN and shown[0] == "c180" and len(hidden) == 180


def test_one_count_per_name_in_the_duplicates(tmp_path):
    """A text repeated under another label is an exact_duplicates (any label) row but not an
    exact_duplicates_same_label one; the check's message uses the second name."""
    from conftest import write_csv

    rows = [("same text here", "a"), ("same text here", "a"), ("same text here", "b"),
            *[(f"text number {i}", "ab"[i % 2]) for i in range(20)]]
    write_csv(tmp_path / "train.csv", rows)
    config = ticket_config(tmp_path, train=str(tmp_path / "train.csv"), test=None,
                           text_column="text", label_column="label")
    result = entrena.prepare(write_config(config, tmp_path / "c.yaml"))
    train = result.report["splits"]["train"]
    assert train["exact_duplicates"] == 2 and train["exact_duplicates_same_label"] == 1
    check = next(c for c in result.report["checks"] if c["check"] == "exact_duplicates")
    assert check["found"] == 1 and "exact_duplicates_same_label" in check["message"]


# --- tuning compares trials at equal data seen ---------------------------------------------

def test_data_position_is_the_same_for_any_batch_size():
    import math

    from entrena.engine.loop import evaluation_points
    from entrena.tuning.pruning import data_position

    rows = 400
    for evals in (1, 2, 3):
        seen = []
        for batch_size in (16, 32, 48):
            per_epoch = math.ceil(rows / batch_size)
            points = sorted(evaluation_points(per_epoch, evals))
            seen.append([data_position(epoch, p, per_epoch, evals)
                         for epoch in range(2) for p in points])
        assert seen[0] == seen[1] == seen[2]
    assert seen[0] == [333, 667, 1000, 1333, 1667, 2000]


def test_tune_reports_trials_of_two_batch_sizes_at_equal_data_seen(tiny_data, tmp_path,
                                                                  monkeypatch):
    """Two trials (batch 8 and 16, two evaluations an epoch) report at the same positions:
    half an epoch, one epoch; by optimizer step they would be 6/12 and 3/6."""
    import entrena.tuning
    from conftest import build_config
    from entrena.tuning.study import StudyResult

    reported: dict[int, list[int]] = {}

    def fake_study(run_trial, **kwargs):
        for number, batch in enumerate((8, 16)):
            steps = reported.setdefault(batch, [])
            run_trial(number, {"train.batch_size": batch},
                      lambda value, step, steps=steps: steps.append(step) and False, 600.0)
        return StudyResult(kwargs["study_name"], kwargs["storage"], "minimize", None, 2, 0, 2,
                           0, 2, "n_trials")

    monkeypatch.setattr(entrena.tuning, "run_study", fake_study)
    config = build_config({"train.max_epochs": 1, "train.evals_per_epoch": 2,
                           "train.early_stopping.enabled": False,
                           "tune.space": {"train.batch_size": {"choices": [8, 16]}}})
    entrena.tune(write_config(config, tmp_path / "c.yaml"), trials=2)
    assert reported == {8: [500, 1000], 16: [500, 1000]}


# --- the tutorial ------------------------------------------------------------------------------

def test_the_tutorial_shows_the_shipped_config_and_is_linked_from_the_readme():
    import re

    import yaml

    page = (EXAMPLES.parent / "docs" / "tutorials" / "own-data.md").read_text(encoding="utf-8")
    shown = re.search(r"`examples/tickets/config.yaml`:\n\n```yaml\n(.*?)```", page, re.DOTALL)
    shipped = (EXAMPLES / "tickets" / "config.yaml").read_text(encoding="utf-8")
    assert yaml.safe_load(shown.group(1)) == yaml.safe_load(shipped)
    assert "docs/tutorials/own-data.md" in (EXAMPLES.parent / "README.md").read_text()
    assert "Without a test file" in page


# --- multi-label -------------------------------------------------------------------------------

def test_thresholds_are_tuned_per_tag_and_tags_read_as_sets():
    from entrena.data.labels import split_tags, tag_matrix
    from entrena.tasks.metrics import multi_label_metrics, tune_thresholds

    assert split_tags(" b | a |a|", "|") == ["b", "a"]
    np.testing.assert_array_equal(tag_matrix(["a|b", "b", "c"], ["a", "b"], "|"),
                                  [[1, 1], [0, 1], [0, 0]])
    probs = np.array([[0.9, 0.30], [0.8, 0.25], [0.2, 0.10], [0.1, 0.05]])
    truth = np.array([[1, 1], [1, 1], [0, 0], [0, 0]])
    thresholds = tune_thresholds(probs, truth)
    assert thresholds[0] == 0.5 and 0.1 < thresholds[1] <= 0.25  # tag 2 needs a low cut
    scores = multi_label_metrics(truth, probs >= thresholds, ["a", "b"])
    assert scores == {"accuracy": 1.0, "micro_f1": 1.0, "macro_f1": 1.0}
    half = multi_label_metrics(truth, probs >= 0.5, ["a", "b"])
    assert half["accuracy"] == 0.5 and half["micro_f1"] == pytest.approx(2 / 3)


@pytest.fixture(scope="module")
def tagged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tagged") / "data"
    spec = importlib.util.spec_from_file_location("make_tickets", MAKE_TICKETS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main([str(folder), "--rows", "120", "--multi-label"])
    return folder


def test_joined_labels_without_multi_label_name_the_option(tagged, tmp_path):
    config = ticket_config(tagged, label_column="tags")
    result = entrena.prepare(write_config(config, tmp_path / "c.yaml"))
    check = next(c for c in result.report["checks"] if c["check"] == "joined_labels")
    assert check["found"] >= 1 and "data.multi_label: {separator: '|'}" in check["message"]


@pytest.fixture(scope="module")
def tagged_run(tagged: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tagged-run")
    config = ticket_config(tagged, label_column="tags", multi_label={"separator": "|"})
    run_dir = root / "runs" / "tagged"
    entrena.train(write_config(config, root / "config.yaml"), run_dir=run_dir)
    return run_dir


def test_multi_label_run_scores_micro_f1_beside_a_one_vs_rest_baseline(tagged_run):
    metrics = json.loads((tagged_run / "metrics.json").read_text())
    assert metrics["data"]["labels"] == ["account", "billing", "technical"]  # tags
    for role in ("validation", "test"):
        assert set(metrics[role]) >= {"loss", "accuracy", "micro_f1", "macro_f1"}
    assert set(metrics["test"]["per_class"]) == {"account", "billing", "technical"}
    baseline = metrics["baseline"]
    assert 0 <= baseline["tfidf_logreg"]["test"]["micro_f1"] <= 1
    assert baseline["comparison"]["metric"] == "micro_f1"
    meta = json.loads((tagged_run / "model" / "entrena_model.json").read_text())
    assert meta["labels"] == ["account", "billing", "technical"]
    assert meta["multi_label"]["separator"] == "|"
    assert len(meta["multi_label"]["thresholds"]) == 3
    report = json.loads((tagged_run / "data_report.json").read_text())
    assert report["multi_label"]["tags"] == ["account", "billing", "technical"]
    frame = pd.read_csv(tagged_run / "predictions" / "test.csv", keep_default_na=False)
    assert {"prob_account", "prob_billing", "prob_technical", "correct"} <= set(frame.columns)
    assert frame["label"].str.contains("|", regex=False).any()
    subset = (frame["correct"] == "yes").mean()
    assert subset == pytest.approx(metrics["test"]["accuracy"])


def test_multi_label_predict_returns_the_set_and_each_tags_probability(tagged_run, tagged,
                                                                       tmp_path):
    out = tmp_path / "out.csv"
    result = entrena.predict(tagged_run, tagged / "test.csv", output=out, progress=False)
    frame = pd.read_csv(out, sep=";", encoding="cp1252", keep_default_na=False)
    tags = {"account", "billing", "technical"}
    assert all(set(filter(None, v.split("|"))) <= tags for v in frame["predicted_label"])
    kept = pd.read_csv(tagged_run / "predictions" / "test.csv", keep_default_na=False)
    rows = kept["row"].to_numpy() - 1
    np.testing.assert_allclose(frame["prob_billing"].to_numpy()[rows],
                               kept["prob_billing"].to_numpy(), atol=1e-5)
    assert frame["predicted_label"].to_numpy()[rows].tolist() == \
        kept["predicted_label"].tolist()
    assert set(result.summary["predicted_label_counts"]) == tags


def test_multi_label_onnx_bundle_predicts_the_same_sets(tagged_run, tagged, tmp_path):
    bundle = entrena.export(tagged_run, latency_calls=3, threads=1)
    assert bundle.report["parity"]["passed"]
    meta = json.loads((bundle.bundle_dir / "entrena_model.json").read_text())
    assert meta["multi_label"]["separator"] == "|"
    torch_out, onnx_out = tmp_path / "t.jsonl", tmp_path / "o.jsonl"
    entrena.predict(tagged_run, tagged / "test.csv", output=torch_out, progress=False)
    entrena.predict(bundle.bundle_dir, tagged / "test.csv", output=onnx_out, progress=False)
    a = pd.read_json(torch_out, lines=True)
    b = pd.read_json(onnx_out, lines=True)
    assert (a["predicted_label"] == b["predicted_label"]).mean() >= 0.95
    np.testing.assert_allclose(a["prob_billing"], b["prob_billing"], atol=1e-4)


def test_an_experiment_name_over_mlflows_limit_is_refused_when_the_config_loads(tmp_path):
    config = ticket_config(tmp_path)
    config["tracking"] = {"enabled": True, "experiment": "x" * 501}
    path = write_config(config, tmp_path / "c.yaml")
    with pytest.raises(ConfigError, match=r"tracking.experiment .*501 characters; MLflow allows "
                                          r"at most 500"):
        entrena.load_config(path)
    config["tracking"]["experiment"] = "x" * 500
    entrena.load_config(write_config(config, tmp_path / "c.yaml"))


def test_multi_label_reads_json_lists_of_labels(tmp_path):
    rows = [{"subject": f"ticket {i}", "description": ["refund please", "app crashes",
                                                      "refund and crash"][i % 3],
             "tags": [["billing"], ["technical"], ["technical", "billing"]][i % 3]}
            for i in range(60)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = ticket_config(tmp_path, train=str(tmp_path / "train.jsonl"), test=None,
                           label_column="tags", multi_label={"separator": "|"})
    del config["data"]["label_map"]
    result = entrena.prepare(write_config(config, tmp_path / "c.yaml"))
    assert result.report["multi_label"]["tags"] == ["billing", "technical"]
    assert result.report["labels"] == ["billing", "billing|technical", "technical"]


def test_a_label_of_separators_only_names_its_rows(tmp_path):
    from conftest import write_csv

    rows = [(f"text number {i}", ["a", "b", "a|b"][i % 3]) for i in range(30)]
    rows[7] = ("text number 7", " | ")
    write_csv(tmp_path / "train.csv", rows)
    config = ticket_config(tmp_path, train=str(tmp_path / "train.csv"), test=None,
                           text_column="text", label_column="label",
                           multi_label={"separator": "|"})
    with pytest.raises(DataError, match=r"'label' names no tag in train rows 8 \(only the "
                                        r"separator '\|'\)"):
        entrena.prepare(write_config(config, tmp_path / "c.yaml"))
