"""Where data comes from (``entrena.data.sources``, ``sniffing``, ``remote``): encodings,
delimiters, quoted newlines, JSONL, Parquet, shards, fsspec URLs with a local cache, and the
bad-input messages."""

from __future__ import annotations

import functools
import http.server
import json
import socket
import threading
from pathlib import Path

import pandas as pd
import pytest

from conftest import build_config, review_rows, run_cli, write_csv
from entrena.data.sources import open_source, read_table
from entrena.data.tables import load_splits
from entrena.errors import DataError

ROWS = [("Café crème, très bon", "good"), ("“Awful” — never again", "bad"),
        ("Naïve déjà vu", "good"), ("plain ascii", "bad")]


def splits(train, **kwargs):
    args = dict(validation=None, test=None, text_column="text", label_column="label",
                validation_fraction=0.25, max_train_samples=None, max_eval_samples=None,
                on_bad_rows="skip", seed=0)
    args.update(kwargs)
    return load_splits(train=str(train), **args)


def data_error(train, **kwargs) -> str:
    with pytest.raises(DataError) as info:
        splits(train, **kwargs)
    return str(info.value)


def write_encoded(path: Path, rows, encoding: str, delimiter: str = ",") -> Path:
    lines = [f"text{delimiter}label"] + [f'"{t}"{delimiter}{label}' for t, label in rows]
    path.write_bytes(("\n".join(lines) + "\n").encode(encoding))
    return path


# --- encodings -----------------------------------------------------------------------------

@pytest.mark.parametrize(("encoding", "detected"), [
    ("utf-8", "utf-8"), ("utf-8-sig", "utf-8-sig"), ("utf-16", "utf-16"),
    ("utf-16-le", "utf-16-le"), ("cp1252", "cp1252")])
def test_encoding_is_detected_and_texts_read_back(tmp_path, encoding, detected):
    path = write_encoded(tmp_path / "train.csv", ROWS, encoding)
    (source,) = open_source(str(path), key="data.train")
    assert source.scan.encoding == detected
    assert read_table(str(path))["text"].tolist() == [t for t, _ in ROWS]


def test_latin1_without_windows_punctuation_is_latin1(tmp_path):
    rows = [("Café crème", "good"), ("Naïve", "bad")]
    path = write_encoded(tmp_path / "train.csv", rows, "latin-1")
    (source,) = open_source(str(path), key="data.train")
    assert source.scan.encoding == "latin-1"
    assert read_table(str(path))["text"].tolist() == ["Café crème", "Naïve"]


def test_undecodable_byte_names_file_offset_and_line(tmp_path):
    path = tmp_path / "train.csv"
    path.write_bytes("text,label\ncafé ok,good\nbad \xff byte,bad\n".encode()
                     .replace(b"\xc3\xbf", b"\xff"))
    offset = path.read_bytes().index(b"\xff")
    message = data_error(path)
    assert message == (f"data.train: {path}: byte {offset} (0xff, line 3) is not valid UTF-8, "
                       "though the rest of the file is UTF-8; fix or remove it (re-save the "
                       "file as UTF-8), or set data.encoding to the file's encoding")


def test_binary_file_is_refused(tmp_path):
    path = tmp_path / "train.csv"
    path.write_bytes(b"text,label\n\x00\x01\x02\x03binary\x00\x00\x00,x\n")
    assert "NUL byte at byte 11 (line 2); this is not a text file" in data_error(path)


def test_configured_encoding_is_used_as_given(tmp_path):
    path = write_encoded(tmp_path / "train.csv", ROWS, "cp1252")
    (source,) = open_source(str(path), key="data.train", encoding="latin_1")
    assert source.scan.encoding == "latin_1"


# --- delimiters, quoting, formats ----------------------------------------------------------

@pytest.mark.parametrize("delimiter", [";", "\t", "|", ","])
def test_delimiter_is_detected(tmp_path, delimiter):
    rows = [("one, two; three | four", "good"), ("five, six", "bad")] * 3
    path = write_encoded(tmp_path / "train.csv", rows, "utf-8", delimiter)
    (source,) = open_source(str(path), key="data.train")
    assert source.delimiter == delimiter
    assert read_table(str(path))["text"].tolist()[:2] == [t for t, _ in rows[:2]]


def test_quoted_fields_with_newlines_are_one_row(tmp_path):
    rows = [(f"{i} {text}", label) for i in range(5)
            for text, label in [("first line\nsecond line", "good"), ("one line", "bad"),
                                ('say "hi"\n\nbye', "good"), ("last", "bad")]]
    path = write_csv(tmp_path / "train.csv", rows)
    result = splits(path)
    assert result.report["splits"]["train"]["rows_read"] == 20
    texts = set(result.train.texts) | set(result.validation.texts)
    assert texts == {t for t, _ in rows}


