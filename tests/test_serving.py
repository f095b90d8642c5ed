"""A model loaded once, answering DataFrames in memory (issue 45): the predictor behind the
MLflow ``pyfunc`` model. It needs no file after loading, answers as ``entrena predict`` does,
gives the same answers from 8 threads as from one, and its output is strict JSON. A tiny text
run (2-layer BERT of width 32) and a tiny table run, on CPU."""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import entrena
from conftest import build_config, review_rows, run_cli, write_config, write_csv
from entrena.api.predicting import load_predictor
from entrena.errors import ConfigError, DataError


@pytest.fixture(scope="module")
def text_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("serving-text")
    write_csv(folder / "data" / "train.csv", review_rows(96, seed=1))
    write_csv(folder / "data" / "test.csv", review_rows(32, seed=2))
    path = write_config(build_config({"train.max_epochs": 1}), folder / "config.yaml")
    result = run_cli("train", path, cwd=folder, timeout=600)
    assert result.returncode == 0, result.stderr
    return folder / "runs" / "tiny"


@pytest.fixture(scope="module")
def table_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from test_tabular import make_table, table_config

    folder = tmp_path_factory.mktemp("serving-table")
    path = table_config(folder, make_table(240, 1), make_table(60, 2))
    result = run_cli("train", path, cwd=folder, timeout=600)
    assert result.returncode == 0, result.stderr
    return folder / "runs" / "table"


def expected(run: Path, frame: pd.DataFrame, folder: Path) -> pd.DataFrame:
    frame.to_csv(folder / "rows.csv", index=False)
    return pd.read_csv(entrena.predict(run, folder / "rows.csv", progress=False).output)


@pytest.mark.parametrize("kind", ["text", "table"])
def test_the_predictor_needs_no_file_after_loading_and_answers_as_predict(
        kind, text_run, table_run, tmp_path):
    """Loaded once, then the run folder is moved away: every later call still answers (no
    model, tokenizer or preprocessing file is read per call), with ``entrena predict``'s
    labels and probabilities."""
    if kind == "text":
        run, frame = text_run, pd.DataFrame(review_rows(20, seed=5), columns=["text", "label"])
    else:
        from test_tabular import make_table

        run, frame = table_run, make_table(20, 7)
    want = expected(run, frame, tmp_path)
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    predictor = load_predictor(copy)
    shutil.rmtree(copy)
    for _ in range(3):
        answer = predictor.predict(frame)
        assert list(answer.columns) == predictor.columns_added
        assert answer["predicted_label"].tolist() == want["predicted_label"].tolist()
        probs = [c for c in answer.columns if c.startswith("prob_")]
        np.testing.assert_allclose(answer[probs].to_numpy(float), want[probs].to_numpy(float),
                                   rtol=1e-5, atol=1e-6)


def test_eight_threads_give_the_answers_one_thread_gives(text_run):
    predictor = load_predictor(text_run)
    rows = pd.DataFrame(review_rows(64, seed=9), columns=["text", "label"])
    requests = [rows.iloc[i:i + 8 if i % 16 else i + 1] for i in range(0, 64, 4)]
    sequential = [predictor.predict(r) for r in requests]
    with ThreadPoolExecutor(8) as pool:
        concurrent = list(pool.map(predictor.predict, requests))
    for one, many in zip(sequential, concurrent, strict=True):
        pd.testing.assert_frame_equal(one, many)


def test_the_pyfunc_answers_strict_json_with_the_status_saying_why(text_run):
    """An empty or null text in a batch: that row's probabilities are null (not NaN, which
    is not JSON), its status says it was skipped, and the other rows are answered."""
    from entrena.api.mlflow_models import strict_frame

    predictor = load_predictor(text_run)
    frame = pd.DataFrame({"text": ["a great product", None, "", "awful, broke at once"]})
    answer = strict_frame(predictor.predict(frame))
    records = json.loads(json.dumps(answer.to_dict(orient="records"), allow_nan=False))
    assert [r["status"] for r in records] == ["ok", "skipped: empty text",
                                              "skipped: empty text", "ok"]
    assert records[1]["prob_good"] is None and records[1]["predicted_label"] is None
    assert 0.0 <= records[0]["prob_good"] <= 1.0


