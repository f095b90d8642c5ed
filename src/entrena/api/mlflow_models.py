"""MLflow Models: a run's model (or an export bundle) as an MLflow ``pyfunc`` model, logged
with its signature and an input example and registered in the model registry.

The ``pyfunc`` model is :class:`EntrenaModel`; its ``predict`` takes a DataFrame of the input
columns (the label column may be absent) and returns one row per input with the columns
``entrena predict`` adds (``predicted_label``, ``prob_<label>``…, or ``predicted_value`` for
a regressor; and ``status``). It loads the model once (``load_context``:
:func:`entrena.api.predicting.load_predictor`) and answers each frame in memory with the task
code ``entrena predict`` runs, so preprocessing, postprocessing and the checks are entrena's
own, for every task, with no file read or written per request. An image model takes a
column of image paths, absolute ones (on the machine that serves it).
``mlflow models serve -m models:/<name>/<version>`` and ``mlflow models build-docker`` then
serve it (docs/how-to/serving-mlflow.md).

The model carries entrena's code (``code_paths``) and pins its dependencies
(``pip_requirements``) so that a Docker image built from it needs nothing else. MLflow is
imported at the top of this module, which only MLflow's callers import (never
``import entrena``).
"""

from __future__ import annotations

import importlib.metadata
import logging
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import mlflow.pyfunc
import pandas as pd
from mlflow.pyfunc.model import ChatModel, PythonModel  # where they are defined (typed)

from entrena.core.rundir import RunPaths
from entrena.errors import ConfigError
from entrena.exporting.bundle import is_bundle, read_manifest
from entrena.tasks.registry import get_task

__all__ = ["EXAMPLE_ROWS", "MODEL_ARTIFACT", "EntrenaChatModel", "EntrenaModel", "log_model",
           "pip_requirements", "model_kind", "predict_frame", "save_model", "strict_frame",
           "MAX_REQUEST_ROWS", "MAX_ROWS_VARIABLE", "max_request_rows"]

log = logging.getLogger("entrena")

EXAMPLE_ROWS = 5
"""Rows of the run's data logged as the model's input example."""
TYPED_ROWS = 1000
"""Rows read to decide which input columns are numbers (the signature's types)."""
MODEL_ARTIFACT = "entrena"
"""The artifact key (and folder) under which the run's model or the bundle travels."""
MODEL_SCRIPT = """\
import mlflow.models

from entrena.api.mlflow_models import EntrenaModel

mlflow.models.set_model(EntrenaModel())
"""
"""The model's code as MLflow's "models from code" logs it (no pickled object)."""
_RUN_FILES = ("config.yaml", "status.json", "metrics.json", "data_report.json")
"""The files of a run directory the model needs besides ``model/`` (``locate_run`` reads
them)."""


class EntrenaModel(PythonModel):
    """The ``pyfunc`` model: the run's model or bundle (the artifact :data:`MODEL_ARTIFACT`)
    loaded once in :meth:`load_context` (:func:`entrena.api.predicting.load_predictor`),
    answering each DataFrame in memory."""

    def load_context(self, context: Any) -> None:
        """Load the model, tokenizer or preprocessing once (MLflow calls this once per
        server worker)."""
        from entrena.api.predicting import load_predictor

        self.source = context.artifacts[MODEL_ARTIFACT]
        self.predictor = load_predictor(self.source)

    def predict(self, context: Any, model_input: pd.DataFrame,
                params: dict[str, Any] | None = None) -> pd.DataFrame:
        """One row per row of ``model_input``: the columns ``entrena predict`` adds
        (:func:`strict_frame`: a skipped row's numbers are null, never NaN).

        Raises:
            mlflow.exceptions.MlflowException: ``INVALID_PARAMETER_VALUE`` with entrena's
                one-line message when the input is wrong (a missing column …): the scoring
                server answers 400 and stays up.
        """
        from entrena.errors import EntrenaError

        predictor = getattr(self, "predictor", None)
        if predictor is None:
            self.load_context(context)
            predictor = self.predictor
        try:
            frame = pd.DataFrame(model_input)
            limit = max_request_rows()
            if len(frame) > limit:
                from entrena.errors import DataError

                raise DataError(f"the request holds {len(frame)} rows, more than the "
                                f"{limit} one request may hold ({MAX_ROWS_VARIABLE}); send "
                                "them in several requests")
            return strict_frame(predictor.predict(frame))
        except EntrenaError as exc:
            from mlflow.exceptions import INVALID_PARAMETER_VALUE, MlflowException

            raise MlflowException(str(exc), error_code=INVALID_PARAMETER_VALUE) from exc


