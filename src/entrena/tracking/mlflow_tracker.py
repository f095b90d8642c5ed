"""MLflow tracking. Every failure warns once and switches tracking off; training goes on."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

from entrena.core.callback import Callback
from entrena.core.state import TrainState
from entrena.tracking.base import STORE_PROBE_TIMEOUT_S, open_within
from entrena.tracking.scalars import StepScalars, flatten

__all__ = ["MLflowTracker", "HTTP_SETTINGS", "STORE_PROBE_TIMEOUT_S", "default_tracking_uri",
           "flatten", "probe_store"]

log = logging.getLogger("entrena")


HTTP_SETTINGS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "15",
}
"""MLflow's HTTP retry settings for a tracking server, unless the environment sets them. With
MLflow's defaults (7 retries, backoff factor 2, 120 s timeout) a server that is down held the
start of training for 255 s before tracking was turned off; with these, about 3 s."""


def _open_store(uri: str) -> None:
    """Open the store behind ``uri`` once, without MLflow (raises what opening raises)."""
    from urllib.parse import urlparse

    scheme = urlparse(uri).scheme.lower()
    if scheme in ("http", "https", "databricks") or not scheme or len(scheme) == 1:
        return  # HTTP is bounded by HTTP_SETTINGS; a plain path (or C:) is a file store
    if scheme == "file":
        return
    if scheme == "sqlite":
        import sqlite3

        path = uri[len("sqlite:///"):] if uri.startswith("sqlite:///") else ""
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            with sqlite3.connect(path, timeout=STORE_PROBE_TIMEOUT_S) as connection:
                connection.execute("PRAGMA schema_version").fetchone()
            connection.close()
        return
    import sqlalchemy  # postgresql://, mysql:// …: MLflow's database stores

    engine = sqlalchemy.create_engine(uri, connect_args={
        "connect_timeout": int(STORE_PROBE_TIMEOUT_S)} if "mssql" not in scheme else {})
    try:
        with engine.connect():
            pass
    finally:
        engine.dispose()


def probe_store(uri: str, timeout_s: float = STORE_PROBE_TIMEOUT_S) -> None:
    """Check, within ``timeout_s`` seconds, that the tracking store behind ``uri`` opens
    (:func:`~entrena.tracking.base.open_within`). A database store that cannot be opened
    (``sqlite:////proc/x.db``) otherwise went through MLflow's own retry loop: 104 s and 36
    warnings before training started.

    Raises:
        TimeoutError: It did not answer in time.
        Exception: What opening it raised (``sqlite3.OperationalError`` …).
    """
    open_within(lambda: _open_store(uri), timeout_s)


def default_tracking_uri(runs_root: Path, configured: str | None) -> str:
    """``MLFLOW_TRACKING_URI`` if set, else ``tracking.uri``, else ``sqlite:///<runs>/mlflow.db``."""
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        return env
    if configured:
        return configured
    return f"sqlite:///{(runs_root / 'mlflow.db').resolve()}"


class MLflowTracker(Callback):
    """Logs params, step and validation metrics, final metrics and run files to MLflow.

    Step metrics are buffered and sent in batches at each evaluation, so tracking adds no
    per-step latency. The run is created on a background thread (:meth:`start` returns at
    once: importing MLflow and opening its store took 3-8 s before the first training step);
    every later call waits for it first.

    Args:
        uri: Tracking URI.
        experiment: Experiment name.
        run_name: MLflow run name (the entrena run name).
        artifact_root: Where a new experiment stores artifacts (file store under ``runs/``).
        every_steps: Interval of step metrics.
    """

    def __init__(self, uri: str, experiment: str, run_name: str, artifact_root: Path,
                 every_steps: int = 10):
        self.uri = uri
        self.experiment = experiment
        self.run_name = run_name
        self.artifact_root = artifact_root
        self.every_steps = every_steps
        self.scalars = StepScalars(every_steps)
        self.enabled = True
        self.run_id: str | None = None
        self._client: Any = None
        self._buffer: list[Any] = []
        self._starting: threading.Thread | None = None

    def ready(self) -> None:
        """Wait for the background start (:meth:`start`) to finish."""
        if self._starting is not None:
            self._starting.join()
            self._starting = None

    def _fail(self, what: str, exc: BaseException) -> None:
        if self.enabled:
            log.warning("MLflow tracking off: %s failed (%s: %s); training goes on",
                        what, type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
        self.enabled = False

    def start(self, params: dict[str, Any], tags: dict[str, str] | None = None) -> None:
        """Create the MLflow run and log the flattened config as params, on a background
        thread; after a resume (``run_id`` restored by :meth:`load_state_dict`), reopen the
        same run instead."""
        if not self.enabled:
            return
        self._starting = threading.Thread(target=self._start, args=(params, tags),
                                          name="entrena-mlflow-start", daemon=True)
        self._starting.start()

    def _start(self, params: dict[str, Any], tags: dict[str, str] | None) -> None:
        try:
            os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
            for name, value in HTTP_SETTINGS.items():  # the user's own settings win
                os.environ.setdefault(name, value)
            from mlflow.tracking import MlflowClient

            for name in ("mlflow", "alembic"):
                logging.getLogger(name).setLevel(logging.WARNING)
            try:
                probe_store(self.uri)
            except Exception as exc:  # noqa: BLE001
                self._fail(f"opening the tracking store {self.uri}", exc)
                return

            self._client = MlflowClient(tracking_uri=self.uri)
            found = self._client.get_experiment_by_name(self.experiment)
            if found is None:
                self.artifact_root.mkdir(parents=True, exist_ok=True)
                experiment_id = self._client.create_experiment(
                    self.experiment, artifact_location=self.artifact_root.resolve().as_uri())
            else:
                experiment_id = found.experiment_id
            if self.run_id is not None:  # resumed: continue the same MLflow run
                try:
                    self._client.update_run(self.run_id, status="RUNNING")
                    return
                except Exception:  # noqa: BLE001 - another store: start a new run
                    log.info("MLflow run %s not found in %s; starting a new one",
                             self.run_id, self.uri)
            run = self._client.create_run(experiment_id, run_name=self.run_name, tags=tags or {})
            self.run_id = run.info.run_id
            from mlflow.entities import Param

            items = [Param(k, str(v)[:6000]) for k, v in flatten(params).items()]
            for start in range(0, len(items), 100):
                self._client.log_batch(self.run_id, params=items[start:start + 100])
        except Exception as exc:  # noqa: BLE001 - tracking must never stop training
            self._fail("starting the run", exc)

    def _queue(self, metrics: dict[str, Any], step: int) -> None:
        self.ready()
        if not self.enabled or self.run_id is None:
            return
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        for key, value in metrics.items():
            if isinstance(value, int | float) and not isinstance(value, bool) and value == value:
                self._buffer.append(Metric(key, float(value), now, step))

    def flush(self) -> None:
        self.ready()
        if not self.enabled or not self._buffer or self.run_id is None:
            self._buffer.clear()
            return
        try:
            for start in range(0, len(self._buffer), 1000):
                self._client.log_batch(self.run_id, metrics=self._buffer[start:start + 1000])
        except Exception as exc:  # noqa: BLE001
            self._fail("logging metrics", exc)
        self._buffer.clear()

    def on_batch_end(self, state: TrainState) -> None:
        found = self.scalars.at_batch_end(state)  # loss, learning rate, efficiency window
        if found:
            self._queue(found, state.step)

    def on_eval_end(self, state: TrainState) -> None:
        self._queue({f"validation.{k}": v for k, v in state.eval_metrics.items()}, state.step)
        self.flush()

    def on_fit_end(self, state: TrainState) -> None:
        self.ready()
        self.flush()
        if state.interrupted and self.enabled and self.run_id is not None:
            try:
                self._client.set_terminated(self.run_id, status="KILLED")
            except Exception as exc:  # noqa: BLE001
                self._fail("closing the interrupted run", exc)

    def state_dict(self) -> dict[str, Any]:
        self.ready()
        return {"run_id": self.run_id}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.run_id = state.get("run_id") or self.run_id

    def finish(self, metrics: dict[str, Any], artifacts: list[Path],
               status: str = "FINISHED") -> None:
        """Log final metrics and files, and close the run."""
        self.ready()
        if not self.enabled or self.run_id is None:
            return
        self._queue(flatten(metrics), step=int(metrics.get("fit", {}).get("steps", 0) or 0))
        self.flush()
        try:
            for path in artifacts:
                if path.is_file():
                    self._client.log_artifact(self.run_id, str(path))
                elif path.is_dir():
                    self._client.log_artifacts(self.run_id, str(path), artifact_path=path.name)
            self._client.set_terminated(self.run_id, status=status)
        except Exception as exc:  # noqa: BLE001
            self._fail("logging artifacts", exc)
