"""Reading data files and building clean, labelled splits (``entrena.data``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import entrena
from conftest import build_config, review_rows, write_csv
from entrena.data.sources import read_table
from entrena.data.splits import stratified_split
from entrena.data.tables import load_splits
from entrena.errors import DataError


def splits(train: Path | str, **kwargs):
    """``load_splits`` with the defaults of the config."""
    args = dict(validation=None, test=None, text_column="text", label_column="label",
                validation_fraction=0.2, max_train_samples=None, max_eval_samples=None,
                on_bad_rows="skip", seed=0)
    args.update(kwargs)
    return load_splits(train=str(train), **args)


def data_error(train, **kwargs) -> str:
    with pytest.raises(DataError) as info:
        splits(train, **kwargs)
    return str(info.value)


# --- files and columns ---------------------------------------------------------------------

def test_missing_data_file_names_key_and_path(tmp_path):
    message = data_error(tmp_path / "nope.csv")
    assert f"data.train: file not found: {tmp_path / 'nope.csv'}" in message
    assert "relative paths resolve against the config file's folder" in message


def test_missing_test_file_names_its_key(tiny_data, tmp_path):
    message = data_error(tiny_data["train"], test=str(tmp_path / "gone.csv"))
    assert message.startswith("data.test: file not found:")


def test_missing_data_file_through_train_writes_nothing(tiny_data, tmp_path):
    with pytest.raises(DataError, match="data.train: file not found: .*nope.csv"):
        entrena.train(build_config({"data.train": "nope.csv"}))
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("key", ["text_column", "label_column"])
def test_missing_column_lists_existing_columns(tiny_data, key):
    message = data_error(tiny_data["train"], **{key: "review"})
    assert f"data.{key} = 'review' is not a column of the train data" in message
    assert "columns are: 'text', 'label'" in message
    assert f"set data.{key} to one of them" in message


def test_unsupported_suffix_lists_supported(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text("text,label\n")
    assert "unsupported file type '.txt'; use one of .csv, .tsv" in data_error(path)


def test_empty_file_is_refused_with_its_size(tmp_path):
    path = tmp_path / "train.csv"
    path.write_text("")
    assert data_error(path) == (f"data.train: {path} is empty (0 bytes); it needs a header line "
                                "and data rows (or JSON lines, or a Parquet table)")


# --- bad rows ------------------------------------------------------------------------------

def bad_rows_csv(tmp_path: Path) -> Path:
    rows = review_rows(40)
    rows[2] = ("", "good")      # row 3: empty text
    rows[4] = ("   ", "good")   # row 5: blank text
    rows[6] = ("fine words", "")  # row 7: missing label
    return write_csv(tmp_path / "train.csv", rows)


def test_bad_rows_are_skipped_and_counted(tmp_path):
    result = splits(bad_rows_csv(tmp_path))
    report = result.report["splits"]["train"]
    assert report["rows_read"] == 40
    assert report["empty_text"] == 2 and report["empty_label"] == 1
    assert report["skipped_rows"] == {"empty_text": [3, 5], "empty_label": [7]}
    assert result.report["rows"]["train"] + result.report["rows"]["validation"] == 37
    assert all(text.strip() for text in result.train.texts + result.validation.texts)


def test_bad_rows_refused_with_row_numbers(tmp_path):
    message = data_error(bad_rows_csv(tmp_path), on_bad_rows="error")
    assert "empty 'text' in rows 3, 5" in message
    assert "empty 'label' in rows 7" in message
    assert "set data.on_bad_rows: skip to drop them" in message


# --- labels --------------------------------------------------------------------------------

def test_label_unseen_in_training_is_named(tiny_data, tmp_path):
    test = write_csv(tmp_path / "test.csv", [("ok text", "good"), ("meh", "neutral")])
    message = data_error(tiny_data["train"], test=str(test))
    assert "label(s) 'neutral' in test rows 2 never occur in the training data" in message
    assert "(labels: bad, good)" in message


def test_single_class_is_refused(tmp_path):
    path = write_csv(tmp_path / "train.csv", [(f"text {i}", "good") for i in range(10)])
    assert "a classifier needs at least 2 classes" in data_error(path)


def test_integer_labels_work(tmp_path):
    rows = review_rows(40, labels=(0, 1))
    train = write_csv(tmp_path / "train.csv", rows)
    test = write_csv(tmp_path / "test.csv", rows[:10])
    result = splits(train, test=str(test))
    assert result.labels == ["0", "1"]
    assert sorted(set(result.test.labels.tolist())) == [0, 1]


def test_integer_labels_with_a_gap_stay_integers(tmp_path):
    rows = review_rows(40, labels=(0, 1))
    rows[3] = (rows[3][0], "")  # pandas reads the column as float: 0.0, 1.0, NaN
    result = splits(write_csv(tmp_path / "train.csv", rows))
    assert result.labels == ["0", "1"]
    assert result.report["splits"]["train"]["skipped_rows"]["empty_label"] == [4]


# --- formats -------------------------------------------------------------------------------

def test_csv_with_byte_order_mark_reads_fine(tmp_path):
    path = write_csv(tmp_path / "train.csv", review_rows(20), bom=True)
    assert path.read_bytes().startswith(b"\xef\xbb\xbf")
    frame = read_table(str(path))
    assert list(frame.columns) == ["text", "label"]
    assert len(splits(path).labels) == 2


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".jsonl", ".parquet"])
def test_formats_read_the_same(tmp_path, suffix):
    frame = pd.DataFrame(review_rows(20), columns=["text", "label"])
    path = tmp_path / f"train{suffix}"
    if suffix == ".csv":
        frame.to_csv(path, index=False)
    elif suffix == ".tsv":
        frame.to_csv(path, sep="\t", index=False)
    elif suffix == ".jsonl":
        frame.to_json(path, orient="records", lines=True)
    else:
        frame.to_parquet(path)
    read = read_table(str(path))
    assert read["text"].tolist() == frame["text"].tolist()
    assert read["label"].tolist() == frame["label"].tolist()


def test_tsv_with_bom(tmp_path):
    path = write_csv(tmp_path / "train.tsv", review_rows(20), delimiter="\t", bom=True)
    assert list(read_table(str(path)).columns) == ["text", "label"]


# --- validation split and subsampling ------------------------------------------------------

def test_validation_split_is_stratified_and_seeded():
    labels = np.array([0] * 60 + [1] * 30 + [2] * 10)
    kept, held = stratified_split(labels, 0.2, seed=3)
    assert sorted(np.concatenate([kept, held]).tolist()) == list(range(100))
    assert np.bincount(labels[held]).tolist() == [12, 6, 2]
    again_kept, again_held = stratified_split(labels, 0.2, seed=3)
    assert held.tolist() == again_held.tolist() and kept.tolist() == again_kept.tolist()
    _, other = stratified_split(labels, 0.2, seed=4)
    assert other.tolist() != held.tolist()


def test_singleton_class_stays_in_training():
    labels = np.array([0] * 10 + [1] * 10 + [2])
    kept, held = stratified_split(labels, 0.2, seed=0)
    assert 20 in kept.tolist() and 20 not in held.tolist()


def test_load_splits_reports_the_split(tiny_data):
    result = splits(tiny_data["train"], validation_fraction=0.25, seed=7)
    assert result.report["rows"] == {"train": 72, "validation": 24, "test": 0}
    assert result.report["label_counts"]["validation"] == {"bad": 12, "good": 12}
    assert result.report["validation_split"] == {"from": "train", "fraction": 0.25,
                                                 "stratified": True, "seed": 7,
                                                 "grouped_by": "normalised text"}
    assert not set(result.train.row_ids) & set(result.validation.row_ids)


def test_too_small_validation_split_is_a_data_error(tmp_path):
    rows = [(f"t{i}", label) for i, label in enumerate("aaaabbbccc")]
    path = write_csv(tmp_path / "train.csv", rows)
    with pytest.raises(DataError, match="validation"):
        splits(path, validation_fraction=0.1)


def test_max_train_samples_subsamples_stratified(tiny_data):
    result = splits(tiny_data["train"], max_train_samples=20)
    assert len(result.train) == 20
    assert result.report["label_counts"]["train"] == {"bad": 10, "good": 10}
    again = splits(tiny_data["train"], max_train_samples=20)
    assert result.train.row_ids.tolist() == again.train.row_ids.tolist()
    assert len(result.validation) == 20  # validation is split off before subsampling


def test_max_train_samples_just_below_row_count(tiny_data):
    result = splits(tiny_data["train"], max_train_samples=75)  # 75 of the 76 left after the split
    assert len(result.train) == 75


def test_validation_file_without_usable_rows_is_refused(tiny_data, tmp_path):
    empty = write_csv(tmp_path / "validation.csv", [("", "good"), ("  ", "bad")])
    with pytest.raises(DataError, match="validation"):
        splits(tiny_data["train"], validation=str(empty))
