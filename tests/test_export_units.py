"""The pure parts of export and predict: parity criteria, latency statistics, chunked reading
and writing of tables (no model, no torch)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from entrena.data.streaming import TableWriter, iter_table, table_columns
from entrena.errors import DataError
from entrena.exporting.checks import Thresholds, parity_report, percentiles_ms, time_calls

# --- parity ------------------------------------------------------------------------------------

REFERENCE = np.array([[2.0, 0.0], [0.0, 1.0], [1.0, 0.5], [0.2, 0.1]])
LABELS = np.array([0, 1, 0, 1])


def test_full_precision_passes_within_the_tolerance_and_fails_beyond():
    close = REFERENCE + 5e-5
    report = parity_report(REFERENCE, close, LABELS, quantized=False, thresholds=Thresholds())
    assert report["passed"] and report["max_abs_diff"] == pytest.approx(5e-5)
    assert report["criteria"] == "max_abs_diff <= 0.0001"
    assert report["label_agreement"] == 1.0 and report["accuracy_pytorch"] == 0.75
    far = REFERENCE.copy()
    far[2, 0] += 2e-4
    assert not parity_report(REFERENCE, far, LABELS, quantized=False,
                             thresholds=Thresholds())["passed"]


def test_also_compare_counts_towards_the_largest_difference():
    singles = (REFERENCE[:1], REFERENCE[:1] + 3e-4)
    report = parity_report(REFERENCE, REFERENCE, LABELS, quantized=False,
                           thresholds=Thresholds(), also_compare=singles)
    assert report["max_abs_diff"] == pytest.approx(3e-4) and not report["passed"]


def test_quantized_needs_label_agreement_and_at_most_one_point_of_accuracy():
    n = 200
    rng = np.random.default_rng(0)
    reference = rng.normal(size=(n, 2))
    labels = reference.argmax(1)  # PyTorch is right everywhere
    exported = reference.copy()
    exported[:2] = exported[:2, ::-1]  # 2 of 200 flipped: agreement 0.99, drop 0.01
    report = parity_report(reference, exported, labels, quantized=True, thresholds=Thresholds())
    assert report["label_agreement"] == pytest.approx(0.99)
    assert report["accuracy_drop"] == pytest.approx(0.01) and report["passed"]
    exported[:3] = reference[:3, ::-1]
    failed = parity_report(reference, exported, labels, quantized=True, thresholds=Thresholds())
    assert not failed["passed"] and "label_agreement >= 0.99" in failed["criteria"]


def test_quantized_without_labels_checks_agreement_only():
    report = parity_report(REFERENCE, REFERENCE + 0.3, None, quantized=True,
                           thresholds=Thresholds())
    assert report["passed"] and "accuracy_drop" not in report


def test_percentiles_and_interleaved_timing():
    stats = percentiles_ms([0.001 * i for i in range(1, 101)])
    assert stats["p50_ms"] == pytest.approx(50.5) and stats["p95_ms"] == pytest.approx(95.05)
    assert stats["calls"] == 100
    order: list[str] = []
    times = time_calls({"a": lambda x: order.append(f"a{x}"), "b": lambda x: order.append(f"b{x}")},
                       [1, 2], warmup=1)
    assert order == ["a1", "b1", "a1", "b1", "a2", "b2"]
    assert {k: len(v) for k, v in times.items()} == {"a": 2, "b": 2}


# --- chunked reading and writing ---------------------------------------------------------------

@pytest.fixture
def table() -> pd.DataFrame:
    return pd.DataFrame({"id": ["007", "008", "009", "010", "011"],
                         "text": ["one", "", "NA", "  ", "five, with a comma"]})


def test_csv_chunks_keep_values_as_text_and_report_missing(tmp_path, table):
    path = tmp_path / "in.csv"
    table.to_csv(path, index=False)
    chunks = list(iter_table(path, chunk_rows=2, na_columns=["text"]))
    assert [c.first_row for c in chunks] == [1, 3, 5]
    assert [len(c.frame) for c in chunks] == [2, 2, 1]
    whole = pd.concat([c.frame for c in chunks], ignore_index=True)
    assert whole["id"].tolist() == ["007", "008", "009", "010", "011"]
    assert whole["text"].tolist() == ["one", "", "NA", "  ", "five, with a comma"]
    missing = np.concatenate([c.missing["text"] for c in chunks])
    assert missing.tolist() == [False, True, True, False, False]  # blank: left to empty_values
    assert chunks[-1].fraction_done == 1.0
    assert table_columns(path) == ["id", "text"]


def test_jsonl_and_parquet_chunks(tmp_path, table):
    jsonl = tmp_path / "in.jsonl"
    records = [{"text": "a", "n": 1}, {"text": None, "n": 2}, {"text": "c", "n": 3}]
    jsonl.write_text("\ufeff" + json.dumps(records[0]) + "\n\n"
                     + "\n".join(json.dumps(r) for r in records[1:]) + "\n")
    chunks = list(iter_table(jsonl, chunk_rows=2, na_columns=["text"]))
    assert [c.first_row for c in chunks] == [1, 3]
    assert np.concatenate([c.missing["text"] for c in chunks]).tolist() == [False, True, False]
    parquet = tmp_path / "in.parquet"
    table.to_parquet(parquet)
    frames = [c.frame for c in iter_table(parquet, chunk_rows=3)]
    assert [len(f) for f in frames] == [3, 2]
    pd.testing.assert_frame_equal(pd.concat(frames, ignore_index=True), table)


def test_bad_jsonl_line_is_named(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text('{"text": "a"}\n[1, 2]\n')
    with pytest.raises(DataError, match="line 2 is a JSON list, not an object"):
        list(iter_table(path))
    path.write_text('{"text": "a"}\n{"text": \n')
    with pytest.raises(DataError, match="line 2 is not JSON"):
        list(iter_table(path))


def test_unsupported_and_missing_files(tmp_path):
    with pytest.raises(DataError) as caught:
        list(iter_table(tmp_path / "nope.csv"))
    assert str(caught.value) == f"input: file not found: {tmp_path / 'nope.csv'}; check the path"
    with pytest.raises(DataError) as caught:  # a relative path: where it was looked for
        list(iter_table(Path("nope.csv")))
    assert str(caught.value) == ("input: file not found: nope.csv; check the path (cwd is "
                                 f"{tmp_path})")
    (tmp_path / "x.xlsx").write_text("")
    with pytest.raises(DataError, match="unsupported file type '.xlsx'"):
        list(iter_table(tmp_path / "x.xlsx"))
    with pytest.raises(DataError, match="unsupported file type '.txt'"):
        TableWriter(tmp_path / "out.txt")


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".jsonl", ".parquet"])
def test_writer_appends_chunks_and_renames_at_the_end(tmp_path, table, suffix):
    target = tmp_path / "sub" / f"out{suffix}"
    with TableWriter(target) as writer:
        writer.write(table.iloc[:2])
        assert not target.exists()  # nothing in place until the end
        writer.write(table.iloc[2:])
    back = pd.concat([c.frame for c in iter_table(target)], ignore_index=True)
    assert back["id"].astype(str).str.zfill(3).tolist() == table["id"].tolist()
    assert len(back) == 5 and not list(target.parent.glob(".out*"))


def test_writer_leaves_nothing_after_an_error(tmp_path, table):
    target = tmp_path / "out.csv"
    target.write_text("old\n")
    with pytest.raises(RuntimeError), TableWriter(target) as writer:
        writer.write(table)
        raise RuntimeError("boom")
    assert target.read_text() == "old\n" and not list(Path(tmp_path).glob(".out*"))


def test_the_closest_choice_ignores_case_and_keeps_the_choice_s_spelling():
    from entrena.errors import closest_choice

    assert closest_choice("ONNX", ["onnx", "torchscript"]) == "onnx"
    assert closest_choice("SLURM", ("torchrun", "slurm", "skypilot")) == "slurm"
    assert closest_choice("Q4_K_M", ["f16", "q8_0", "q4_k_m"]) == "q4_k_m"
    assert closest_choice("ml-flow", {"mlflow": 1, "wandb": 2}) == "mlflow"
    assert closest_choice("zzzz", ["onnx", "gguf"]) is None


def test_a_damaged_file_to_predict_on_says_how_to_fix_it(tmp_path):
    # Before: "cannot parse as parquet: <pyarrow's words>" and nothing on what to do.
    from entrena.data.sources import PARQUET_FIX
    from entrena.tasks.llm_sft.chats import read_rows

    whole = tmp_path / "whole.parquet"
    pd.DataFrame({"text": [f"review {i}" for i in range(200)]}).to_parquet(whole)
    truncated = tmp_path / "input.parquet"
    truncated.write_bytes(whole.read_bytes()[:whole.stat().st_size // 2])
    with pytest.raises(DataError) as caught:
        list(iter_table(truncated, role="input"))
    message = str(caught.value)
    assert message.startswith(f"input: {truncated}: cannot parse as parquet: ")
    assert message.endswith(f"; {PARQUET_FIX}") and "\n" not in message
    # The LLM tasks' chat reader words it the same way.
    with pytest.raises(DataError) as caught:
        read_rows(truncated, "input.parquet", "parquet", key="data.train", encoding=None,
                  delimiter=None)
    message = str(caught.value)
    assert message.startswith("data.train: input.parquet: cannot be read as PARQUET: ")
    assert message.endswith(f"; {PARQUET_FIX}") and "\n" not in message
    # A CSV row pandas cannot split says which fix applies to a text table.
    broken = tmp_path / "input.csv"
    broken.write_text('text,label\n"unclosed quote,1\n')
    with pytest.raises(DataError, match=r"cannot parse as csv: .*; fix the row it names"):
        list(iter_table(broken, role="input"))
