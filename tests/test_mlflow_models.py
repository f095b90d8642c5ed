"""MLflow Models (issue 23): a trained run is logged as a ``pyfunc`` model in its MLflow run
and registered under the run's name; the model answers as ``entrena predict`` does, in
process and through ``mlflow models serve`` on a loopback port."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import entrena
from conftest import EXAMPLES, ROOT, clean_env

TINY = EXAMPLES / "tiny" / "config.yaml"
SERVED_ROWS = 120


@pytest.fixture
def registered(tracked_run):
    """The shared tracked tiny run (conftest), trained with ``tracking.log_model: true``:
    (run dir, tracking URI)."""
    return tracked_run.run_dir, tracked_run.uri


def test_train_registers_the_model_in_its_mlflow_run(registered):
    from mlflow.tracking import MlflowClient

    run_dir, uri = registered
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    (version,) = client.search_model_versions("name = 'tiny'")
    assert int(version.version) == 1
    tracked = client.get_run(version.run_id)  # the run the tracker opened for this training
    assert tracked.data.tags["entrena.run_dir"] == str(run_dir)
    assert "test.accuracy" in tracked.data.metrics


def test_the_model_answers_as_entrena_predict_with_or_without_the_label(registered, tmp_path):
    import mlflow

    run_dir, uri = registered
    rows = pd.read_csv(EXAMPLES / "reviews" / "data" / "test.csv").head(20)
    rows.to_csv(tmp_path / "rows.csv", index=False)
    expected = pd.read_csv(entrena.predict(run_dir, tmp_path / "rows.csv", progress=False).output)
    mlflow.set_tracking_uri(uri)
    try:
        model = mlflow.pyfunc.load_model("models:/tiny/1")
    finally:
        mlflow.set_tracking_uri(None)
    inputs = model.metadata.get_input_schema().input_names()
    outputs = model.metadata.get_output_schema().input_names()
    assert inputs == ["review"]  # the label column (score) is not an input
    assert outputs == ["predicted_label", "prob_great", "prob_other", "status"]
    for frame in (rows, rows.drop(columns=["score"])):
        answer = model.predict(frame)
        assert answer["predicted_label"].tolist() == expected["predicted_label"].tolist()
        np.testing.assert_allclose(answer[["prob_great", "prob_other"]].to_numpy(),
                                   expected[["prob_great", "prob_other"]].to_numpy(), rtol=1e-6)


def test_a_wrong_input_gets_entrenas_message(registered):
    from mlflow.exceptions import MlflowException

    from entrena.api.mlflow_models import predict_frame

    run_dir, _ = registered
    with pytest.raises(MlflowException, match="lacks the text column\\(s\\) 'review'") as info:
        predict_frame(run_dir, pd.DataFrame({"text": ["good"]}))
    assert info.value.error_code == "INVALID_PARAMETER_VALUE"


def test_a_registry_failure_warns_once_and_fails_nothing(registered, caplog, monkeypatch):
    # train calls register_model after status.json says finished; a failure must only warn
    import yaml

    from entrena.api import mlflow_models

    def down(*args, **kwargs):
        raise ConnectionError("registry down\nmore detail")

    monkeypatch.setattr(mlflow_models, "log_model", down)
    run_dir, _ = registered
    tracking = yaml.safe_load((run_dir / "config.yaml").read_text())["tracking"]
    assert mlflow_models.register_model(run_dir, run_dir, tracking) is None
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warned == ["MLflow model not logged (ConnectionError: registry down); the run itself "
                      "is complete"]
    assert mlflow_models.register_model(  # not asked for: nothing is tried
        run_dir, run_dir, {**tracking, "log_model": False}) is None
    assert sum(r.levelname == "WARNING" for r in caplog.records) == 1


@pytest.mark.slow
def test_export_registers_the_bundle_as_the_next_version(registered, tmp_path):
    import mlflow

    run_dir, uri = registered
    bundle = entrena.export(run_dir, output=tmp_path / "onnx", latency_calls=1)
    rows = pd.read_csv(EXAMPLES / "reviews" / "data" / "test.csv").head(10)
    mlflow.set_tracking_uri(uri)
    try:
        model = mlflow.pyfunc.load_model("models:/tiny/2")
        files = Path(mlflow.artifacts.download_artifacts("models:/tiny/2", dst_path=tmp_path))
    finally:
        mlflow.set_tracking_uri(None)
    assert (files / "artifacts" / "entrena" / "export.json").is_file()  # the bundle, not model/
    rows.to_csv(tmp_path / "rows.csv", index=False)
    expected = pd.read_csv(entrena.predict(bundle.bundle_dir, tmp_path / "rows.csv",
                                           progress=False).output)
    answer = model.predict(rows[["review"]])
    assert answer["predicted_label"].tolist() == expected["predicted_label"].tolist()
    np.testing.assert_allclose(answer["prob_great"], expected["prob_great"], rtol=1e-6)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.slow
def test_mlflow_models_serve_answers_like_entrena_predict(registered, tmp_path):
    run_dir, uri = registered
    rows = pd.read_csv(EXAMPLES / "reviews" / "data" / "test.csv").head(SERVED_ROWS)
    rows.to_csv(tmp_path / "rows.csv", index=False)
    expected = pd.read_csv(entrena.predict(run_dir, tmp_path / "rows.csv", progress=False).output)
    port = _free_port()
    # MLflow runs `uvicorn` from PATH: the environment's own scripts come first
    env = clean_env(MLFLOW_TRACKING_URI=uri, PYTHONPATH=str(ROOT / "src"),
                    PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    mlflow_cli = [sys.executable, "-m", "mlflow", "models", "serve", "-m", "models:/tiny/1",
                  "--env-manager", "local", "--host", "127.0.0.1", "--port", str(port)]
    log = (tmp_path / "serve.log").open("w")
    server = subprocess.Popen(mlflow_cli, env=env, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=2):
                    break
            except OSError:
                assert server.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
                assert time.monotonic() < deadline, "mlflow models serve did not start"
                time.sleep(0.5)
        body = json.dumps({"dataframe_split": rows[["review"]].to_dict(orient="split")})
        request = urllib.request.Request(f"http://127.0.0.1:{port}/invocations",
                                         data=body.encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as response:
            answer = pd.DataFrame(json.loads(response.read())["predictions"])
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)
        log.close()
    assert len(answer) == SERVED_ROWS
    assert answer["predicted_label"].tolist() == expected["predicted_label"].tolist()
    np.testing.assert_allclose(answer[["prob_great", "prob_other"]].to_numpy(),
                               expected[["prob_great", "prob_other"]].to_numpy(), rtol=1e-6)


def test_the_input_example_is_typed_as_a_client_reads_the_table():
    # entrena's readers give text; the signature must take what pandas.read_csv gives
    from entrena.api.mlflow_models import typed

    frame = pd.DataFrame({"age": ["31", "45"], "income": ["1200.5", ""], "debt": ["0", "7"],
                          "home": ["rent", "owner"], "zip": ["01234", "n/a"]})
    out = typed(frame)
    assert out.dtypes[["age", "income", "debt"]].astype(str).tolist() == [
        "int64", "float64", "int64"]
    assert all(pd.api.types.is_string_dtype(out[c]) for c in ("home", "zip"))
    assert out["zip"].tolist() == ["01234", "n/a"]  # not a number: kept as written
    assert out["income"].isna().tolist() == [False, True]
    assert out["age"].tolist() == [31, 45]


def test_no_model_is_logged_without_the_runs_mlflow_run(registered, caplog, monkeypatch):
    # MLflow tracking failed during training (one warning then): no second warning, no model
    import yaml

    from entrena.api import mlflow_models

    run_dir, _ = registered
    monkeypatch.setattr(mlflow_models, "log_model", lambda *a, **k: pytest.fail("logged"))
    tracking = yaml.safe_load((run_dir / "config.yaml").read_text())["tracking"]
    # the same store, where no run of this run directory exists in that experiment
    assert mlflow_models.register_model(run_dir, run_dir,
                                        {**tracking, "experiment": "never-tracked"}) is None
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def test_the_chat_model_does_not_warn_the_user_of_mlflows_chatmodel_deprecation():
    # MLflow 3 warns at every ChatModel created (each chat export, each served model's
    # load): a warning addressed to whoever subclassed it, not to entrena's user.
    import warnings

    from entrena.api.mlflow_models import EntrenaChatModel

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        EntrenaChatModel()
    with pytest.warns(FutureWarning, match="ChatModel"):  # the silencing is that narrow
        from mlflow.pyfunc.model import ChatModel

        type("Other", (ChatModel,), {"predict": lambda self, *a: None})()
