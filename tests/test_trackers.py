"""Trackers (``tracking.backends``) and extra callbacks (``train.callbacks``) by name: the
training recipe builds what the config names through the registries
(``entrena.tracking.base``, ``entrena.callbacks.registry``); an unknown name is refused first."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import entrena
from conftest import EXAMPLES
from entrena.core.callback import Callback
from entrena.errors import ConfigError
from entrena.tracking import base
from entrena.tracking.base import Tracker, TrackingContext

TINY = EXAMPLES / "tiny" / "config.yaml"
QUICK = ["data.max_train_samples=64", "data.max_eval_samples=32", "train.max_epochs=1",
         "train.num_threads=1"]


class Recorder(Callback):
    """A tracker that keeps what it was given."""

    def __init__(self, context: TrackingContext):
        self.context = context
        self.calls: list[str] = []
        self.params: dict = {}
        self.final: dict = {}
        self.evaluations = 0

    def start(self, params, tags=None):
        self.calls.append("start")
        self.params = params

    def finish(self, metrics, artifacts):
        self.calls.append("finish")
        self.final = metrics
        self.artifacts = artifacts

    def on_eval_end(self, state):
        self.evaluations += 1


def test_a_registered_tracker_gets_the_run_by_name(reviews_data, tmp_path, monkeypatch):
    made: list[Recorder] = []

    def factory(context):
        made.append(Recorder(context))
        return made[-1]

    monkeypatch.setitem(base.TRACKERS, "recorder", factory)
    result = entrena.train(TINY, run_dir=tmp_path / "run",
                           overrides=[*QUICK, "tracking.backends=[recorder]"])
    (tracker,) = made
    assert isinstance(tracker, Tracker)
    assert tracker.calls == ["start", "finish"]
    assert tracker.context.run_name == "tiny" and tracker.context.run_dir == tmp_path / "run"
    assert tracker.params["train"]["max_epochs"] == 1
    assert tracker.evaluations >= 1
    assert tracker.final["test"]["accuracy"] == result.metrics["test"]["accuracy"]
    assert not (tmp_path / "mlflow.db").exists()  # MLflow was not asked for


def test_an_unknown_tracker_is_refused_before_the_data_is_read(tmp_path):
    with pytest.raises(ConfigError) as info:
        entrena.train(TINY, run_dir=tmp_path / "run", overrides=["tracking.backends=[mlfow]"])
    assert str(info.value) == ("--set tracking.backends: unknown tracker 'mlfow'; choose from "
                               "mlflow, tensorboard, wandb; did you mean 'mlflow'?")
    assert not (tmp_path / "run").exists()


def test_an_unknown_tracker_in_a_file_names_its_line_for_every_verb(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("name: x\ndata:\n  train: t.csv\ntracking:\n  backends: [neptune]\n")
    with pytest.raises(ConfigError) as info:
        entrena.load_config(path)
    assert str(info.value) == (f"{path}:5: tracking.backends: unknown tracker 'neptune'; "
                               "choose from mlflow, tensorboard, wandb")


def test_mlflow_is_a_tracker():
    from entrena.tracking.mlflow_tracker import MLflowTracker

    assert isinstance(MLflowTracker("sqlite:///x.db", "e", "r", Path("."), 10), Tracker)


class Counter(Callback):
    """Counts optimizer steps; its state goes into checkpoints."""

    def __init__(self):
        self.steps = 0

    def on_step_end(self, state):
        self.steps += 1

    def state_dict(self):
        return {"steps": self.steps}


def test_a_callback_named_in_the_config_runs_after_the_built_in_ones(reviews_data, tmp_path,
                                                                      monkeypatch):
    from entrena.callbacks import registry

    made: list[Counter] = []
    def factory():
        made.append(Counter())
        return made[-1]

    trackers: list[Recorder] = []
    monkeypatch.setitem(registry.CALLBACKS, "counter", factory)
    monkeypatch.setitem(base.TRACKERS, "recorder", lambda c: trackers.append(Recorder(c)))
    result = entrena.train(TINY, run_dir=tmp_path / "run",
                           overrides=[*QUICK, "tracking.enabled=false",
                                      "tracking.backends=[recorder,tensorboard]",
                                      "train.callbacks=[counter]"])
    (counter,) = made
    assert counter.steps == result.metrics["fit"]["steps"] > 0
    # tracking.enabled: false is the master switch: no tracker named in backends is built
    assert trackers == [] and not (tmp_path / "run" / "tensorboard").exists()


def test_an_unknown_callback_is_refused_before_the_data_is_read(tmp_path, monkeypatch):
    from entrena.callbacks import registry

    monkeypatch.setitem(registry.CALLBACKS, "counter", Counter)
    with pytest.raises(ConfigError) as info:
        entrena.train(TINY, run_dir=tmp_path / "run", overrides=["train.callbacks=[countr]"])
    assert str(info.value) == ("--set train.callbacks: unknown callback 'countr'; choose from "
                               "counter; did you mean 'counter'?")
    assert not (tmp_path / "run").exists()


def test_open_within_bounds_any_trackers_store(monkeypatch):
    # The bound every tracker's store gets (issue 18), not only MLflow's.
    import time

    started = time.perf_counter()
    with pytest.raises(TimeoutError, match=r"no answer in 0\.2 s"):
        base.open_within(lambda: time.sleep(3), timeout_s=0.2)
    assert time.perf_counter() - started < 1.0

    def refused() -> None:
        raise ConnectionRefusedError("store down")

    with pytest.raises(ConnectionRefusedError, match="store down"):
        base.open_within(refused)
    base.open_within(lambda: None)  # opens: no error
    assert base.STORE_PROBE_TIMEOUT_S == 5.0


# --- MLflow in a process of its own ------------------------------------------------------

def test_a_tracked_run_never_imports_mlflow_in_the_training_process(reviews_data, tmp_path):
    # MLflow's import and store took ~2 s of the interpreter's lock from the first steps.
    import json
    import subprocess
    import sys

    from conftest import clean_env

    script = ("import sys, entrena\n"
              f"entrena.train({str(TINY)!r}, run_dir={str(tmp_path / 'run')!r}, "
              f"overrides={[*QUICK, 'tracking.log_model=false']!r})\n"
              "assert 'mlflow' not in sys.modules, 'imported MLflow'\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=clean_env(),
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("entrena").experiment_id])
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert run.info.status == "FINISHED"
    assert run.data.metrics["test.accuracy"] == pytest.approx(metrics["test"]["accuracy"])
    assert run.data.params["data.max_train_samples"] == "64"


def test_the_mlflow_worker_outlives_a_stop_signal_and_exits_with_its_input(tmp_path):
    import os
    import signal

    from entrena.tracking.mlflow_tracker import MLflowWorker

    worker = MLflowWorker(f"sqlite:///{tmp_path / 'mlflow.db'}")
    reply = worker.request({"op": "start", "experiment": "e", "run_name": "r",
                            "artifact_root": str(tmp_path / "art"), "params": {"a": 1}})
    assert reply["ok"] and reply["run_id"]
    os.kill(worker._process.pid, signal.SIGTERM)  # a stop for the run is not for the worker
    os.kill(worker._process.pid, signal.SIGINT)
    assert worker.request({"op": "log", "metrics": [["loss", 0.5, 0, 1]],
                           "status": "KILLED"}) == {"ok": True}
    worker.close()
    assert worker._process.wait(timeout=30) == 0


def test_a_dead_mlflow_worker_is_one_warning_and_training_goes_on(tmp_path, caplog):
    import logging

    from entrena.tracking.mlflow_tracker import MLflowTracker

    tracker = MLflowTracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "e", "r", tmp_path / "art")
    tracker.start({"a": 1})
    tracker._worker._process.kill()
    with caplog.at_level(logging.WARNING):
        tracker._queue({"loss": 1.0}, 1)
        tracker.flush()
        tracker.finish({"test": {"accuracy": 0.5}}, [])
    assert not tracker.enabled
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and warnings[0].startswith(
        "MLflow tracking off: the MLflow worker process failed (exited with code -9")


def test_two_workers_opening_a_new_store_at_once_both_start_runs(tmp_path):
    # Two runs started together once left a new SQLite store half-migrated for good.
    from entrena.tracking.mlflow_tracker import MLflowWorker

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    workers = [MLflowWorker(uri) for _ in range(2)]
    replies = [w.request({"op": "start", "experiment": "e", "run_name": f"r{i}",
                          "artifact_root": str(tmp_path / "art"), "params": {}})
               for i, w in enumerate(workers)]
    for worker in workers:
        worker.close()
    assert all(r["ok"] for r in replies), replies
    assert len({r["run_id"] for r in replies}) == 2


def test_a_store_that_does_not_answer_never_holds_a_checkpoint_long(tmp_path):
    # A server that accepts and never answers: the checkpoint's state_dict (inside a SIGTERM's
    # grace period) once waited 47 s for the run's start.
    import socket
    import time

    from entrena.tracking.mlflow_tracker import STATE_WAIT_S, MLflowTracker

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)  # connections queue; nothing is ever read or answered
        uri = f"http://127.0.0.1:{server.getsockname()[1]}"
        tracker = MLflowTracker(uri, "e", "r", tmp_path / "art")
        tracker.start({"a": 1})
        started = time.perf_counter()
        assert tracker.state_dict() == {"run_id": None}
        tracker._queue({"loss": 1.0}, 10)
        tracker.flush()  # buffered, not waited for
        tracker.close("KILLED")
        assert time.perf_counter() - started < 2 * STATE_WAIT_S + 2.0
        assert tracker._worker is None


def test_the_worker_ignores_modules_in_the_working_directory(tmp_path, monkeypatch):
    from entrena.tracking.mlflow_tracker import MLflowWorker

    (tmp_path / "queue.py").write_text("raise SystemExit('shadowed')\n")
    (tmp_path / "mlflow.py").write_text("# not MLflow\n")
    monkeypatch.chdir(tmp_path)
    worker = MLflowWorker(f"sqlite:///{tmp_path / 'mlflow.db'}")
    reply = worker.request({"op": "start", "experiment": "e", "run_name": "r",
                            "artifact_root": str(tmp_path / "art"), "params": {}})
    worker.close()
    assert reply["ok"], reply


def test_a_fit_that_raises_closes_its_mlflow_run_failed(reviews_data, tmp_path):
    from mlflow.tracking import MlflowClient

    class Boom(Callback):
        def on_batch_end(self, state):
            if state.step == 2:
                raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        entrena.train(TINY, run_dir=tmp_path / "run",
                      overrides=[*QUICK, "tracking.log_model=false"], callbacks=[Boom()])
    from entrena.tracking.mlflow_tracker import store_lock

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with store_lock(uri):  # the worker may still be creating the store's tables
        client = MlflowClient(tracking_uri=uri)
        client.search_experiments()
    # A store slower than the 2 s the run waits (a loaded machine) is closed by the worker
    # after the run has returned: poll for it.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        experiment = client.get_experiment_by_name("entrena")
        runs = client.search_runs([experiment.experiment_id]) if experiment else []
        if runs and runs[0].info.status != "RUNNING":
            break
        time.sleep(0.5)
    (run,) = runs
    assert run.info.status == "FAILED"


def test_a_start_not_yet_answered_is_still_closed_with_its_status(tmp_path, monkeypatch):
    """close() after a start the store has not answered within STATE_WAIT_S: the status
    request is queued behind the start, and the worker ends the run before it exits."""
    from mlflow.tracking import MlflowClient

    from entrena.tracking import mlflow_tracker

    monkeypatch.setattr(mlflow_tracker, "STATE_WAIT_S", 0.0)  # the start is never waited for
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = mlflow_tracker.MLflowTracker(uri=uri, experiment="entrena", run_name="slow",
                                           artifact_root=tmp_path / "artifacts")
    tracker.start({"a": 1})
    worker = tracker._worker
    tracker.close("FAILED")
    assert not tracker._starting
    worker._process.wait(timeout=60)  # it answered the start and the close, then exited
    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("entrena").experiment_id])
    assert run.info.status == "FAILED"


def test_store_helpers():
    from entrena.tracking.mlflow_tracker import _sqlite_path, exception_summary

    assert _sqlite_path("sqlite:////a/b.db?timeout=20") == "/a/b.db"
    assert _sqlite_path("http://host/x") == ""
    try:
        try:
            raise OSError("database is locked")
        except OSError as inner:
            raise ValueError("(raised as a result of Query-invoked autoflush)") from inner
    except ValueError as outer:
        assert exception_summary(outer) == "OSError: database is locked"
