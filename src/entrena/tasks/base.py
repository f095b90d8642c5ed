"""The task extension point: the :class:`Task` protocol and the pieces tasks share.

A task is everything the verbs need to know about one kind of problem (text, images, tables):
its config keys, how its data is read, checked, split and encoded, which model it builds, how
a batch of that model's inputs is made, its loss and metrics, which cheap baselines sit beside
it, what the planner needs, how the trained model is saved, exported and run on new data. Each
task is one package ``entrena/tasks/<name>/`` and one line of
:data:`entrena.tasks.registry.BUILTIN_TASKS` (or an ``entrena.tasks`` entry point of another
package); ``docs/adding-a-task.md`` walks through adding one. The verbs (``entrena.api``) ask
:func:`entrena.tasks.registry.get_task` for ``config.task`` and call these methods; the loop
(``entrena.engine.loop``) never sees a task: it calls ``model(**inputs)``, where ``inputs``
is a batch without its ``"labels"``, and the task's ``loss`` it is given.

Model inputs of the shipped tasks (the keyword names of ``model.forward``; the batch keys a
:class:`~entrena.data.batching.BatchSource` returns besides ``labels`` (B,) int64):

- text: ``input_ids`` (B, T) int64 and ``attention_mask`` (B, T) int64 (B batch, T tokens;
  1 marks a real token);
- images: ``pixel_values`` (B, C, H, W) float32, resized to the model's input size and
  normalised (C channels, H height, W width in pixels);
- tables: ``features`` (B, F) float32, after the fitted preprocessing (F = the preprocessed
  feature width: scaled numbers + encoded categories).

What :meth:`Task.prepare` returns (a :class:`Prepared`): ``splits`` (``train``,
``validation``, optional ``test``, each with ``labels`` (N,) and ``row_ids`` (N,), the class
names ``labels`` and ``roles()``), ``report`` (``data_report.json``:
``splits.<role>.rows_read``/``rows_kept`` …, ``checks`` as
:func:`entrena.data.hygiene.check_record` records) and ``from_cache``. ``baselines`` returns
``{name: {"validation": {...}, "test": {...}, "time_s": float}}``; ``save_model`` writes a
folder whose ``entrena_model.json`` holds at least ``{"task": name, "labels": [...]}``.

Optional members (a task without one gets the default) are listed with their defaults in
:data:`OPTIONAL_HOOKS`, and a batch source's in :data:`OPTIONAL_BATCH_SOURCE_HOOKS`; the
callers read them with ``getattr(task, name, default)``, and ``tests/test_tasks.py`` checks
that every member read that way is listed there and in ``docs/adding-a-task.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, runtime_checkable

from typing_extensions import TypeVar

from entrena.config.loading import LoadedConfig
from entrena.config.schema import Config
from entrena.data.batching import BatchSource

if TYPE_CHECKING:
    import numpy as np
    import torch

    from entrena.exporting.bundle import ExportRequest, RunModel
    from entrena.exporting.prediction import ModelLocation, PredictOptions

__all__ = ["OPTIONAL_BATCH_SOURCE_HOOKS", "OPTIONAL_HOOKS", "AnyTask", "ConfigT", "PlanningSpec",
           "Prepared", "PreparedT", "Task", "TaskBatches", "fixed_input_planning"]


@dataclass
class PlanningSpec:
    """What the planner needs of a task's model and inputs (:meth:`Task.planning`).

    Attributes:
        model_name: The model as the plan names it (``minilm-l6``, ``mlp [256, 128]``).
        max_length: The longest input in tokens; 1 for fixed-size inputs (a table row or an
            image is one "token" of a fixed-size profile).
        lengths: ``role -> tokens per example (N,)`` of that split, before any padding (ones
            for fixed-size inputs; empty for a split the data lacks).
        batch_width: ``longest -> tokens``: how wide a batch whose longest example has
            ``longest`` tokens is padded (``data.pad_to_multiple_of``); ``None``: as wide as
            that example.
        probe_batches: ``batch_size -> batches`` (model inputs and ``labels``) of at least two
            sizes in FLOPs for the calibration probe: for sequences the median-length and the
            longest batch of the first epoch, for fixed-size inputs half a batch and a whole.
        meta_model: For sequence models: builds the model on the meta device, profiled at
            three lengths (:func:`entrena.planning.model.profile_model`). ``None`` for
            fixed-size inputs, profiled on a copy of the real model at one example.
        profile_key: JSON-able material identifying the model's shape, for the profile cache
            (``None``: no cache).
        example_batch: For fixed-size inputs: one training example's batch.
        llm: A decoder LLM's run as plain data, for the formulas of
            :mod:`entrena.planning.llm_profile` (used instead of ``meta_model`` or
            ``example_batch``): ``shape`` (a ``config.json`` path or its mapping), ``name``,
            ``memory`` (:func:`~entrena.planning.llm.llm_memory`'s keyword arguments at the
            longest training batch) and ``target_tokens`` (mean per example).
        eval_batch: ``batch_size -> batch``: the evaluation batch where evaluation memory
            peaks (sequences: the longest batch of validation and test in evaluation order;
            fixed-size inputs: a whole validation batch), for the probe's memory measurement.
            ``None``: evaluation memory is not measured (the plan then covers training only).
    """

    model_name: str
    max_length: int
    lengths: Callable[[str], Any]
    probe_batches: Callable[[int], list[dict[str, Any]]]
    meta_model: Callable[[], Any] | None = None
    profile_key: Any = None
    example_batch: Callable[[], dict[str, Any]] | None = None
    eval_batch: Callable[[int], dict[str, Any]] | None = None
    llm: dict[str, Any] | None = None
    batch_width: Callable[[int], int] | None = None


def fixed_input_planning(task: Task[ConfigT, PreparedT], loaded: LoadedConfig[ConfigT],
                         prepared: PreparedT, model_name: str) -> PlanningSpec:
    """The :class:`PlanningSpec` of a task whose inputs have one size (tables, images): one
    "token" per example, probed on half a batch and a whole one."""
    import numpy as np

    def lengths(role: str) -> Any:
        split = getattr(prepared.splits, role, None)
        return np.ones(len(split.labels), dtype=np.int64) if split is not None else []

    def probe_batches(batch_size: int) -> list[dict[str, Any]]:
        source = task.batches(loaded, prepared, "train", batch_size=batch_size, shuffle=True)
        first = source.plan(0)[0]
        return [source.collate(first[:max(1, len(first) // 2)]), source.collate(first)]

    def example_batch() -> dict[str, Any]:
        return task.batches(loaded, prepared, "train", batch_size=1, shuffle=False).collate([0])

    def eval_batch(batch_size: int) -> dict[str, Any]:
        source = task.batches(loaded, prepared, "validation", batch_size=batch_size,
                              shuffle=False)
        return source.collate(max(source.plan(0), key=len))

    return PlanningSpec(model_name=model_name, max_length=1, lengths=lengths,
                        probe_batches=probe_batches, example_batch=example_batch,
                        eval_batch=eval_batch)


@runtime_checkable
class Prepared(Protocol):
    """Checked, split and encoded data of one config, ready to fit (one per task).

    Attributes:
        splits: ``train``, ``validation``, ``test`` (or ``None``), ``labels`` (class names in
            index order), ``roles()`` (``(role, split)`` pairs); each split has ``labels``
            (N,) int64 and ``row_ids`` (N,) (row numbers in its file).
        report: The data report (``data_report.json``).
        from_cache: Whether everything came from the prepared-data cache.
    """

    @property
    def splits(self) -> Any: ...
    @property
    def report(self) -> dict[str, Any]: ...
    @property
    def from_cache(self) -> bool: ...


class TaskBatches(BatchSource, Protocol):
    """What :meth:`Task.batches` returns: a :class:`~entrena.data.batching.BatchSource` (the
    loop's ``plan`` and ``collate``) with ``lengths``, which the recipe and the efficiency
    monitor read."""

    @property
    def lengths(self) -> np.ndarray:
        """Tokens per example (N,) int64, before padding (ones for fixed-size inputs)."""
        ...


PreparedT = TypeVar("PreparedT", bound=Prepared, default=Any)
"""A task's own prepared data (:class:`Prepared` and what its methods read besides)."""
ConfigT = TypeVar("ConfigT", bound=Config, default=Config)
"""A task's own config class (``loaded.config``)."""


OPTIONAL_HOOKS: dict[str, tuple[str, str]] = {
    "advice": (
        "advice(verdict, baselines) -> dict or None",
        "A diagnosis finding ({code, figure, message, change}; entrena.callbacks.diagnosis) "
        "from the comparison with the baselines, put first in metrics.json's diagnosis and "
        "logged (the tabular task says a CPU and boosted trees are enough when the trees win "
        "or tie). Default: none."),
    "prediction_table": (
        "prediction_table(loaded, prepared, role, outputs, targets) -> DataFrame",
        "Split role's rows with their predictions (outputs and targets in example order, as "
        "evaluate gets them), written to predictions/<role>.csv for validation and test; "
        "classifiers return entrena.tasks.predictions.classification_table. Default: none "
        "written."),
    "comparison_metric": (
        "comparison_metric: str",
        "The metric the verdict against the baselines compares (in the direction "
        "higher_is_better gives it). Default: accuracy, micro_f1 for a multi-label task "
        "(entrena.recipes.verdicts)."),
    "comparison_rows": (
        "comparison_rows(outputs, targets, prepared) -> (truths, predictions)",
        "Per-example values the paired bootstrap resamples (arg-max labels, tuned "
        "multi-label sets, values in target units, exact-match flags). Default: the point "
        "comparison, difference_ci null."),
    "frame_predictor": (
        "frame_predictor(location, options) -> FramePredictor",
        "The model loaded once answering DataFrames in memory "
        "(entrena.exporting.prediction.FramePredictor); load_predictor, the MLflow pyfunc "
        "model and entrena serve use it. Default: none (no in-memory predictor, no pyfunc "
        "model)."),
    "chat_session": (
        "chat_session: type",
        "A class (location, *, max_new_tokens, threads) with reply(messages) -> str and "
        "answer(messages, max_new_tokens) -> ChatAnswer: entrena chat and the MLflow chat "
        "model talk through it. Default: none (the task does not chat)."),
    "mlflow_model": (
        "mlflow_model: True, \"chat\" or False",
        "How a trained model is logged and registered as an MLflow model "
        "(entrena.api.mlflow_models): a pyfunc model through frame_predictor, a chat model "
        "through chat_session, or none. Default: True."),
    "forward_share": (
        "forward_share(model) -> float",
        "The share of a training step's time a forward pass takes (a LoRA step's backward "
        "runs through the adapted layers only), which a budget uses to price evaluations. "
        "Default: 1/3 (entrena.planning.timing.FORWARD_SHARE)."),
}
"""Optional members of a :class:`Task`: name → (signature, what it is and the default)."""

OPTIONAL_BATCH_SOURCE_HOOKS: dict[str, tuple[str, str]] = {
    "target_count": (
        "target_count(indices) -> int",
        "Loss units (target tokens) of a batch, so that gradient accumulation divides each "
        "micro-batch's summed loss by the whole step's count. Default: the loss's own count "
        "per micro-batch."),
    "reference_loss": (
        "reference_loss(indices) -> float or None",
        "The loss of predicting the training mean on a batch (a standardised regression "
        "target), which the divergence guard also judges a step's loss against. Default: "
        "none."),
}
"""Optional members of a :class:`~entrena.data.batching.BatchSource` (read by the loop)."""


@runtime_checkable
class Task(Protocol, Generic[ConfigT, PreparedT]):
    """One kind of problem; see the module docstring for what each method must do.

    Generic in the task's config class (``loaded.config``) and its prepared data (what
    :meth:`prepare` returns and every later method is given back): a task's methods annotate
    them with its own classes, and the verbs, which hold any task, see :data:`AnyTask`.
    """

    name: str
    """The ``task:`` value of a config (``text-classification`` …)."""
    input_names: tuple[str, ...]
    """The model's input keywords, in ``forward`` order (``("features",)`` …)."""
    config_model: type[ConfigT]
    """Its config class: :class:`entrena.config.schema.Config` with ``task:`` a ``Literal``
    of its name and its own keys in subclasses of the sections (pydantic only)."""
    model_files: tuple[str, ...]
    """The files :meth:`save_model` writes that a finished run must hold."""
    export_formats: tuple[str, ...]
    """The ``entrena export --format`` values :meth:`write_bundle` supports."""

    def model_sources(self, loaded: LoadedConfig[ConfigT]) -> dict[str, str]:
        """Resolve model names and files before any data is read (``ConfigError`` if wrong)."""
        ...

    def prepare(self, loaded: LoadedConfig[ConfigT], sources: dict[str, str]) -> PreparedT:
        """Read, check, split and encode the config's data (``DataError`` if wrong)."""
        ...

    def build_model(self, loaded: LoadedConfig[ConfigT], sources: dict[str, str],
                    prepared: PreparedT) -> torch.nn.Module:
        """The model, train mode; ``forward(**inputs)`` returns logits (B, C)."""
        ...

    def batches(self, loaded: LoadedConfig[ConfigT], prepared: PreparedT, role: str, *,
                batch_size: int, shuffle: bool) -> TaskBatches:
        """The batches of split ``role`` (:class:`TaskBatches`)."""
        ...

    def loss(self, outputs: Any, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, int]:
        """``(loss summed over the batch, the count it is normalised by)``: examples for a
        classifier, target tokens for a language model (:data:`entrena.engine.loop.LossFn`)."""
        ...

    def evaluate(self, outputs: np.ndarray, targets: np.ndarray, prepared: PreparedT, *,
                 detailed: bool = False) -> dict[str, Any]:
        """A split's metrics from the model's outputs (N, ...) and the batches' ``labels``
        (N, ...) in example order; ``detailed`` for the test split."""
        ...

    higher_is_better: dict[str, bool]
    """Each metric :meth:`evaluate` returns (and ``loss``) → whether larger is better; early
    stopping, best weights and the plateau schedule read it for ``mode: auto``."""

    def baselines(self, loaded: LoadedConfig[ConfigT],
                  prepared: PreparedT) -> dict[str, dict[str, Any]]:
        """Cheap models fitted on train, scored per evaluation split (+ ``time_s``)."""
        ...

    def save_model(self, model: torch.nn.Module, prepared: PreparedT, directory: Path) -> None:
        """Write the model folder (weights, labels, preprocessing, ``entrena_model.json``)."""
        ...

    def load_model(self, directory: Path) -> tuple[torch.nn.Module, dict[str, Any]]:
        """``(model in eval mode, meta)`` from a saved model folder."""
        ...

    def example_inputs(self, model: torch.nn.Module, meta: dict[str, Any],
                       batch_size: int) -> dict[str, torch.Tensor]:
        """Example inputs (``input_names`` → tensors with B = ``batch_size``)."""
        ...

    def planning(self, loaded: LoadedConfig[ConfigT], sources: dict[str, str],
                 prepared: PreparedT) -> PlanningSpec:
        """What the planner needs to profile the model and shape the run."""
        ...

    def write_bundle(self, run: RunModel, request: ExportRequest) -> dict[str, Any]:
        """Export a finished run (:class:`~entrena.exporting.bundle.RunModel`) as the
        :class:`~entrena.exporting.bundle.ExportRequest` says; ``export.json``'s content."""
        ...

    def predict(self, location: ModelLocation, data: Path, output: Path,
                options: PredictOptions) -> dict[str, Any]:
        """Predict ``data`` with the model at ``location``
        (:class:`~entrena.exporting.prediction.ModelLocation`) into ``output``
        (:class:`~entrena.exporting.prediction.PredictOptions`); the summary."""
        ...

    # Optional members: OPTIONAL_HOOKS above.


AnyTask = Task[Any, Any]
"""Any task, as the registry hands it to the verbs: its config class and prepared data are
known only to the task itself."""
