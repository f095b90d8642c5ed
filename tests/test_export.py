"""``entrena export`` and ``entrena predict`` on ``examples/tiny`` (a 2-layer BERT of width 32
on the bundled reviews): both formats, int8, parity and latency keys, predict with bad rows,
and the bad-input errors through the real CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import entrena
from entrena.errors import CheckFailed, ConfigError, DataError

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "examples" / "tiny" / "config.yaml"
REVIEWS = ROOT / "examples" / "reviews"
# Small and single-threaded: these tests share a few busy cores.
TINY_OVERRIDES = {"tracking.enabled": False, "train.num_threads": 1, "train.max_epochs": 1,
                  "data.max_train_samples": 160, "data.max_eval_samples": 64}
FAST = {"latency_calls": 3, "threads": 1}


def cli(*args: str | Path, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """The real console script (or ``python -m entrena.cli``), output captured."""
    script = Path(sys.executable).parent / "entrena"
    command = [str(script)] if script.is_file() else [sys.executable, "-m", "entrena.cli"]
    env = {"COLUMNS": "500", "NO_COLOR": "1", "TOKENIZERS_PARALLELISM": "false",
           "OMP_NUM_THREADS": "1", "PATH": str(Path(sys.executable).parent)}
    import os

    env = {**{k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}, **env}
    return subprocess.run([*command, *map(str, args)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)


def error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The one ``error: …`` line of stderr (no traceback)."""
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.strip().splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory, reviews_data: Path) -> Path:
    """A finished tiny run (trained once for the module)."""
    run_dir = tmp_path_factory.mktemp("export") / "runs" / "tiny"
    entrena.train(TINY, run_dir=run_dir, overrides=TINY_OVERRIDES)
    return run_dir


@pytest.fixture(scope="module")
def onnx_bundle(tiny_run: Path) -> entrena.ExportResult:
    return entrena.export(tiny_run, **FAST)


@pytest.fixture(scope="module")
def int8_bundle(tiny_run: Path) -> entrena.ExportResult:
    return entrena.export(tiny_run, quantize="int8", **FAST)


@pytest.fixture(scope="module")
def torchscript_bundle(tiny_run: Path) -> entrena.ExportResult:
    return entrena.export(tiny_run, format="torchscript", **FAST)


@pytest.fixture
def reviews_with_bad_rows(tmp_path: Path) -> Path:
    """Six rows: three real reviews and three empty texts (empty, blank, ``NA``), an id
    column with leading zeros that must survive as written."""
    frame = pd.DataFrame({
        "id": ["001", "002", "003", "004", "005", "006"],
        "review": ["Great coffee, I will buy it again.", "", "   ",
                   "Stale and broken when it arrived.", "NA", "The best tea I have had."],
        "note": ["a", "b", "c", "d", "e", "f"],
    })
    path = tmp_path / "new.csv"
    frame.to_csv(path, index=False)
    return path


# --- export ------------------------------------------------------------------------------------

def test_onnx_bundle_is_self_contained(onnx_bundle, tiny_run):
    bundle = onnx_bundle.bundle_dir
    assert bundle == tiny_run / "export" / "onnx"
    for name in ("model.onnx", "tokenizer.json", "entrena_model.json", "export.json",
                 "MODEL_CARD.md"):
        assert (bundle / name).is_file(), name
    meta = json.loads((bundle / "entrena_model.json").read_text())
    assert meta["labels"] == ["great", "other"]
    assert meta["text_column"] == "review" and meta["max_length"] == 128
    assert json.loads((bundle / "export.json").read_text()) == onnx_bundle.report


def test_onnx_parity_latency_and_size_keys(onnx_bundle):
    report = onnx_bundle.report
    parity = report["parity"]
    assert parity["passed"] is True and onnx_bundle.passed
    assert parity["max_abs_diff"] <= 1e-4
    assert parity["label_agreement"] == 1.0
    assert parity["examples"] == 1000 and parity["dataset"] == "test"
    assert {1, 32} <= set(parity["batch_sizes"]) and parity["batch_shapes"] >= 2
    for engine in ("onnxruntime", "pytorch"):
        for batch in ("batch_1", "batch_32"):
            stats = report["latency"][engine][batch]
            assert 0 < stats["p50_ms"] <= stats["p95_ms"] and stats["calls"] == 3
    sizes = report["size_bytes"]
    assert sizes["model_file"] == (onnx_bundle.bundle_dir / "model.onnx").stat().st_size
    assert sizes["bundle"] > sizes["model_file"] > 0 and sizes["pytorch_weights"] > 0
    assert report["opset"] == 18 and report["program"] == "onnx"