CHAT_MODEL_SCRIPT = """\
import mlflow.models

from entrena.api.mlflow_models import EntrenaChatModel

mlflow.models.set_model(EntrenaChatModel())
"""
"""The chat model's code as MLflow's "models from code" logs it."""
CHAT_EXAMPLE_TOKENS = 8
"""``max_tokens`` of the chat model's input example, which MLflow answers once when it saves
the model (a check that it runs; a short answer keeps that check to a second or two)."""


class EntrenaChatModel(ChatModel):
    """The chat model of a chat task's run (or its ``hf`` bundle): MLflow's chat
    conventions (OpenAI's chat completion schema): ``{"messages": [{"role", "content"}…],
    "max_tokens": N}`` in, a ``ChatCompletionResponse`` out, with the run's chat template,
    system prompt and end-of-turn token as in training and ``entrena chat``
    (the task's ``chat_session``). Decoding is greedy (the answer
    ``entrena chat`` gives): ``temperature``, ``top_p`` and ``top_k`` do not change it. The
    model is loaded once (:meth:`load_context`); one answer is generated at a time per worker
    (a lock: MLflow's server runs a worker's requests on threads)."""

    def __init__(self) -> None:
        # MLflow 3 deprecates ChatModel for ResponsesAgent (an agent's interface, not a chat
        # model's) and warns whenever one is created: at every chat export and every served
        # model's load, addressed to a user who never wrote one. Silenced for that one.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"``mlflow\.pyfunc\.model\.ChatModel``",
                                    category=FutureWarning)
            super().__init__()

    def load_context(self, context: Any) -> None:
        """Load the model and tokenizer once (MLflow calls this once per server worker)."""
        import threading

        from entrena.api.chatting import open_session

        self.source = context.artifacts[MODEL_ARTIFACT]
        self.session, _ = open_session(self.source)
        self.lock = threading.Lock()
        self.name = _run_name(RunPaths(Path(self.source)))  # the run's name: the "model"

    # ChatModel.predict's own signature differs from PythonModel.predict's (MLflow's
    # typing); this one is ChatModel's.
    def predict(self, context: Any, messages: list[Any],  # type: ignore[override]
                params: Any) -> Any:
        """The greedy answer to ``messages`` (``params.max_tokens`` caps its length; ``n``
        must be 1).

        Raises:
            mlflow.exceptions.MlflowException: ``INVALID_PARAMETER_VALUE`` with entrena's
                one-line message for a bad request (an unknown role, no user turn, ``n`` > 1,
                ``max_tokens`` < 1): the server answers 400 and stays up.
        """
        from mlflow.exceptions import INVALID_PARAMETER_VALUE, MlflowException
        from mlflow.types.llm import (
            ChatChoice,
            ChatCompletionResponse,
            ChatMessage,
            TokenUsageStats,
        )

        from entrena.errors import EntrenaError

        if getattr(self, "session", None) is None:
            self.load_context(context)
        try:
            limit = getattr(params, "max_tokens", None)
            if limit is not None and int(limit) < 1:
                raise ConfigError(f"max_tokens {limit}: give at least 1")
            if (getattr(params, "n", 1) or 1) != 1:
                raise ConfigError(f"n {params.n}: entrena answers one greedy completion per "
                                  "request; give n 1")
            with self.lock:
                answer = self.session.answer(messages, max_new_tokens=limit)
        except EntrenaError as exc:
            raise MlflowException(str(exc), error_code=INVALID_PARAMETER_VALUE) from exc
        return ChatCompletionResponse(
            choices=[ChatChoice(index=0, finish_reason=answer.finish_reason,
                                message=ChatMessage(role="assistant", content=answer.text))],
            usage=TokenUsageStats(prompt_tokens=answer.prompt_tokens,
                                  completion_tokens=answer.completion_tokens,
                                  total_tokens=answer.prompt_tokens + answer.completion_tokens),
            model=self.name)


