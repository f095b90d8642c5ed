"""``entrena serve``: start the existing server that fits a model, with what it needs.

- A classifier or regressor (a finished run, or an ONNX/TorchScript export bundle of one):
  MLflow's scoring server (``mlflow models serve``) on an MLflow ``pyfunc`` model folder
  written from the run under ``<source>/serving/mlflow-model`` (rewritten each time, so it is
  never stale). The model is loaded once per worker (:mod:`entrena.api.mlflow_models`); a
  request answers ``POST /invocations`` with ``{"dataframe_records": [...]}`` or
  ``{"dataframe_split": ...}``.
- A chat model's GGUF bundle (``entrena export RUN --format gguf``; a run that has one is
  served through it): llama.cpp's OpenAI-compatible server (``python -m llama_cpp.server``,
  ``llama-cpp-python[server]``), which applies the chat template stored in the GGUF file
  (``POST /v1/chat/completions``).
- A chat model's run without a GGUF bundle (or with ``--engine mlflow``), or its ``hf``
  bundle: MLflow's scoring server on an MLflow chat model (PyTorch;
  :class:`~entrena.api.mlflow_models.EntrenaChatModel`), ``POST /invocations`` with
  ``{"messages": [...], "max_tokens": N}`` (OpenAI's chat completion schema).

The server is started with the Python that runs entrena and that interpreter's ``bin`` first
on ``PATH``: MLflow starts ``uvicorn`` by name, and called as ``.venv/bin/mlflow`` without an
activated virtual environment it died with exit 127.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from entrena.errors import ConfigError, DataError, ResourceError

__all__ = ["ENGINES", "ServePlan", "serve", "serve_plan"]

log = logging.getLogger("entrena")

SERVING_FOLDER = "serving"
"""Under the run (or bundle): what ``entrena serve`` writes (the MLflow model folder)."""


@dataclass
class ServePlan:
    """The server ``entrena serve`` starts.

    Attributes:
        engine: ``mlflow`` or ``llama.cpp``.
        command: The server's command line (argv).
        env: Environment variables set on top of the current ones.
        url: Where requests go.
        curl: A ``curl`` command line that gets an answer once the server is up.
        model: The model folder or file served.
    """

    engine: str
    command: list[str]
    env: dict[str, str] = field(default_factory=dict)
    url: str = ""
    curl: str = ""
    model: str = ""

    def as_dict(self) -> dict[str, Any]:
        """The plan as plain JSON values (``entrena serve --dry-run --json``)."""
        return {"engine": self.engine, "command": self.command, "env": self.env,
                "url": self.url, "curl": self.curl, "model": self.model}


def _environment(extra: dict[str, str]) -> dict[str, str]:
    """``PATH`` with this interpreter's ``bin`` first, plus ``extra``."""
    bin_dir = str(Path(sys.executable).parent)
    return {"PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")]), **extra}


def _gguf_file(source: Path) -> Path | None:
    """The GGUF file to serve for ``source`` (a GGUF bundle, or a run with one), else None."""
    from entrena.exporting.bundle import find_run_bundle, is_bundle, read_manifest

    bundle = source if is_bundle(source) else find_run_bundle(source, "gguf")
    if bundle is None:
        return None
    manifest = read_manifest(bundle)
    if manifest.get("format") != "gguf":
        return None
    return bundle / str(manifest.get("file", "model.gguf"))


def _llama_plan(source: Path, model: Path, host: str, port: int,
                threads: int | None) -> ServePlan:
    import importlib.util

    if importlib.util.find_spec("llama_cpp") is None:
        from entrena.exporting.llama_runtime import INSTALL_HINT

        raise ResourceError(f"{source}: serving a GGUF model needs llama-cpp-python, which is "
                            f"not installed here; install it: {INSTALL_HINT} (make "
                            "install-llm does)")
    missing = [name for name in ("sse_starlette", "starlette_context", "pydantic_settings",
                                 "uvicorn", "fastapi")
               if importlib.util.find_spec(name) is None]
    if missing:
        raise ResourceError(f"{source}: llama.cpp's server needs {', '.join(missing)}, not "
                            "installed here; install them: pip install 'llama-cpp-python"
                            "[server]' (or make install-llm)")
    # llama-cpp-python's server interrupts a streamed answer when another request arrives
    # (interrupt_requests defaults to true): 3 of 4 concurrent clients got an empty answer
    # with HTTP 200 (benchmarks/serving.py --chat). Requests queue instead.
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host", host,
               "--port", str(port), "--interrupt_requests", "False"]
    from entrena.hardware.threads import choose_threads

    choice = choose_threads(threads)  # llama-cpp-python's server default: every core
    log.info("llama.cpp server: %s", choice.describe())
    command += ["--n_threads", str(choice.threads), "--n_threads_batch", str(choice.threads)]
    url = f"http://{host}:{port}/v1/chat/completions"
    body = json.dumps({"messages": [{"role": "user", "content": "Hello!"}],
                       "temperature": 0, "max_tokens": 64})
    curl = f"curl -s {url} -H 'Content-Type: application/json' -d '{body}'"
    return ServePlan("llama.cpp", command, _environment({}), url, curl, str(model))


def _example_record(source: Path) -> dict[str, Any]:
    """One input row for the ``curl`` line: the first row of the run's data without the
    label (an empty record when there is none)."""
    from entrena.api.mlflow_models import _example

    config = source / "config.yaml"
    if not config.is_file():
        return {}
    example = _example(source)
    if example is None or not len(example):
        return {}
    return json.loads(example.head(1).to_json(orient="records"))[0]