def test_a_wrong_request_is_one_line_and_the_next_one_is_answered(text_run, table_run):
    text, table = load_predictor(text_run), load_predictor(table_run)
    with pytest.raises(DataError, match=r"the input lacks the text column\(s\) 'text'"):
        text.predict(pd.DataFrame({"review": ["good"]}))
    with pytest.raises(DataError, match=r"lacks the feature column\(s\) 'income'"):
        table.predict(pd.DataFrame({"age": [30.0], "home": ["own"]}))
    assert text.predict(pd.DataFrame({"text": ["good"]}))["status"].tolist() == ["ok"]
    with pytest.raises(ConfigError, match="batch_size=0"):
        load_predictor(text_run, batch_size=0)


# --- entrena serve -------------------------------------------------------------------------

def test_serve_dry_run_writes_the_mlflow_model_and_prints_a_working_command(text_run):
    """`--dry-run`: the MLflow model folder is written under the run, the command is MLflow's
    scoring server with this Python, this interpreter's bin first on PATH (MLflow starts
    `uvicorn` by name), and the curl line carries a real input row."""
    result = run_cli("serve", text_run, "--port", "5077", "--dry-run", "--json",
                     cwd=text_run.parent)
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["engine"] == "mlflow" and plan["url"] == "http://127.0.0.1:5077/invocations"
    assert plan["command"][1:5] == ["-m", "mlflow", "models", "serve"]
    assert plan["env"]["PATH"].split(":")[0] == str(Path(plan["command"][0]).parent)
    assert (text_run / "serving" / "mlflow-model" / "MLmodel").is_file()
    assert '"dataframe_records": [{"text": ' in plan["curl"]


@pytest.mark.parametrize("args, words", [
    (["--port", "0"], "--port 0: give a port from 1 to 65535"),
    (["--workers", "0"], "--workers 0: give at least 1"),
    (["--max-rows", "0"], "--max-rows 0: give at least 1"),
])
def test_serve_refuses_bad_options_in_one_line(text_run, args, words):
    result = run_cli("serve", text_run, *args, "--dry-run", cwd=text_run.parent)
    assert result.returncode == 2 and result.stderr.strip() == f"error: {words}"


def test_serve_names_a_missing_source(tmp_path):
    result = run_cli("serve", tmp_path / "nothing", "--dry-run", cwd=tmp_path)
    assert result.returncode == 2 and "no such run or bundle" in result.stderr


def _post(url: str, body: bytes) -> tuple[int, dict]:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.mark.slow
def test_serve_answers_and_each_bad_request_is_a_400_that_leaves_it_up(text_run, tmp_path):
    """`entrena serve RUN` started as a user would: a good request, then each bad one (a
    missing column, an empty body, a non-JSON body, a list where a text belongs, more rows
    than --max-rows) is a 400 and the next good one a 200; answers are strict JSON."""
    import os
    import signal
    import socket
    import subprocess
    import time
    import urllib.request

    from conftest import clean_env, entrena_command

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = (tmp_path / "serve.log").open("w")
    server = subprocess.Popen([*entrena_command(), "serve", str(text_run), "--port", str(port),
                               "--max-rows", "5"], env=clean_env(), stdout=log,
                              stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/invocations"
    good = json.dumps({"dataframe_records": [{"text": "a great product"}, {"text": None}]})
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=2):
                    break
            except OSError:
                assert server.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
                assert time.monotonic() < deadline, "entrena serve did not start"
                time.sleep(0.5)
        bad = [json.dumps({"dataframe_records": [{"review": "good"}]}), "", "not json",
               json.dumps({"dataframe_records": [{"text": ["a", "b"]}]}),
               json.dumps({"dataframe_records": [{"text": "x"}] * 6})]
        for body in [good, *bad]:
            code, answer = _post(url, body.encode())
            if body is good:
                assert code == 200, answer
                rows = answer["predictions"]
                assert [r["status"] for r in rows] == ["ok", "skipped: empty text"]
                assert rows[1]["prob_good"] is None
            else:
                assert code == 400, (body[:80], answer)
                assert _post(url, good.encode())[0] == 200  # still up
        assert "more than the 5 one request may hold" in _post(url, bad[-1].encode())[1][
            "message"]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
        log.close()
    assert server.returncode == 0, (tmp_path / "serve.log").read_text()[-3000:]