MAX_ROWS_VARIABLE = "ENTRENA_SERVE_MAX_ROWS"
"""The environment variable that bounds the rows of one request (``entrena serve
--max-rows``); default :data:`MAX_REQUEST_ROWS`."""
MAX_REQUEST_ROWS = 10_000
"""Rows one request may hold by default: a larger one is refused (HTTP 400) before any model
call, so one client cannot hold a worker for minutes or its memory for the whole answer."""


def max_request_rows() -> int:
    """The rows one request may hold: ``$ENTRENA_SERVE_MAX_ROWS`` (a positive integer), else
    :data:`MAX_REQUEST_ROWS`."""
    import os

    value = os.environ.get(MAX_ROWS_VARIABLE, "")
    return int(value) if value.isdigit() and int(value) > 0 else MAX_REQUEST_ROWS


def strict_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with every missing cell (NaN, ``pd.NA``) or infinite number as ``None``
    (object columns where there are any): MLflow's scoring server writes NaN as the bare
    token ``NaN``, which is not JSON (a JavaScript client's ``JSON.parse`` throws and loses
    the whole batch); ``null`` is, and the row's ``status`` says why it has no
    prediction."""
    import numpy as np

    out = frame.copy()
    for column in out.columns:
        values = out[column]
        bad = values.isna().to_numpy().copy()
        if values.dtype.kind == "f":
            bad |= np.isinf(values.to_numpy())
        if bad.any():  # a string column's missing cells are NaN too (pandas' str dtype)
            out[column] = values.astype(object).where(~bad, None)
    return out


def predict_frame(source: str | Path, frame: Any) -> Any:
    """The columns ``entrena predict`` adds for each row of ``frame`` (a DataFrame of N rows),
    loading the model for this call: a one-off; a server keeps
    :func:`entrena.api.predicting.load_predictor`'s predictor instead.

    Raises:
        mlflow.exceptions.MlflowException: ``INVALID_PARAMETER_VALUE`` with entrena's message
            when the input is wrong (a missing text column …).
    """
    from entrena.api.predicting import load_predictor
    from entrena.errors import EntrenaError

    try:
        return strict_frame(load_predictor(source).predict(pd.DataFrame(frame)))
    except EntrenaError as exc:
        from mlflow.exceptions import INVALID_PARAMETER_VALUE, MlflowException

        raise MlflowException(str(exc), error_code=INVALID_PARAMETER_VALUE) from exc


def pip_requirements() -> list[str]:
    """entrena's runtime dependencies (no extras), pinned to the installed versions, with
    MLflow's own ``mlflow==<installed>`` (what a Docker image of the model installs)."""
    import re

    found: list[str] = []
    for requirement in importlib.metadata.requires("entrena") or []:
        if "extra ==" in requirement:
            continue
        name = re.split(r"[<>=!~; \[]", requirement, maxsplit=1)[0]
        try:
            found.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            found.append(requirement.split(";")[0].strip())
    return found