def test_onnx_has_dynamic_batch_and_sequence_axes(onnx_bundle, tiny_run):
    import onnx
    import torch

    from entrena.exporting.onnx_format import OnnxRunner
    from entrena.tasks.text.model import load_classifier

    graph = onnx.load(str(onnx_bundle.bundle_dir / "model.onnx")).graph
    for value in graph.input:
        dims = [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]
        assert all(isinstance(d, str) and d for d in dims), (value.name, dims)
    model, _, _ = load_classifier(tiny_run / "model")
    runner = OnnxRunner(onnx_bundle.bundle_dir / "model.onnx", threads=1)
    rng = np.random.default_rng(0)
    for batch, length in ((1, 5), (3, 17), (7, 128)):
        ids = rng.integers(1000, 2000, (batch, length)).astype(np.int64)
        mask = np.ones_like(ids)
        mask[0, length // 2:] = 0
        with torch.no_grad():
            expected = model(torch.from_numpy(ids), torch.from_numpy(mask)).numpy()
        np.testing.assert_allclose(runner(ids, mask), expected, atol=1e-4)


def test_int8_is_smaller_and_agrees(int8_bundle, onnx_bundle):
    report = int8_bundle.report
    assert int8_bundle.bundle_dir.name == "onnx-int8"
    assert report["quantize"] == "int8"
    assert report["quantization"]["method"] == "onnxruntime.quantization.quantize_dynamic"
    assert report["size_bytes"]["model_file"] < onnx_bundle.report["size_bytes"]["model_file"] / 2
    parity = report["parity"]
    assert parity["passed"] is True
    assert parity["label_agreement"] >= 0.99 and parity["accuracy_drop"] <= 0.01
    assert "label_agreement >= 0.99" in parity["criteria"]
    assert not (int8_bundle.bundle_dir / "full-precision-model.onnx").exists()


def test_torchscript_bundle(torchscript_bundle):
    report = torchscript_bundle.report
    assert report["program"] == "torchscript" and report["file"] == "model.pt"
    assert report["opset"] is None and "fallback_reason" not in report
    assert report["parity"]["passed"] is True and report["parity"]["max_abs_diff"] <= 1e-4
    assert set(report["latency"]) >= {"torchscript", "pytorch"}


def test_torchscript_falls_back_to_torch_export_and_says_so(tiny_run, tmp_path, monkeypatch,
                                                           reviews_with_bad_rows):
    from entrena.exporting import formats

    def broken_trace(*args, **kwargs):
        raise RuntimeError("cannot trace this model")

    real = formats.FORMATS["torchscript"]
    patched = formats.ExportFormat(
        "torchscript", (formats.Attempt("torchscript", "model.pt", broken_trace), real.attempts[1]),
        real.quantizations, real.takes_opset, real.runs_on)
    monkeypatch.setitem(formats.FORMATS, "torchscript", patched)
    result = entrena.export(tiny_run, format="torchscript", output=tmp_path / "ts", **FAST)
    assert result.report["program"] == "torch.export" and result.report["file"] == "model.pt2"
    assert "cannot trace this model" in result.report["fallback_reason"]
    assert result.passed and not (tmp_path / "ts" / "model.pt").exists()
    card = (tmp_path / "ts" / "MODEL_CARD.md").read_text()
    assert "TorchScript failed for this model" in card
    out = entrena.predict(tmp_path / "ts", reviews_with_bad_rows, output=tmp_path / "p.csv",
                          progress=False)
    assert out.summary["backend"] == "torch.export" and out.summary["rows"]["predicted"] == 3


def test_model_card_says_what_the_issue_asks(onnx_bundle, tiny_run):
    card = (onnx_bundle.bundle_dir / "MODEL_CARD.md").read_text()
    for heading in ("## Task", "## Data", "## Metrics", "## Training", "## This export",
                    "## Intended use", "## Limits"):
        assert heading in card
    metrics = json.loads((tiny_run / "metrics.json").read_text())
    assert f"{metrics['test']['accuracy']:.4f}" in card
    assert "`great`, `other`" in card and "Cost: not recorded" in card
    assert str(tiny_run.parent) not in card  # the bundle ships: no trainer's folders in it
    assert card.count("label counts") + card.count("Label counts") <= 3  # once per split


def test_failed_parity_still_writes_the_bundle_and_exits_3(tiny_run, tmp_path, monkeypatch):
    """Every attempt fails (TorchScript, then its torch.export fallback): the last one's bundle
    is written with parity.passed false, the JSON still goes to stdout, and the exit code is 3."""
    from typer.testing import CliRunner

    from entrena.cli import app
    from entrena.exporting import sequence_bundle as exporter

    real = exporter.parity_report

    def failing(*args, **kwargs):
        return {**real(*args, **kwargs), "passed": False}

    monkeypatch.setattr(exporter, "parity_report", failing)
    target = tmp_path / "failed"
    result = CliRunner().invoke(app, ["export", str(tiny_run), "--format", "torchscript",
                                      "--output", str(target), "--json", "--latency-calls", "3"])
    assert result.exit_code == 3, result.output
    document = json.loads(result.stdout)
    assert document["parity"]["passed"] is False and document["program"] == "torch.export"
    assert "torchscript: parity failed" in document["fallback_reason"]
    assert "error: parity check failed" in result.stderr
    assert json.loads((target / "export.json").read_text())["parity"]["passed"] is False
    assert (target / "model.pt2").is_file() and (target / "MODEL_CARD.md").is_file()
    assert issubclass(entrena.api.ParityFailed, CheckFailed) and CheckFailed.exit_code == 3


def test_export_reports_a_missing_test_file_and_accepts_parity_data(tiny_run, tmp_path):
    report = json.loads((tiny_run / "data_report.json").read_text())
    copy = tmp_path / "run"
    import shutil

    shutil.copytree(tiny_run, copy, ignore=shutil.ignore_patterns("export"))
    report["splits"]["test"]["file"] = str(tmp_path / "gone.csv")
    (copy / "data_report.json").write_text(json.dumps(report))
    with pytest.raises(DataError, match="--parity-data"):
        entrena.export(copy, format="torchscript", **FAST)
    texts = pd.DataFrame({"review": ["Great tea.", "Awful, stale."], "x": [1, 2]})
    texts.to_csv(tmp_path / "texts.csv", index=False)
    result = entrena.export(copy, format="torchscript", parity_data=tmp_path / "texts.csv",
                            **FAST)
    assert result.report["parity"]["examples"] == 2
    assert "accuracy_exported" not in result.report["parity"]


# --- predict -----------------------------------------------------------------------------------

def test_predict_keeps_every_row_in_order_and_skips_empty_texts(tiny_run, reviews_with_bad_rows,
                                                               tmp_path):
    out = tmp_path / "out.csv"
    result = entrena.predict(tiny_run, reviews_with_bad_rows, output=out, progress=False)
    frame = pd.read_csv(out, dtype=str, keep_default_na=False)
    assert list(frame.columns) == ["id", "review", "note", "predicted_label", "prob_great",
                                   "prob_other", "status"]
    assert frame["id"].tolist() == ["001", "002", "003", "004", "005", "006"]
    assert frame["review"].tolist()[4] == "NA"  # kept as written, but counted as empty
    assert frame["status"].tolist() == ["ok", "skipped: empty text", "skipped: empty text", "ok",
                                        "skipped: empty text", "ok"]
    ok = frame[frame["status"] == "ok"]
    assert set(ok["predicted_label"]) <= {"great", "other"}
    probs = ok[["prob_great", "prob_other"]].astype(float).to_numpy()
    np.testing.assert_allclose(probs.sum(1), 1.0, atol=1e-9)
    skipped = frame[frame["status"] != "ok"]
    assert (skipped["predicted_label"] == "").all() and (skipped["prob_great"] == "").all()
    summary = result.summary
    assert summary["rows"] == {"read": 6, "predicted": 3, "skipped": 3}
    assert summary["skipped"]["empty text"] == {"count": 3, "rows": [2, 3, 5]}
    assert summary["backend"] == "pytorch" and summary["text_column"] == "review"


def test_predict_streams_in_chunks_with_the_same_result(tiny_run, reviews_with_bad_rows,
                                                        tmp_path):
    whole = entrena.predict(tiny_run, reviews_with_bad_rows, output=tmp_path / "a.csv",
                            progress=False)
    chunked = entrena.predict(tiny_run, reviews_with_bad_rows, output=tmp_path / "b.csv",
                              progress=False, chunk_rows=2, batch_size=1)
    a, b = pd.read_csv(whole.output), pd.read_csv(chunked.output)
    pd.testing.assert_frame_equal(a.drop(columns=["prob_great", "prob_other"]),
                                  b.drop(columns=["prob_great", "prob_other"]))
    np.testing.assert_allclose(a["prob_great"], b["prob_great"], atol=1e-5)
    assert chunked.summary["skipped"]["empty text"]["rows"] == [2, 3, 5]


def test_onnx_predictions_match_pytorch(tiny_run, onnx_bundle, int8_bundle, tmp_path):
    test_csv = REVIEWS / "data" / "test.csv"
    torch_out = entrena.predict(tiny_run, test_csv, output=tmp_path / "t.parquet",
                                progress=False)
    onnx_out = entrena.predict(onnx_bundle.bundle_dir, test_csv, output=tmp_path / "o.parquet",
                               progress=False)
    via_run = entrena.predict(tiny_run, test_csv, output=tmp_path / "r.jsonl", backend="onnx",
                              progress=False)
    assert onnx_out.summary["backend"] == via_run.summary["backend"] == "onnxruntime"
    assert via_run.summary["model"] == str(onnx_bundle.bundle_dir)
    t, o = pd.read_parquet(torch_out.output), pd.read_parquet(onnx_out.output)
    r = pd.read_json(via_run.output, lines=True)
    assert len(t) == len(o) == len(r) == 1000
    assert (t["predicted_label"] == o["predicted_label"]).all()
    assert (r["predicted_label"] == o["predicted_label"]).all()
    np.testing.assert_allclose(t["prob_great"], o["prob_great"], atol=1e-4)
    assert t["review"].tolist() == pd.read_csv(test_csv)["review"].tolist()


def test_predict_reads_jsonl_and_parquet(tiny_run, tmp_path):
    rows = [{"review": "Great coffee.", "n": 1}, {"review": None, "n": 2},
            {"review": "Broken bag.", "n": 3}]
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    pd.DataFrame(rows).to_parquet(tmp_path / "in.parquet")
    for source in (jsonl, tmp_path / "in.parquet"):
        result = entrena.predict(tiny_run, source, output=tmp_path / f"{source.suffix[1:]}.csv",
                                 progress=False)
        out = pd.read_csv(result.output)
        assert out["n"].tolist() == [1, 2, 3]
        assert out["status"].tolist() == ["ok", "skipped: empty text", "ok"]


def test_predict_refuses_a_json_list_or_object_as_the_text(tiny_run, tmp_path):
    rows = [{"review": "Great coffee."}, {"review": ["Broken", "bag"]}, {"review": {"a": 1}}]
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = tmp_path / "out.csv"
    with pytest.raises(DataError) as raised:
        entrena.predict(tiny_run, jsonl, output=out, progress=False)
    assert str(raised.value) == ("input rows 2, 3: 'review' is a JSON list or object, not a "
                                 "text; write one string per row")
    assert not out.exists()


def test_predict_on_bad_rows_error_names_the_rows_and_writes_nothing(tiny_run,
                                                                     reviews_with_bad_rows,
                                                                     tmp_path):
    out = tmp_path / "out.csv"
    with pytest.raises(DataError, match=r"empty 'review' in input rows 2, 3, 5"):
        entrena.predict(tiny_run, reviews_with_bad_rows, output=out, on_bad_rows="error",
                        progress=False)
    assert not out.exists() and not list(tmp_path.glob(".out.csv.*"))


def test_predict_cli_json_and_text_column(tiny_run, tmp_path):
    from typer.testing import CliRunner

    from entrena.cli import app

    pd.DataFrame({"body": ["Great tea.", ""], "k": ["x", "y"]}).to_csv(tmp_path / "in.csv",
                                                                       index=False)
    result = CliRunner().invoke(app, ["predict", str(tiny_run), "--input", str(tmp_path / "in.csv"),
                                      "--output", str(tmp_path / "out.tsv"), "--text-column",
                                      "body", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)  # exactly one JSON document on stdout
    assert summary["rows"] == {"read": 2, "predicted": 1, "skipped": 1}
    out = pd.read_csv(tmp_path / "out.tsv", sep="\t")
    assert out["k"].tolist() == ["x", "y"] and out["status"].tolist()[1] == "skipped: empty text"


# --- bad input, through the real CLI (exit 2, one error line) -------------------------------

def test_run_without_a_finished_model(tmp_path):
    unfinished = tmp_path / "runs" / "half"
    (unfinished / "model").mkdir(parents=True)
    (unfinished / "status.json").write_text('{"status": "running"}')
    for args in (("export", unfinished), ("predict", unfinished, "--input", "x.csv",
                                          "--output", "y.csv")):
        result = cli(*args, cwd=tmp_path)
        assert result.returncode == 2
        line = error_line(result)
        assert "no finished model" in line and "status.json says 'running'" in line
        assert "missing model/config.json" in line and "model/head.safetensors" in line
        assert f"entrena train CONFIG --run-dir {unfinished}" in line
    missing = cli("export", tmp_path / "nowhere", cwd=tmp_path)
    assert missing.returncode == 2 and "no such run directory" in error_line(missing)


def test_input_without_the_text_column(tiny_run, tmp_path):
    pd.DataFrame({"text": ["Great tea."], "id": [1]}).to_csv(tmp_path / "in.csv", index=False)
    result = cli("predict", tiny_run, "--input", "in.csv", "--output", "out.csv", cwd=tmp_path)
    assert result.returncode == 2
    line = error_line(result)
    assert "no column 'review'" in line and "data.text_column" in line
    assert "columns are: 'text', 'id'" in line and "--text-column" in line
    assert not (tmp_path / "out.csv").exists()
    with pytest.raises(DataError, match="no column 'body' \\(--text-column\\)"):
        entrena.predict(tiny_run, tmp_path / "in.csv", text_column="body", progress=False)


def test_opset_the_exporter_does_not_support(tiny_run, tmp_path):
    from entrena.exporting.onnx_format import supported_opsets

    result = cli("export", tiny_run, "--opset", "7", cwd=tmp_path)
    assert result.returncode == 2
    allowed = supported_opsets()
    line = error_line(result)
    assert "--opset 7: the installed ONNX exporter (torch " in line
    assert f"writes opsets {allowed.start} to {allowed.stop - 1}" in line
    assert not (tiny_run / "export" / "onnx-opset7").exists()


@pytest.mark.parametrize("options, message", [
    ({"format": "onx"}, "--format 'onx' is not an export format; available formats are: "
                        "onnx, torchscript, gguf, hf; did you mean 'onnx'?"),
    ({"format": "ONNX"}, "--format 'ONNX' is not an export format; available formats are: "
                         "onnx, torchscript, gguf, hf; did you mean 'onnx'?"),
    ({"format": "gguf", "quantize": "q8"}, "--quantize 'q8' is not a quantisation of "
                                          "--format gguf; use one of: f16, q8_0, q4_k_m "
                                          "(did you mean 'q8_0'?)"),
    ({"format": "torchscript", "quantize": "int8"},
     "--quantize 'int8' is not available for --format torchscript; use --format onnx"),
    ({"format": "torchscript", "opset": 18}, "--opset applies to --format onnx only"),
    ({"quantize": "int4"}, "--quantize 'int4' is not a quantisation of --format onnx; use one "
                           "of: int8"),
    ({"format": "gguf", "quantize": "q3"}, "--quantize 'q3' is not a quantisation of --format "
                                          "gguf; use one of: f16, q8_0, q4_k_m"),
])
def test_bad_export_options_fail_before_reading_the_run(tmp_path, options, message):
    import re

    with pytest.raises(ConfigError, match="^" + re.escape(message)):
        entrena.export(tmp_path / "not-even-a-run", **options)


@pytest.mark.parametrize("quantize", ["Q4_K_M", "Q8_0", " F16 "])
def test_llama_cpps_spelling_of_a_quantisation_is_taken(tmp_path, quantize):
    # llama.cpp's llama-quantize and Ollama write Q4_K_M; before, it was refused.
    from entrena.errors import DataError

    with pytest.raises(DataError, match="not-even-a-run"):
        entrena.export(tmp_path / "not-even-a-run", format="gguf", quantize=quantize)


@pytest.mark.parametrize("args, message", [
    (["--atol", "-1"], "error: --atol -1.0: the largest allowed difference must be a number >= 0"),
    (["--atol", "nan"], "error: --atol nan: the largest allowed difference must be a number"),
    (["--latency-calls", "0"], "error: --latency-calls 0: give at least 1 timed call"),
    (["--parity-data", "missing.csv"], "error: --parity-data missing.csv: no such file or "
                                       "folder; give an existing data file"),
])
def test_bad_check_options_exit_2_before_reading_the_run(tmp_path, args, message):
    # Before: --atol -1 ran the whole export and exited 3 (parity "failed"); --latency-calls 0
    # exited 1 (IndexError) after the export; a missing --parity-data blamed "data.parity" and
    # the config.
    result = cli("export", tmp_path / "not-even-a-run", *args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert error_line(result).startswith(message)


def test_predict_batch_size_below_1_names_the_option(tmp_path):
    # Before: "batch size and chunk rows must be >= 1; got 0 and 1000" (no option, and a
    # "chunk rows" the CLI does not have).
    (tmp_path / "in.csv").write_text("text\ngreat\n")
    result = cli("predict", tmp_path / "not-a-run", "-i", tmp_path / "in.csv", "-o",
                 tmp_path / "out.csv", "--batch-size", "0", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert error_line(result) == ("error: --batch-size 0: give at least 1 row per model call "
                                  "(the default is 32)")
    assert not (tmp_path / "out.csv").exists()


def test_damaged_model_files_are_a_one_line_error(tiny_run, onnx_bundle, tmp_path):
    # Before: each of these was "internal error: SafetensorError / KeyError: 'labels' /
    # InvalidProtobuf" with exit 1.
    import shutil

    from entrena.errors import ModelError

    (tmp_path / "in.csv").write_text("review\ngreat coffee\n")
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run, ignore=shutil.ignore_patterns("export"))
    weights = run / "model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1000])
    result = cli("predict", run, "-i", tmp_path / "in.csv", "-o", tmp_path / "out.csv",
                 cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    line = error_line(result)
    assert f"{weights}: the saved model file is damaged (cut short: " in line
    assert f"train it again: entrena train CONFIG --run-dir {run} --restart" in line
    assert not (tmp_path / "out.csv").exists()
    with pytest.raises(ModelError, match="model.safetensors: the saved model file is damaged"):
        entrena.export(run, **FAST)
    assert not (run / "export").exists()

    bundle = tmp_path / "bundle"
    shutil.copytree(onnx_bundle.bundle_dir, bundle)
    (bundle / "entrena_model.json").write_text("{broken")
    with pytest.raises(ModelError, match=r"entrena_model.json: the saved model file is damaged "
                                         r"\(JSONDecodeError: .*\); export it again: entrena "
                                         r"export "):
        entrena.predict(bundle, tmp_path / "in.csv", output=tmp_path / "out.csv",
                        progress=False)
    shutil.copy(onnx_bundle.bundle_dir / "entrena_model.json", bundle)
    (bundle / "model.onnx").write_bytes(b"not an onnx file")
    result = cli("predict", bundle, "-i", tmp_path / "in.csv", "-o", tmp_path / "out.csv",
                 cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "model.onnx: ONNX Runtime cannot load this file (" in error_line(result)
    assert "export it again with: entrena export RUN" in error_line(result)
    assert not (tmp_path / "out.csv").exists()


def test_export_never_replaces_a_folder_that_is_not_a_bundle(tiny_run, tmp_path):
    (tmp_path / "mine.txt").write_text("keep me")
    with pytest.raises(DataError, match="exists and is not an export bundle"):
        entrena.export(tiny_run, output=tmp_path)
    assert (tmp_path / "mine.txt").read_text() == "keep me"


def test_predict_backend_errors(tiny_run, onnx_bundle, tmp_path):
    fresh = tmp_path / "run"
    import shutil

    shutil.copytree(tiny_run, fresh, ignore=shutil.ignore_patterns("export"))
    with pytest.raises(DataError, match=r"no ONNX export under .*entrena export"):
        entrena.predict(fresh, REVIEWS / "data" / "test.csv", backend="onnx", progress=False)
    with pytest.raises(DataError, match="holds an onnx model, which runs with --backend onnx"):
        entrena.predict(onnx_bundle.bundle_dir, REVIEWS / "data" / "test.csv", backend="torch",
                        progress=False)
    with pytest.raises(ConfigError, match="--backend 'tf' is not a backend"):
        entrena.predict(tiny_run, REVIEWS / "data" / "test.csv", backend="tf", progress=False)
    with pytest.raises(DataError, match="is the input file"):
        entrena.predict(tiny_run, REVIEWS / "data" / "test.csv",
                        output=REVIEWS / "data" / "test.csv", progress=False)


def test_export_and_predict_help_do_not_import_torch(tmp_path):
    script = ("import sys\n"
              "from entrena.cli import app\n"
              "for argv in (['export', '--help'], ['predict', '--help']):\n"
              "    try:\n"
              "        app(argv)\n"
              "    except SystemExit as exc:\n"
              "        assert exc.code in (0, None), exc.code\n"
              "heavy = [m for m in ('torch', 'onnx', 'onnxruntime', 'pandas')"
              " if m in sys.modules]\n"
              "assert not heavy, heavy\n")
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    for option in ("--format", "--quantize", "--opset", "--json"):
        assert option in result.stdout
    for option in ("--input", "--output", "--backend", "RUN_OR_BUNDLE"):
        assert option in result.stdout


# --- the real MiniLM (slow) ---------------------------------------------------------------------

@pytest.mark.slow
def test_minilm_exports_with_parity_in_every_format(tmp_path, reviews_data):
    """MiniLM-L6 (the demo's model), briefly fine-tuned on 300 reviews: ONNX fp32 within 1e-4,
    int8 agreeing on >= 99% of 300 test reviews, TorchScript within 1e-4, and predict from the
    ONNX bundle reproducing the PyTorch labels."""
    run = tmp_path / "runs" / "minilm"
    entrena.train(REVIEWS / "config.yaml", run_dir=run, overrides={
        "tracking.enabled": False, "train.max_epochs": 1, "data.max_train_samples": 300,
        "data.max_eval_samples": 100, "model.max_length": 128})
    texts = pd.read_csv(REVIEWS / "data" / "test.csv").iloc[:300]
    texts.to_csv(tmp_path / "parity.csv", index=False)
    results = {}
    for name, options in (("fp32", {}), ("int8", {"quantize": "int8"}),
                          ("torchscript", {"format": "torchscript"})):
        results[name] = entrena.export(run, parity_data=tmp_path / "parity.csv", latency_calls=5,
                                       **options)
        assert results[name].passed, (name, results[name].report["parity"])
    assert results["fp32"].report["parity"]["max_abs_diff"] <= 1e-4
    assert results["int8"].report["parity"]["label_agreement"] >= 0.99
    sizes = {k: r.report["size_bytes"]["model_file"] for k, r in results.items()}
    assert sizes["int8"] < sizes["fp32"] / 3
    torch_out = entrena.predict(run, tmp_path / "parity.csv", output=tmp_path / "t.csv",
                                progress=False)
    onnx_out = entrena.predict(results["fp32"].bundle_dir, tmp_path / "parity.csv",
                               output=tmp_path / "o.csv", progress=False)
    t, o = pd.read_csv(torch_out.output), pd.read_csv(onnx_out.output)
    assert (t["predicted_label"] == o["predicted_label"]).all()
