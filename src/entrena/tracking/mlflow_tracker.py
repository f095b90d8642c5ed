"""MLflow tracking. Every failure warns once and switches tracking off; training goes on."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from entrena.core.callback import Callback
from entrena.core.state import TrainState
from entrena.tracking.scalars import StepScalars, flatten
from entrena.tracking.store import STORE_PROBE_TIMEOUT_S, open_within

__all__ = ["MLflowTracker", "MLflowWorker", "HTTP_SETTINGS", "STATE_WAIT_S",
           "STORE_PROBE_TIMEOUT_S", "default_tracking_uri", "exception_summary", "flatten",
           "open_client", "prestart", "probe_store", "store_lock", "use_bounded_http_settings"]

log = logging.getLogger("entrena")


HTTP_SETTINGS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "15",
}
"""MLflow's HTTP retry settings for a tracking server, unless the environment sets them. With
MLflow's defaults (7 retries, backoff factor 2, 120 s timeout) a server that is down held the
start of training for 255 s before tracking was turned off; with these, about 3 s."""


def use_bounded_http_settings() -> None:
    """Set :data:`HTTP_SETTINGS` (and MLflow's log level, WARNING) in this process's
    environment where the user has not: call it before any MLflow client of a process talks
    to a tracking server (the worker; registering a model; ``tune``'s parent run)."""
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    for name, value in HTTP_SETTINGS.items():  # the user's own settings win
        os.environ.setdefault(name, value)


def open_client(uri: str) -> Any:
    """An MLflow client on ``uri`` for use in this process (registering a model, ``tune``'s
    parent run): :func:`use_bounded_http_settings`, then :func:`probe_store` (5 s at most),
    then ``MlflowClient``. Raises what the probe raises."""
    use_bounded_http_settings()
    probe_store(uri)
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def _sqlite_path(uri: str) -> str:
    """The file of a ``sqlite:///PATH[?query]`` URI ("" for any other URI)."""
    if not uri.lower().startswith("sqlite:///"):
        return ""
    return uri[len("sqlite:///"):].split("?", 1)[0]


def store_lock(uri: str) -> Any:
    """A context manager that holds an exclusive lock beside a SQLite store
    (``<file>.lock``, ``fcntl.flock``) while a client creates or migrates its tables: two
    runs that opened a new store at once left it half-migrated and unusable (MLflow's
    table creation is not serialised). A no-op for other stores and without ``fcntl``."""
    import contextlib

    path = _sqlite_path(uri)
    try:
        import fcntl
    except ImportError:  # Windows
        return contextlib.nullcontext()
    if not path or path == ":memory:":
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def held() -> Any:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with open(f"{path}.lock", "a+b") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    return held()


def exception_summary(exc: BaseException) -> str:
    """``Type: first line`` of the innermost exception ``exc`` was raised from (MLflow wraps
    ``database is locked`` in an ``MlflowException`` whose first line says nothing)."""
    inner = exc
    seen = {id(exc)}
    while (nxt := inner.__cause__ or inner.__context__) is not None and id(nxt) not in seen:
        seen.add(id(nxt))
        inner = nxt
    text = str(inner).strip()
    return f"{type(inner).__name__}: {text.splitlines()[0] if text else ''}"


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

        path = _sqlite_path(uri)
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
    (:func:`~entrena.tracking.store.open_within`). A database store that cannot be opened
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


class MLflowWorker:
    """A process running :mod:`entrena.tracking.mlflow_worker` for one tracking URI: it
    imports MLflow and opens the store as soon as it is spawned, then serves requests.

    Args:
        uri: Tracking URI.

    Raises:
        OSError: The process could not be started.
    """

    def __init__(self, uri: str):
        import subprocess
        import sys
        import tempfile

        self.uri = uri
        self._stderr = tempfile.TemporaryFile()  # its last line explains an early exit
        import sysconfig

        env = dict(os.environ)
        package_root = str(Path(__file__).resolve().parents[2])  # the folder holding entrena/
        installed = {os.path.realpath(sysconfig.get_paths()[key])
                     for key in ("purelib", "platlib")}
        if os.path.realpath(package_root) not in installed:  # a source tree: make it findable
            env["PYTHONPATH"] = os.pathsep.join(  # (site-packages itself would go before
                [package_root, *filter(None, [env.get("PYTHONPATH")])])  # the stdlib: no)
        self._process = subprocess.Popen(
            # -P: the working directory is not on sys.path (a ./mlflow.py or ./queue.py
            # there shadowed the real modules)
            [sys.executable, "-P", "-m", "entrena.tracking.mlflow_worker", uri],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, env=env,
            text=True, encoding="utf-8", bufsize=1,
            start_new_session=True)  # a terminal's Ctrl-C is for the training process

    def send(self, request: dict[str, Any]) -> None:
        """Write one request (the worker reads at once: this does not wait for it)."""
        import json

        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps(request) + "\n")
        self._process.stdin.flush()

    def reply(self) -> dict[str, Any]:
        """Wait for the reply to the oldest unanswered request. A worker that exited
        answers ``{"ok": false, ...}`` with the last line it wrote to its standard error."""
        import json

        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if line:
            return json.loads(line)
        code = self._process.wait()
        self._stderr.seek(0)
        lines = self._stderr.read().decode("utf-8", "replace").strip().splitlines()
        return {"ok": False, "what": "the MLflow worker process",
                "error": f"exited with code {code}" + (f": {lines[-1]}" if lines else "")}

    def answered_within(self, timeout_s: float) -> bool:
        """Whether a reply can be read within ``timeout_s`` seconds (``select`` on the pipe;
        where that is not available, as on Windows, waits for it)."""
        import select

        assert self._process.stdout is not None
        try:
            ready, _, _ = select.select([self._process.stdout], [], [], timeout_s)
        except (OSError, ValueError):  # pipes are not selectable here: wait
            return True
        return bool(ready)

    def request(self, request: dict[str, Any]) -> dict[str, Any]:
        """:meth:`send`, then :meth:`reply`; a broken pipe is a failed reply."""
        try:
            self.send(request)
        except (BrokenPipeError, OSError, ValueError):
            pass  # the reply says why
        return self.reply()

    def close(self) -> None:
        """Close its standard input: it exits once it has answered what it was sent."""
        try:
            if self._process.stdin is not None:
                self._process.stdin.close()
        except OSError:
            pass


_spare: list[MLflowWorker] = []
"""At most one started, idle worker: :func:`prestart`'s, or a finished run's, for the next
run of this process on the same URI (``entrena tune``'s trials, the Python API)."""


def prestart(uri: str) -> None:
    """Start a worker for ``uri`` now, so that MLflow is imported and the store opened while
    this process loads data and models; the run's :class:`MLflowTracker` takes it over."""
    if not any(worker.uri == uri for worker in _spare):
        _keep(MLflowWorker(uri))


def _keep(worker: MLflowWorker) -> None:
    for old in _spare:
        old.close()
    _spare[:] = [worker]


def _take(uri: str) -> MLflowWorker:
    for worker in _spare:
        if worker.uri == uri:
            _spare.remove(worker)
            return worker
    return MLflowWorker(uri)


STATE_WAIT_S = 2.0
"""Seconds a checkpoint waits for the MLflow run's start (:meth:`MLflowTracker.state_dict`)."""


class MLflowTracker(Callback):
    """Logs params, step and validation metrics, final metrics and run files to MLflow.

    MLflow runs in a process of its own (:class:`MLflowWorker`, :func:`prestart`): this
    process never imports it. Step metrics are buffered and sent in batches at each
    evaluation, so tracking adds no per-step latency; :meth:`start` returns at once and every
    later call that needs the run waits for it first.

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
        self._worker: MLflowWorker | None = None
        self._buffer: list[list[Any]] = []
        self._starting = False
        self._open_run = False  # a run this tracker started (or reopened) and has not closed

    def ready(self, timeout_s: float | None = None) -> bool:
        """Wait for the run that :meth:`start` asked for, at most ``timeout_s`` seconds
        (``None``: as long as it takes). Returns whether the start has been answered."""
        if not self._starting:
            return True
        assert self._worker is not None
        if timeout_s is not None and not self._worker.answered_within(timeout_s):
            return False
        self._starting = False
        asked = self.run_id
        reply = self._worker.reply()
        if not reply.get("ok"):
            self._fail_with(reply)
            return
        self.run_id = reply["run_id"]
        self._open_run = True
        if asked is not None and not reply.get("reopened"):
            log.info("MLflow run %s not found in %s; starting a new one", asked, self.uri)
        return True

    def _fail(self, what: str, exc: BaseException) -> None:
        self._fail_with({"what": what, "error": exception_summary(exc)})

    def _fail_with(self, reply: dict[str, Any]) -> None:
        if self.enabled:
            log.warning("MLflow tracking off: %s failed (%s); training goes on",
                        reply.get("what", "tracking"), reply.get("error", ""))
        self.enabled = False
        self._starting = self._open_run = False
        if self._worker is not None:
            self._worker.close()
            self._worker = None

    def start(self, params: dict[str, Any], tags: dict[str, str] | None = None) -> None:
        """Create the MLflow run and log the flattened config as params, in the worker
        process; after a resume (``run_id`` restored by :meth:`load_state_dict`), reopen the
        same run instead."""
        if not self.enabled:
            return
        try:
            self._worker = _take(self.uri)
            self._worker.send({"op": "start", "experiment": self.experiment,
                               "run_name": self.run_name,
                               "artifact_root": str(self.artifact_root), "run_id": self.run_id,
                               "params": {k: v if isinstance(v, int | float | bool | None)
                                          else str(v) for k, v in flatten(params).items()},
                               "tags": tags or {}})
            self._starting = True
        except (OSError, ValueError) as exc:  # the worker is gone: its reply says why
            reply = self._worker.reply() if self._worker is not None else {}
            if reply.get("error"):
                self._fail_with(reply)
            else:
                self._fail("starting the run", exc)

    def _queue(self, metrics: dict[str, Any], step: int) -> None:
        if not self.enabled:
            return
        import time

        now = int(time.time() * 1000)
        for key, value in metrics.items():
            if isinstance(value, int | float) and not isinstance(value, bool) and value == value:
                self._buffer.append([key, float(value), now, step])

    def _log_request(self, artifacts: list[str] | None, status: str | None) -> dict[str, Any]:
        """The worker's ``log`` request: the buffered metrics, files, a closing status."""
        return {"op": "log", "metrics": self._buffer, "artifacts": artifacts or [],
                "status": status}

    def _log(self, artifacts: list[str] | None = None, status: str | None = None) -> bool:
        self.ready()
        if not self.enabled or self.run_id is None or self._worker is None:
            self._buffer.clear()
            return False
        reply = self._worker.request(self._log_request(artifacts, status))
        self._buffer.clear()
        if not reply.get("ok"):
            self._fail_with(reply)
            return False
        if status:
            self._open_run = False
        return True

    def flush(self) -> None:
        """Send the buffered metrics, if the run has started: a store that is slow to answer
        the start keeps them buffered (the fit does not wait for it; :meth:`finish` does)."""
        if self.ready(timeout_s=0.0) and self._buffer:
            self._log()

    def on_batch_end(self, state: TrainState) -> None:
        found = self.scalars.at_batch_end(state)  # loss, learning rate, efficiency window
        if found:
            self._queue(found, state.step)

    def on_eval_end(self, state: TrainState) -> None:
        self._queue({f"validation.{k}": v for k, v in state.eval_metrics.items()}, state.step)
        self.flush()

    def on_fit_end(self, state: TrainState) -> None:
        if not state.interrupted:
            self.flush()
        elif self.ready(timeout_s=STATE_WAIT_S):  # a stop does not wait for a slow store
            self._log(status="KILLED")

    def state_dict(self) -> dict[str, Any]:
        """The run id, for a resume to continue the same run. A checkpoint waits at most
        :data:`STATE_WAIT_S` for a store still answering the start (a SIGTERM's grace
        period is short): without the id, a resume starts a new MLflow run."""
        self.ready(timeout_s=STATE_WAIT_S)
        return {"run_id": self.run_id}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.run_id = state.get("run_id") or self.run_id

    def close(self, status: str = "FAILED") -> None:
        """After a run that ended early (:meth:`finish` never came: an error, ``FAILED``, or
        a stop signal, ``KILLED``): close a run still open with ``status`` (not waiting more
        than :data:`STATE_WAIT_S` for a slow store) and let the worker exit. A start not yet
        answered by then still gets its status: the request is queued behind it, and the
        worker, which answers requests in order, closes the run before it exits."""
        if (self._open_run or self._starting) and self.ready(timeout_s=STATE_WAIT_S):
            self._log(status=status)
        elif self._starting and self.enabled and self._worker is not None:
            try:  # not waited for: the worker starts the run, then ends it with ``status``
                self._worker.send(self._log_request(None, status))
            except (OSError, ValueError):
                pass  # the worker is gone; nothing more to close
            self._buffer.clear()
            self._starting = False
        if self._worker is not None:
            self._worker.close()
            self._worker = None

    def finish(self, metrics: dict[str, Any], artifacts: list[Path],
               status: str = "FINISHED") -> None:
        """Log final metrics and files, and close the run; the worker is kept for a next run
        of this process."""
        self._queue(flatten(metrics), step=int(metrics.get("fit", {}).get("steps", 0) or 0))
        if self._log([str(path) for path in artifacts], status=status):
            assert self._worker is not None
            _keep(self._worker)
            self._worker = None