def _mlflow_plan(source: Path, host: str, port: int, workers: int,
                 max_rows: int | None, write: bool) -> ServePlan:
    from entrena.exporting.prediction import model_meta_file, model_task_name
    from entrena.tasks.registry import recorded_task

    task = recorded_task(model_task_name(source), model_meta_file(source))
    chat = getattr(task, "mlflow_model", True) == "chat"
    if not chat and getattr(task, "frame_predictor", None) is None:
        raise DataError(f"{source}: a {task.name} model cannot be served by MLflow's server; "
                        f"export it (entrena export {source} --format gguf) and serve that "
                        "bundle")
    folder = source / SERVING_FOLDER / "mlflow-model"
    if write:
        from entrena.api.mlflow_models import save_model

        work = folder.with_name(".mlflow-model.tmp")
        shutil.rmtree(work, ignore_errors=True)
        work.parent.mkdir(parents=True, exist_ok=True)
        save_model(source, work)
        shutil.rmtree(folder, ignore_errors=True)
        work.rename(folder)
    command = [sys.executable, "-m", "mlflow", "models", "serve", "-m", str(folder),
               "--env-manager", "local", "-h", host, "-p", str(port), "-w", str(workers)]
    extra = {"MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}
    if max_rows is not None:
        from entrena.api.mlflow_models import MAX_ROWS_VARIABLE

        extra[MAX_ROWS_VARIABLE] = str(max_rows)
    url = f"http://{host}:{port}/invocations"
    body = json.dumps({"messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 64}
                      if chat else {"dataframe_records": [_example_record(source)]})
    curl = (f"curl -s {url} -H 'Content-Type: application/json' -d "
            f"'{body.replace(chr(39), chr(39) + chr(92) + chr(39) + chr(39))}'")
    return ServePlan("mlflow", command, _environment(extra), url, curl, str(folder))


ENGINES = ("auto", "mlflow", "llama.cpp")
"""``entrena serve --engine``: ``auto`` is llama.cpp for a GGUF bundle (or a run that has
one), MLflow for the rest."""


def serve_plan(source: str | Path, *, host: str = "127.0.0.1", port: int = 5000,
               workers: int = 1, threads: int | None = None, max_rows: int | None = None,
               write: bool = True, engine: str = "auto") -> ServePlan:
    """The server that fits ``source`` and how to start it (nothing started).

    Args:
        source: A finished run directory or an export bundle.
        host, port: Where the server listens (``127.0.0.1``: this machine only; ``0.0.0.0``
            to accept other machines).
        workers: Server worker processes (MLflow), each with its own copy of the model.
        threads: CPU threads of llama.cpp (GGUF); default the free cores, measured
            (:func:`~entrena.hardware.threads.choose_threads`).
        max_rows: Rows one request may hold (MLflow; default 10,000).
        write: Write the MLflow model folder (``False``: only say what would run).
        engine: One of :data:`ENGINES`: ``mlflow`` serves an LLM run through MLflow's chat
            model (PyTorch) even when it has a GGUF bundle.

    Raises:
        ConfigError: A port outside 1–65535, workers or max_rows below 1, an unknown engine.
        DataError: No finished run or bundle at ``source``, or ``llama.cpp`` asked for a
            model without a GGUF file.
        ResourceError: The GGUF server's packages are not installed.
    """
    if not 1 <= port <= 65535:
        raise ConfigError(f"--port {port}: give a port from 1 to 65535")
    if workers < 1:
        raise ConfigError(f"--workers {workers}: give at least 1")
    if max_rows is not None and max_rows < 1:
        raise ConfigError(f"--max-rows {max_rows}: give at least 1")
    source = Path(source)
    if not source.exists():
        raise DataError(f"{source}: no such run or bundle; give a finished run directory "
                        "(runs/<name>) or an export bundle")
    if engine not in ENGINES:
        raise ConfigError(f"--engine {engine!r}: give one of {', '.join(ENGINES)}")
    gguf = _gguf_file(source) if engine != "mlflow" else None
    if gguf is not None:
        return _llama_plan(source, gguf, host, port, threads)
    if engine == "llama.cpp":
        raise DataError(f"{source}: no GGUF model to serve with llama.cpp; export one (entrena "
                        f"export {source} --format gguf) or leave --engine at auto")
    return _mlflow_plan(source, host, port, workers, max_rows, write)


def serve(source: str | Path, *, host: str = "127.0.0.1", port: int = 5000, workers: int = 1,
          threads: int | None = None, max_rows: int | None = None, engine: str = "auto",
          announce: Any = None) -> int:
    """Start the server for ``source`` (:func:`serve_plan`) and wait for it.

    Args:
        announce: ``ServePlan -> None``, called before the server starts (the CLI prints the
            URL and the ``curl`` line).

    Returns:
        The server's exit code (a stop signal ends it: 0 after SIGINT/SIGTERM).
    """
    import signal
    import subprocess

    plan = serve_plan(source, host=host, port=port, workers=workers, threads=threads,
                      max_rows=max_rows, engine=engine)
    if announce is not None:
        announce(plan)
    process = subprocess.Popen(plan.command, env={**os.environ, **plan.env},
                               start_new_session=True)

    def forward(signum: int, _frame: Any) -> None:
        try:
            os.killpg(process.pid, signum)
        except ProcessLookupError:
            pass

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = process.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 0 if code in (-signal.SIGINT, -signal.SIGTERM) else code
