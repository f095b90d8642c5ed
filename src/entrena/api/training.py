"""``entrena.train``: prepare (cached) + fit + test + track, in one run directory."""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from entrena.config import Config, LoadedConfig, load_config
from entrena.config.models import resolve_model_name
from entrena.core.rundir import RunPaths
from entrena.data.tables import LabelledSplits, load_splits
from entrena.errors import ConfigError, EntrenaError

__all__ = ["TrainResult", "train", "resolve_run_dir"]

log = logging.getLogger("entrena")


@dataclass
class TrainResult:
    """What a training run produced.

    Attributes:
        run_dir: The run directory.
        metrics: The content of ``metrics.json`` (``test.accuracy``, ``validation.loss`` …).
        already_finished: The run was finished before this call, nothing was trained.
    """

    run_dir: Path
    metrics: dict[str, Any] = field(default_factory=dict)
    already_finished: bool = False

    @property
    def model_dir(self) -> Path:
        return self.run_dir / "model"


def resolve_run_dir(config: Config, run_dir: str | Path | None) -> Path:
    """``run_dir`` if given, else ``runs/<name>`` under the working directory."""
    return Path(run_dir) if run_dir is not None else Path("runs") / config.name


def _write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _status(paths: RunPaths) -> str | None:
    try:
        return json.loads(paths.status.read_text())["status"]
    except (OSError, ValueError, KeyError):
        return None


def _check_model_source(loaded: LoadedConfig) -> dict[str, str]:
    """Resolve model and tokenizer names before any data is read (alias errors first)."""
    model = loaded.config.model
    sources: dict[str, str] = {}
    if model.architecture is None:
        sources["weights"] = resolve_model_name(model.name or "", loaded.base_dir, "model.name")
        sources["tokenizer"] = (resolve_model_name(model.tokenizer, loaded.base_dir,
                                                   "model.tokenizer")
                                if model.tokenizer else sources["weights"])
    else:
        tokenizer = model.tokenizer or model.name
        if not tokenizer:
            raise ConfigError("model.tokenizer: a model built from model.architecture needs a "
                              "tokenizer; set model.tokenizer: minilm-l6")
        sources["tokenizer"] = resolve_model_name(tokenizer, loaded.base_dir,
                                                  "model.tokenizer" if model.tokenizer
                                                  else "model.name")
    return sources


def _load_data(loaded: LoadedConfig) -> LabelledSplits:
    data = loaded.config.data
    return load_splits(
        train=loaded.resolve_path(data.train),
        validation=loaded.resolve_path(data.validation) if data.validation else None,
        test=loaded.resolve_path(data.test) if data.test else None,
        text_column=data.text_column, label_column=data.label_column,
        validation_fraction=data.validation_fraction, max_train_samples=data.max_train_samples,
        max_eval_samples=data.max_eval_samples, on_bad_rows=data.on_bad_rows,
        seed=loaded.config.train.seed)


def _attach_log_file(path: Path) -> logging.Handler:
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setLevel(logging.DEBUG)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("entrena")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    return handler


def train(config: str | Path | dict[str, Any] | Config, *, run_dir: str | Path | None = None,
          overrides: list[str] | dict[str, Any] | None = None, restart: bool = False,
          console: Any = None) -> TrainResult:
    """Train a model as the config says and write the run directory.

    Args:
        config: A YAML file, a dict, or a :class:`~entrena.config.Config`.
        run_dir: Where the run is written; default ``runs/<name>``.
        overrides: ``--set`` style overrides (``["train.max_epochs=2"]`` or a dict).
        restart: Delete an existing run directory and start over.
        console: A ``rich.console.Console`` for progress (default: one on stderr).

    Returns:
        The run's :class:`TrainResult`. A run that was already finished is not retrained:
        its metrics are returned with ``already_finished=True``.

    Raises:
        ConfigError: The config is invalid or names an unknown model (before data is read).
        DataError: A data file is missing, unreadable or inconsistent with the config.
        ResourceError: The requested device is missing.
    """
    loaded = load_config(config, overrides)
    sources = _check_model_source(loaded)
    paths = RunPaths(resolve_run_dir(loaded.config, run_dir))

    if paths.root.exists() and restart:
        shutil.rmtree(paths.root)
    if _status(paths) == "finished":
        metrics = json.loads(paths.metrics.read_text()) if paths.metrics.is_file() else {}
        return TrainResult(paths.root, metrics, already_finished=True)
    if paths.root.exists() and any(paths.root.iterdir()):
        log.warning("run directory %s holds an unfinished run; starting it over "
                    "(resume comes with checkpoint resume support)", paths.root)
        shutil.rmtree(paths.root)

    splits = _load_data(loaded)  # data errors come before anything is written

    from entrena.api.fitting import run_fit  # heavy imports (torch) only past validation

    paths.root.mkdir(parents=True, exist_ok=True)
    handler = _attach_log_file(paths.log)
    try:
        resolved = loaded.config.model_dump(mode="json")
        paths.config.write_text(yaml.safe_dump(resolved, sort_keys=False), encoding="utf-8")
        _write_json_atomic(paths.data_report, splits.report)
        _write_json_atomic(paths.status, {"status": "running", "started": time.time()})
        metrics = run_fit(loaded, paths, sources, splits, console=console)
        _write_json_atomic(paths.status, {"status": "finished", "finished": time.time()})
        return TrainResult(paths.root, metrics)
    except EntrenaError:
        shutil.rmtree(paths.root, ignore_errors=True)  # bad input: leave nothing half-written
        raise
    except BaseException as exc:
        _write_json_atomic(paths.status, {"status": "failed", "error": type(exc).__name__})
        log.debug("run failed", exc_info=True)
        exc.entrena_log = str(paths.log)  # type: ignore[attr-defined]  # the CLI names it
        raise
    finally:
        logging.getLogger("entrena").removeHandler(handler)
        handler.close()