def _example(run_dir: Path) -> Any:
    """The first :data:`EXAMPLE_ROWS` rows of the run's test file (else validation, else
    training), without the label column: the input example (``None`` when none is found)."""
    import yaml

    from entrena.data.streaming import iter_table

    config = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8")) or {}
    data = config.get("data", {})
    for role in ("test", "validation", "train"):
        path = data.get(role)
        if path and Path(path).is_file():
            chunk = next(iter(iter_table(Path(path), chunk_rows=TYPED_ROWS, role=role)))
            frame = chunk.frame.drop(columns=[c for c in [data.get("label_column", "label")]
                                              if c in chunk.frame.columns])
            return typed(frame).head(EXAMPLE_ROWS).reset_index(drop=True)
    return None


def typed(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` typed as ``pandas.read_csv`` would type the file, which is what a client
    reading the same data sends: a column whose present values all parse as numbers becomes
    ``int64`` (the signature's ``long``) when they are all whole and none is missing, else
    ``float64`` (``double``); the others stay text. (entrena's readers give every column as
    text; a table's numeric columns are the ones whose values are all numbers, the tabular
    task's own rule, so the model reads both alike.)"""
    out = frame.copy()
    for name in out.columns:
        values = out[name]
        blank = values.isna() | values.astype(str).str.strip().eq("")
        numbers = pd.to_numeric(values.where(~blank), errors="coerce")
        if blank.all() or numbers[~blank].isna().any():
            continue  # text (or nothing to tell)
        whole = not blank.any() and bool((numbers == numbers.round()).all())
        out[name] = numbers.astype("int64") if whole else numbers.astype("float64")
    return out


def _stage(source: Path, folder: Path) -> tuple[Path, Path]:
    """Copy what the model needs into ``folder``: the bundle as it is, or of a run its
    ``model/`` and the files :data:`_RUN_FILES`; and entrena's code (no caches).
    Returns (the model source, the code folder)."""
    staged = folder / MODEL_ARTIFACT
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    if is_bundle(source):
        shutil.copytree(source, staged, ignore=ignore)
    else:
        paths = RunPaths(source)
        shutil.copytree(paths.model, staged / "model", ignore=ignore)
        for name in _RUN_FILES:
            if (source / name).is_file():
                shutil.copy2(source / name, staged / name)
    code = folder / "code" / "entrena"
    shutil.copytree(Path(__file__).resolve().parents[1], code, ignore=ignore)  # the package
    return staged, code


def model_kind(source: str | Path) -> str | bool:
    """How the model of ``source`` (a run or bundle) is an MLflow model: its task's
    ``mlflow_model`` attribute (``True``: a ``pyfunc`` model taking DataFrames,
    :class:`EntrenaModel`; ``"chat"``: a chat model, :class:`EntrenaChatModel`; ``False``:
    none)."""
    from entrena.exporting.prediction import model_meta_file, model_task_name
    from entrena.tasks.registry import recorded_task

    task = recorded_task(model_task_name(source), model_meta_file(source))
    return getattr(task, "mlflow_model", True)


def _pyfunc_parts(source: Path, folder: Path, example: Any = None) -> dict[str, Any]:
    """What ``mlflow.pyfunc.log_model`` / ``save_model`` take for ``source``, staged in
    ``folder``: the model's code (:data:`MODEL_SCRIPT`, or :data:`CHAT_MODEL_SCRIPT` for a chat
    model), the artifact, entrena's code, the signature (inferred from the input example and
    the model's answer to it: the example is predicted once, a check that the model runs; a
    chat model's is MLflow's chat signature), the example and the pinned requirements."""
    from mlflow.models import infer_signature

    staged, code = _stage(source, folder)
    if model_kind(staged) == "chat":
        script = folder / "entrena_chat_model.py"
        script.write_text(CHAT_MODEL_SCRIPT, encoding="utf-8")
        chat_example = {"messages": [{"role": "user", "content": "Hello!"}],
                        "max_tokens": CHAT_EXAMPLE_TOKENS, "temperature": 0.0, "n": 1,
                        "stream": False}
        requirements = pip_requirements()
        if is_bundle(staged) and read_manifest(staged).get("format") == "gguf":
            try:  # a GGUF bundle answers through llama.cpp
                requirements.append("llama-cpp-python=="
                                    + importlib.metadata.version("llama-cpp-python"))
            except importlib.metadata.PackageNotFoundError:
                pass
        return dict(python_model=str(script), artifacts={MODEL_ARTIFACT: str(staged)},
                    code_paths=[str(code)], input_example=chat_example,
                    pip_requirements=requirements)
    if example is None and (staged / "config.yaml").is_file():
        example = _example(staged)
    signature = (infer_signature(example, predict_frame(staged, example))
                 if example is not None else None)
    script = folder / "entrena_pyfunc.py"  # models from code: nothing pickled
    script.write_text(MODEL_SCRIPT, encoding="utf-8")
    return dict(python_model=str(script), artifacts={MODEL_ARTIFACT: str(staged)},
                code_paths=[str(code)], signature=signature, input_example=example,
                pip_requirements=pip_requirements())


def save_model(source: str | Path, path: str | Path) -> Path:
    """``source`` (a finished run or an export bundle) as an MLflow ``pyfunc`` model folder
    at ``path`` (which must not exist), without a tracking store or registry: what
    ``mlflow models serve -m PATH`` serves (``entrena serve``).

    Raises:
        Exception: What MLflow raises.
    """
    import os

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    path = Path(path)
    with tempfile.TemporaryDirectory(prefix="entrena-mlflow-model-") as folder:
        mlflow.pyfunc.save_model(path=str(path), **_pyfunc_parts(Path(source), Path(folder)))
    return path


def log_model(source: str | Path, *, tracking_uri: str, registered_name: str,
              run_id: str | None = None, example: Any = None) -> dict[str, Any]:
    """Log ``source`` as an MLflow ``pyfunc`` model and register it.

    The signature is inferred from the input example and what the model answers for it (so
    the example is predicted once, a check that the logged model runs).

    Args:
        source: A finished run directory or an export bundle.
        tracking_uri: The tracking store; the registry is the same store (the embedded SQLite
            one by default).
        registered_name: The registered model's name (the run's name); each call adds a
            version.
        run_id: The MLflow run the model belongs to (``None``: a model without a run).
        example: The input example (a DataFrame); default the first rows of the run's data
            (a bundle has no data: no example nor signature then).

    Returns:
        ``model_uri`` (``models:/<name>/<version>``), ``name``, ``version``, ``logged_uri``
        (``models:/<model id>``), ``run_id``.

    Raises:
        Exception: What MLflow raises (the callers warn and go on).
    """
    import os

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

    source = Path(source)
    with tempfile.TemporaryDirectory(prefix="entrena-mlflow-model-") as folder:
        kwargs: dict[str, Any] = dict(name="model", **_pyfunc_parts(source, Path(folder),
                                                                    example),
                                      registered_model_name=registered_name,
                                      await_registration_for=30)
        previous = mlflow.get_tracking_uri() if mlflow.is_tracking_uri_set() else None
        environment = os.environ.get("MLFLOW_TRACKING_URI")
        mlflow.set_tracking_uri(tracking_uri)
        try:
            if run_id is not None:
                with mlflow.start_run(run_id=run_id):
                    info = mlflow.pyfunc.log_model(**kwargs)
            else:
                info = mlflow.pyfunc.log_model(**kwargs)
        finally:  # the process's MLflow settings as they were
            # None unsets the URI (MLflow's code does so; its annotation omits None)
            mlflow.set_tracking_uri(previous)  # type: ignore[arg-type]
            if environment is not None:
                os.environ["MLFLOW_TRACKING_URI"] = environment
    version = info.registered_model_version
    return {"model_uri": f"models:/{registered_name}/{version}", "name": registered_name,
            "version": version, "logged_uri": info.model_uri, "run_id": run_id}


def _mlflow_run_id(client: Any, experiment: str, run_dir: Path) -> str | None:
    """The newest MLflow run tagged with ``run_dir`` (the tag the MLflow tracker sets)."""
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return None
    quoted = str(run_dir).replace("'", "\\'")
    runs = client.search_runs([found.experiment_id],
                              filter_string=f"tags.`entrena.run_dir` = '{quoted}'",
                              order_by=["attributes.start_time DESC"], max_results=1)
    return runs[0].info.run_id if runs else None


def register_model(source: str | Path, run_dir: str | Path, tracking: dict[str, Any],
                   *, after_tracking: bool = False) -> dict[str, Any] | None:
    """After ``train`` or ``export``: log ``source`` as a ``pyfunc`` model in the MLflow run
    of ``run_dir`` and register it under the run's name, when the run's tracking asks for it
    (``tracking.enabled``, ``mlflow`` in ``tracking.backends``, ``tracking.log_model``) and
    that run exists (none when MLflow tracking was turned off by a failure: nothing is
    logged, no second warning). A failure warns once and returns ``None``: it never fails the
    verb.

    Args:
        source: The run directory or an export bundle of it.
        run_dir: The run directory (its name is the registered name; the MLflow run is the
            one tagged with it).
        tracking: The run's resolved ``tracking`` section (``config.yaml``).
        after_tracking: Called by ``train`` right after its tracker: a store that cannot be
            opened is then logged at INFO (the tracker has warned about it already).

    Returns:
        :func:`log_model`'s answer, or ``None`` when not asked for or on failure.
    """
    from entrena.tracking.base import wants_mlflow_model

    if not wants_mlflow_model(tracking):
        return None
    from entrena.tracking.mlflow_tracker import (
        default_tracking_uri,
        exception_summary,
        probe_store,
        use_bounded_http_settings,
    )

    use_bounded_http_settings()  # a server that is down costs seconds, not MLflow's 255 s
    run_dir = Path(run_dir).resolve()
    paths = RunPaths(run_dir)
    name = _run_name(paths)
    task = _run_config(paths).get("task")
    if not getattr(get_task(task), "mlflow_model", True):
        log.info("MLflow model: not logged for a %s model (not supported yet)", task)
        return None
    uri = default_tracking_uri(paths.runs_root, tracking.get("uri"))
    try:
        probe_store(uri)
    except Exception as exc:  # noqa: BLE001 - tracking never fails the verb
        log.log(logging.INFO if after_tracking else logging.WARNING,
                "MLflow model not logged (opening the tracking store %s failed: %s); the run "
                "itself is complete", uri, exception_summary(exc))
        return None
    try:
        from mlflow.tracking import MlflowClient

        run_id = _mlflow_run_id(MlflowClient(tracking_uri=uri),
                                tracking.get("experiment", "entrena"), run_dir)
        if run_id is None:  # the tracker was off or failed (and said so): no run to join
            log.info("MLflow model not logged: no MLflow run of %s in %s", run_dir, uri)
            return None
        example = _example(run_dir) if model_kind(run_dir) is True else None
        info = log_model(source, tracking_uri=uri, registered_name=name, run_id=run_id,
                         example=example)
    except Exception as exc:  # noqa: BLE001 - tracking never fails the verb
        log.warning("MLflow model not logged (%s); the run itself is complete",
                    exception_summary(exc))
        log.debug("MLflow model failure", exc_info=True)
        return None
    log.info("MLflow model: %s (serve it: mlflow models serve -m %s --env-manager local, "
             "with MLFLOW_TRACKING_URI=%s)", info["model_uri"], info["model_uri"], uri)
    return info


def _run_config(paths: RunPaths) -> dict[str, Any]:
    import yaml

    try:
        return yaml.safe_load(paths.config.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return {}


def _run_name(paths: RunPaths) -> str:
    return str(_run_config(paths).get("name") or paths.root.name)
