"""The process that talks to MLflow for a training process (:class:`MLflowWorker`).

Importing MLflow and opening its store costs about 2 s of Python on one core (1.2 s of
imports, 0.6 s to open a SQLite store, measured on a 2-core AMD EPYC; ``bench:first-step`` in
docs/benchmarks.md). On a thread of the training process that time held the interpreter's
lock while the first training steps ran and slowed them by 2-3 s. In a process of its own it
runs on a core the training process leaves idle while it imports PyTorch, and the training
process never imports MLflow to track a run.

The protocol is one JSON object per line: requests on the worker's standard input, one reply
per request on its standard output (``{"ok": true, ...}`` or ``{"ok": false, "what": ...,
"error": "Type: message"}``). Requests: ``start`` (experiment, run name, artifact root, a
run id to reopen, params, tags) → ``run_id``; ``log`` (metrics as ``[key, value,
timestamp_ms, step]``, files to upload, a status to close the run with). The worker ignores
SIGINT and SIGTERM (the training process decides what a stop means for its run) and exits
when its standard input closes: when the training process exits, however it exits.

Run as ``python -P -m entrena.tracking.mlflow_worker URI``; the store is opened at once.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import sys
import threading
from typing import Any

__all__ = ["main"]


def _error(what: str, exc: BaseException) -> dict[str, Any]:
    from entrena.tracking.mlflow_tracker import exception_summary

    return {"ok": False, "what": what, "error": exception_summary(exc)}


class _Session:
    """MLflow's client on one tracking URI, and the run it tracks now."""

    def __init__(self, uri: str):
        self.uri = uri
        self.client: Any = None
        self.failure: dict[str, Any] | None = None
        self.run_id: str | None = None

    def open(self) -> None:
        from entrena.tracking.mlflow_tracker import (
            probe_store,
            store_lock,
            use_bounded_http_settings,
        )

        use_bounded_http_settings()
        try:
            from mlflow.tracking import MlflowClient

            for name in ("mlflow", "alembic"):
                logging.getLogger(name).setLevel(logging.WARNING)
        except Exception as exc:  # noqa: BLE001 - reported with the first request
            self.failure = _error("importing MLflow", exc)
            return
        try:
            probe_store(self.uri)
        except Exception as exc:  # noqa: BLE001
            self.failure = _error(f"opening the tracking store {self.uri}", exc)
            return
        try:
            with store_lock(self.uri):  # a new store's tables are created once, not raced
                self.client = MlflowClient(tracking_uri=self.uri)
                self.client.search_experiments(max_results=1)
        except Exception as exc:  # noqa: BLE001
            self.failure = _error("starting the run", exc)

    def start(self, request: dict[str, Any]) -> dict[str, Any]:
        if self.failure is not None:
            return self.failure
        try:
            found = self.client.get_experiment_by_name(request["experiment"])
            if found is None:
                root = request["artifact_root"]
                os.makedirs(root, exist_ok=True)
                from pathlib import Path

                experiment_id = self.client.create_experiment(
                    request["experiment"], artifact_location=Path(root).resolve().as_uri())
            else:
                experiment_id = found.experiment_id
            if request.get("run_id"):  # resumed: continue the same MLflow run
                try:
                    self.client.update_run(request["run_id"], status="RUNNING")
                    self.run_id = request["run_id"]
                    return {"ok": True, "run_id": self.run_id, "reopened": True}
                except Exception:  # noqa: BLE001 - another store: start a new run
                    pass
            run = self.client.create_run(experiment_id, run_name=request["run_name"],
                                         tags=request.get("tags") or {})
            self.run_id = run.info.run_id
            from mlflow.entities import Param

            items = [Param(k, str(v)[:6000]) for k, v in request.get("params", {}).items()]
            for first in range(0, len(items), 100):
                self.client.log_batch(self.run_id, params=items[first:first + 100])
            return {"ok": True, "run_id": self.run_id, "reopened": False}
        except Exception as exc:  # noqa: BLE001
            return _error("starting the run", exc)

    def log(self, request: dict[str, Any]) -> dict[str, Any]:
        if self.failure is not None or self.run_id is None:
            return self.failure or {"ok": False, "what": "logging", "error": "no run started"}
        from mlflow.entities import Metric

        what = "logging metrics"
        try:
            metrics = [Metric(k, v, t, s) for k, v, t, s in request.get("metrics", [])]
            for first in range(0, len(metrics), 1000):
                self.client.log_batch(self.run_id, metrics=metrics[first:first + 1000])
            what = "logging artifacts"
            for path in request.get("artifacts", []):
                if os.path.isfile(path):
                    self.client.log_artifact(self.run_id, path)
                elif os.path.isdir(path):
                    self.client.log_artifacts(self.run_id, path,
                                              artifact_path=os.path.basename(path))
            if request.get("status"):
                what = "closing the run"
                self.client.set_terminated(self.run_id, status=request["status"])
                self.run_id = None
            return {"ok": True}
        except Exception as exc:  # noqa: BLE001
            return _error(what, exc)


def main(argv: list[str] | None = None) -> int:
    """Serve requests for the tracking URI ``argv[0]`` until standard input closes."""
    uri = (argv if argv is not None else sys.argv[1:])[0]
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1, encoding="utf-8")
    sys.stdout = sys.stderr  # whatever MLflow prints stays out of the replies
    requests: queue.Queue[str | None] = queue.Queue()

    def read() -> None:  # read at once: the training process never blocks on a full pipe
        for line in sys.stdin:
            requests.put(line)
        requests.put(None)

    threading.Thread(target=read, name="entrena-mlflow-requests", daemon=True).start()
    session = _Session(uri)
    session.open()
    while (line := requests.get()) is not None:
        request = json.loads(line)
        op = request.get("op")
        reply = (session.start(request) if op == "start" else session.log(request)
                 if op == "log" else {"ok": False, "what": op, "error": "unknown request"})
        try:
            replies.write(json.dumps(reply) + "\n")
        except BrokenPipeError:  # the training process is gone
            return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