def test_ragged_row_is_named(tmp_path):
    path = tmp_path / "train.csv"
    path.write_text("text,label\ngood words,good\nsay, hi,bad\n")
    assert data_error(path) == (f"data.train: {path}: row 2 has 3 fields but the header has 2; "
                                "quote values that contain the delimiter (',') or fix that row")


def test_jsonl_and_parquet_read_like_csv(tmp_path):
    frame = pd.DataFrame(review_rows(40), columns=["text", "label"])
    frame.to_json(tmp_path / "train.jsonl", orient="records", lines=True)
    frame.to_parquet(tmp_path / "train.parquet")
    write_csv(tmp_path / "train.csv", review_rows(40))
    reports = [splits(tmp_path / f"train.{s}").report for s in ("csv", "jsonl", "parquet")]
    assert reports[0]["rows"] == reports[1]["rows"] == reports[2]["rows"]
    assert reports[0]["label_counts"] == reports[2]["label_counts"]


def test_jsonl_line_that_is_not_json_is_named(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text('{"text": "a", "label": "x"}\n{"text": "b", label}\n')
    assert data_error(path).startswith(f"data.train: {path}: line 2 is not JSON: ")


def test_parquet_without_the_text_column_lists_its_columns(tmp_path):
    path = tmp_path / "train.parquet"
    pd.DataFrame({"review": ["a", "b"], "label": ["x", "y"]}).to_parquet(path)
    assert data_error(path) == (f"{path}: data.text_column = 'text' is not a column of the train "
                                "data; columns are: 'review', 'label'; set data.text_column to "
                                "one of them")


def test_a_jsonl_list_or_object_where_a_value_belongs_is_refused(tmp_path):
    # Once "['great']" became a class and an object in the text column was trained on as
    # its Python repr.
    path = tmp_path / "train.jsonl"
    path.write_text('{"text": "a", "label": "x"}\n{"text": "b", "label": ["great"]}\n')
    assert data_error(path) == (
        f"data.train: {path}: line 2: 'label' (data.label_column) is a JSON list, [\"great\"], "
        "not a string or number; write one plain value per field (a text classifier takes a "
        "list of labels per row with data.multi_label: {separator: \"|\"})")
    path.write_text('{"text": {"body": "b"}, "label": "x", "meta": [1]}\n')
    assert data_error(path).startswith(
        f"data.train: {path}: line 1: 'text' (data.text_column) is a JSON object, "
        '{"body": "b"}, not a string or number')
    path.write_text("".join(f'{{"text": "t{i}", "label": "{"xy"[i % 2]}", "meta": {{"a": 1}}}}\n'
                            for i in range(8)))
    assert len(splits(path).train) == 6  # a column that is not read may hold anything
    with pytest.raises(DataError, match=r"line 1: 'meta' is a JSON object"):
        read_table(str(path))  # every column read (a table's features)


def test_a_parquet_list_column_is_refused(tmp_path):
    path = tmp_path / "train.parquet"
    pd.DataFrame({"text": ["a", "b"], "label": [["x"], ["y", "z"]]}).to_parquet(path)
    assert data_error(path) == (
        f"data.train: {path}: column 'label' (data.label_column) is a Parquet "
        "list<element: string> column, not strings or numbers; write one plain value per row "
        "(a list of labels per row is not supported)")


def test_a_damaged_parquet_file_says_how_to_fix_it(tmp_path, config_file):
    # Before: "cannot read as Parquet: <pyarrow's words>" and nothing on what to do.
    fix = ("the file is damaged or not Parquet: write it again (pandas DataFrame.to_parquet), "
           "or give it the suffix of its real format (.csv, .tsv, .jsonl)")
    whole = tmp_path / "whole.parquet"
    pd.DataFrame(review_rows(200), columns=["text", "label"]).to_parquet(whole)
    data = whole.read_bytes()
    truncated = tmp_path / "data" / "train.parquet"
    truncated.parent.mkdir()
    truncated.write_bytes(data[:len(data) // 2])
    assert data_error(truncated) == (
        f"data.train: {truncated}: cannot read as Parquet: Parquet magic bytes not found in "
        f"footer. Either the file is corrupted or this is not a parquet file; {fix}")
    damaged = tmp_path / "damaged.parquet"
    damaged.write_bytes(data[:100] + bytes(400) + data[500:])  # a data page, not the footer
    message = data_error(damaged)
    assert message.startswith(f"data.train: {damaged}: cannot read as Parquet: ")
    assert message.endswith(f"; {fix}") and "\n" not in message

    write_csv(tmp_path / "data" / "test.csv", review_rows(10))
    result = run_cli("prepare", config_file(build_config(train="data/train.parquet")),
                     cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"error: data.train: {truncated}: cannot read as Parquet: Parquet magic bytes not found "
        f"in footer. Either the file is corrupted or this is not a parquet file; {fix}"]
    assert not (tmp_path / "runs").exists()


def test_prepare_refuses_a_list_label_with_exit_2(tmp_path, config_file):
    write_csv(tmp_path / "data" / "test.csv", review_rows(10))
    lines = [json.dumps({"text": t, "label": [label] if i == 4 else label})
             for i, (t, label) in enumerate(review_rows(20), start=1)]
    (tmp_path / "data" / "train.jsonl").write_text("\n".join(lines) + "\n")
    result = run_cli("prepare", config_file(build_config(train="data/train.jsonl")),
                     cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == (
        f"error: data.train: {tmp_path / 'data' / 'train.jsonl'}: line 4: 'label' "
        "(data.label_column) is a JSON list, [\"bad\"], not a string or number; write one "
        "plain value per field (a text classifier takes a list of labels per row with "
        "data.multi_label: {separator: \"|\"})")
    assert not (tmp_path / "runs").exists()


def test_data_test_set_to_the_training_file_says_so(tmp_path):
    # It once reported every training row as leaked ("3980 leakage") instead.
    train = write_csv(tmp_path / "train.csv", review_rows(40))
    assert data_error(train, test=str(train)) == (
        f"data.test: {train} is the same file as data.train ({train}): every test row is a "
        "training row, so its scores would mean nothing; point data.test at held-out data, or "
        "leave it out (no test scores)")
    copy = tmp_path / "copy.csv"
    copy.write_bytes(train.read_bytes())
    assert data_error(train, validation=str(copy)).startswith(
        f"data.validation: {copy} is a byte-for-byte copy of data.train ({train}): ")
    other = write_csv(tmp_path / "other.csv", review_rows(40, seed=3))
    assert len(splits(train, test=str(other)).test) == 40


def test_glob_pattern_reads_every_shard_in_order(tmp_path):
    rows = review_rows(60)
    for i in range(3):
        write_csv(tmp_path / "shards" / f"part-{i}.csv", rows[20 * i:20 * (i + 1)])
    result = splits(tmp_path / "shards" / "part-*.csv")
    report = result.report["splits"]["train"]
    assert report["rows_read"] == 60
    assert [f["rows_read"] for f in report["files"]] == [20, 20, 20]
    assert sorted(result.train.row_ids.tolist() + result.validation.row_ids.tolist()) == \
        list(range(1, 61))


def test_glob_pattern_matching_nothing_is_named(tmp_path):
    message = data_error(tmp_path / "nope-*.csv")
    assert message.startswith(f"data.train: no file matches {tmp_path / 'nope-*.csv'}; ")


def test_empty_file_is_refused(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_bytes(b"")
    assert data_error(path) == (f"data.train: {path} is empty (0 bytes); it needs a header line "
                                "and data rows (or JSON lines, or a Parquet table)")


def test_labels_mixing_numbers_and_strings_say_what_was_found(tmp_path):
    rows = [(f"text {i}", label) for i, label in enumerate(["good", "1", "bad", "2", "good"])]
    path = write_csv(tmp_path / "train.csv", rows)
    assert data_error(path) == (
        f"{path}: data.label_column 'label' mixes numbers and strings: 2 rows hold numbers "
        "(1, 2; first at row 2) and 3 rows hold strings ('good', 'bad'; first at row 1); make "
        "every label a class name or every label a number")


def test_numeric_labels_are_one_class_whatever_their_spelling(tmp_path):
    rows = [(f"text {i}", label) for i, label in enumerate(["1", "1.0", " 2", "2.0"] * 3)]
    result = splits(write_csv(tmp_path / "train.csv", rows))
    assert result.labels == ["1", "2"]


# --- remote data ---------------------------------------------------------------------------

def test_memory_filesystem_url_is_downloaded_once(tmp_path, monkeypatch):
    import fsspec

    fs = fsspec.filesystem("memory")
    with fs.open("/entrena-test/train.csv", "wb") as handle:
        handle.write(write_csv(tmp_path / "local.csv", review_rows(20)).read_bytes())
    fetched = []
    real = type(fs).get_file
    monkeypatch.setattr(type(fs), "get_file",
                        lambda self, *a, **k: (fetched.append(a[0]), real(self, *a, **k))[1])
    cache = tmp_path / "cache"
    first = open_source("memory://entrena-test/train.csv", key="data.train", cache_dir=cache)
    second = open_source("memory://entrena-test/train.csv", key="data.train", cache_dir=cache)
    assert len(fetched) == 1
    assert first[0].path == second[0].path and first[0].path.parent == cache / "downloads"
    assert first[0].name == "memory://entrena-test/train.csv"
    fs.rm("/entrena-test", recursive=True)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep test output clean
        pass


@pytest.fixture
def http_server(tmp_path):
    """A loopback HTTP server serving ``tmp_path/www``; yields its base URL."""
    root = tmp_path / "www"
    root.mkdir()
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", root, server
    server.shutdown()
    server.server_close()


def test_https_style_url_is_cached_and_used_when_the_server_is_gone(http_server, tmp_path,
                                                                   caplog):
    base, root, server = http_server
    write_csv(root / "train.csv", review_rows(40))
    cache = tmp_path / "cache"
    result = splits(f"{base}/train.csv", cache_dir=cache)
    assert result.report["splits"]["train"]["rows_read"] == 40
    (copy,) = (cache / "downloads").glob("*-train.csv")
    server.shutdown()
    server.server_close()
    again = splits(f"{base}/train.csv", cache_dir=cache)
    assert again.report["splits"]["train"]["rows_read"] == 40
    assert "cannot reach" in caplog.text and "using the copy downloaded" in caplog.text


def test_unreachable_url_is_one_clear_error(tmp_path):
    with socket.socket() as probe:  # a loopback port that nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/train.csv"
    message = data_error(url, cache_dir=tmp_path / "cache")
    assert message.startswith(f"data.train: cannot reach {url}: ")
    assert message.endswith("; check the address and the network, or download the file and "
                            "point the config at the local copy")


# --- through the CLI: exit 2, one line -----------------------------------------------------

@pytest.mark.parametrize(("content", "expected"), [
    (b"", "is empty (0 bytes)"),
    (b"text,label\ngood words,good\nsay, hi,bad\n", "row 2 has 3 fields but the header has 2"),
    ("text,label\ncafé,good\nbad \udcff,bad\n".encode("utf-8", "surrogateescape"),
     "(0xff, line 3) is not valid UTF-8"),
], ids=["empty", "ragged", "undecodable"])
def test_prepare_bad_file_exits_2_with_one_line(tmp_path, config_file, content, expected):
    write_csv(tmp_path / "data" / "test.csv", review_rows(10))
    (tmp_path / "data" / "train.csv").write_bytes(content)
    result = run_cli("prepare", config_file(build_config()), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: data.train: "), result.stderr
    assert expected in lines[0]
    assert result.stdout == "" and not (tmp_path / "runs").exists()


def test_a_folder_is_not_a_data_file(tmp_path):
    (tmp_path / "images").mkdir()
    assert data_error(tmp_path / "images") == (
        f"data.train: {tmp_path / 'images'} is a folder; name a file or a glob pattern of files "
        f"such as {tmp_path / 'images' / '*.csv'}")


# --- bad input (tests/test_bad_input_tabular.py has the tables') --------------------------

def test_a_header_naming_the_text_column_twice_is_refused(tmp_path):
    path = tmp_path / "train.csv"
    path.write_text("text,text,label\n" + "".join(f"a {i},b {i},{'good' if i % 2 else 'bad'}\n"
                                                   for i in range(40)))
    assert data_error(path) == (f"data.train: {path}: the header names column 'text' 2 times "
                                "(columns 1, 2); rename or remove the copies")  # was: read 'a'


def test_a_numeric_label_with_a_value_per_row_is_a_regression_target(tmp_path):
    path = write_csv(tmp_path / "train.csv",
                     [(text, f"{i * 1.5}") for i, (text, _) in enumerate(review_rows(40))])
    message = data_error(path)
    assert message.startswith(f"{path}: data.label_column 'label' has 40 distinct values in 40 "
                              "training rows (0, 1.5, ")
    assert message.endswith("numbers to predict (a regression target), not classes; set "
                            "data.label_column to the column of class labels, or bin the "
                            "numbers into classes")


def test_an_empty_data_train_is_bad_input_not_a_key_error():
    from entrena.data.tables import open_sources

    for empty in ("", "  ", None):  # --set data.train= gave an internal KeyError: 'train'
        with pytest.raises(DataError, match=r"^data\.train is empty; set it to the training "
                                            r"data \(a CSV, TSV, JSONL or Parquet file, a glob "
                                            r"pattern or a URL\)$"):
            open_sources(train=empty, validation=None, test=None)
