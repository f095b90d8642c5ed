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
