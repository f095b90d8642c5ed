"""The task extension point: a :class:`Task` protocol and a registry of tasks by name.

A task is everything the verbs need to know about one kind of problem (text, images, tables):
how its data is read, checked, split and encoded, which model it builds, how a batch of that
model's inputs is made, which cheap baselines sit beside it, how the trained model is saved
and loaded again, and what example inputs export and planning feed it. The verbs
(``entrena.api``) ask :func:`get_task` for ``config.task`` and call these methods; the loop
(``entrena.engine.loop``) never sees a task: it calls ``model(**inputs)``, where ``inputs``
is a batch without its ``"labels"``.

Model inputs, by task (the keyword names of ``model.forward``; the batch keys a
:class:`~entrena.engine.loop.BatchSource` returns besides ``labels`` (B,) int64):

- ``text-classification``: ``input_ids`` (B, T) int64 and ``attention_mask`` (B, T) int64
  (B batch, T tokens; 1 marks a real token);
- ``image-classification``: ``pixel_values`` (B, C, H, W) float32, resized to the model's
  input size and normalised (C channels, H height, W width in pixels);
- ``tabular-classification``: ``features`` (B, F) float32, after the fitted preprocessing
  (F = the preprocessed feature width: scaled numbers + encoded categories).

What a new task (image classification, for example) provides — one module
``entrena/tasks/<name>.py`` with a class satisfying :class:`Task`, registered in
:data:`BUILTIN_TASKS` (or with :func:`register_task`):

1. ``name`` (the ``task:`` value) and ``input_names`` (the keys above, in ``forward`` order).
2. ``model_sources(loaded)``: resolve and check model names/files before any data is read
   (a timm name that does not exist is a ``ConfigError`` listing the closest names); returns
   a ``dict[str, str]`` handed back to the other methods.
3. ``prepare(loaded, sources)``: read, check, split and encode the data once (through
   ``entrena.data.cache`` if it pays), returning a :class:`Prepared`: its ``splits`` (a
   ``LabelledSplits``-like object with ``train``, ``validation``, optional ``test``, each
   with ``labels`` (N,) int64 and ``row_ids`` (N,), ``labels`` the class names and
   ``roles()``), ``report`` (the data report: ``splits.<role>.rows_read``/``rows_kept`` …,
   ``checks`` as :func:`entrena.data.hygiene.check_record` records) and ``from_cache``.
   Bad input raises ``DataError`` (exit 2) naming file, column/row and fix.
4. ``build_model(loaded, sources, prepared)``: the ``torch.nn.Module`` in train mode whose
   ``forward(**inputs)`` returns logits (B, C) (C classes).
5. ``batches(loaded, prepared, role, *, batch_size, shuffle)``: a ``BatchSource`` for the
   split ``role`` (``plan(epoch) -> list[list[int]]``, deterministic per epoch and seeded
   by ``train.seed``; ``collate(indices) -> dict[str, Tensor]`` with the inputs above and
   ``labels``). It also has ``lengths`` (N,) int: tokens per example for text, 1 otherwise
   (what the efficiency monitor counts).
6. ``baselines(loaded, prepared)``: cheap models fitted on the training split and scored on
   validation/test: ``{name: {"validation": {"accuracy", "macro_f1"}, "test": {…},
   "time_s": float}}`` (see :mod:`entrena.tasks.baselines`).
7. ``save_model(model, prepared, directory)``: write the model folder (weights, the label
   names, and everything inference needs to turn a raw row into inputs: tokenizer,
   transforms, fitted preprocessing) with ``entrena_model.json`` holding at least
   ``{"task": name, "labels": [...]}``; ``load_model(directory)`` rebuilds
   ``(model in eval mode, meta)``.
8. ``example_inputs(model, meta, batch_size)``: ``dict[str, Tensor]`` of ``input_names``,
   B = ``batch_size`` (>= 2, so that export keeps the batch axis dynamic), for export and
   planning.

Optional: ``advice(verdict, baselines) -> dict | None``: a diagnosis finding (``{"code",
"figure", "message", "change"}``, see :mod:`entrena.callbacks.diagnosis`) from the comparison
with the baselines, added first to ``metrics.json``'s ``diagnosis`` and logged (the tabular
task says "a CPU and boosted trees are enough here" when the trees win or tie).
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from entrena.errors import ConfigError

__all__ = ["Prepared", "Task", "BUILTIN_TASKS", "register_task", "get_task", "task_names"]


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

    splits: Any
    report: dict[str, Any]
    from_cache: bool


@runtime_checkable
class Task(Protocol):
    """One kind of problem; see the module docstring for what each method must do."""

    name: str
    """The ``task:`` value of a config (``text-classification`` …)."""
    input_names: tuple[str, ...]
    """The model's input keywords, in ``forward`` order (``("features",)`` …)."""

    def model_sources(self, loaded: Any) -> dict[str, str]:
        """Resolve model names and files before any data is read (``ConfigError`` if wrong)."""
        ...

    def prepare(self, loaded: Any, sources: dict[str, str]) -> Prepared:
        """Read, check, split and encode the config's data (``DataError`` if wrong)."""
        ...

    def build_model(self, loaded: Any, sources: dict[str, str], prepared: Any) -> Any:
        """The model, train mode; ``forward(**inputs)`` returns logits (B, C)."""
        ...

    def batches(self, loaded: Any, prepared: Any, role: str, *, batch_size: int,
                shuffle: bool) -> Any:
        """A ``BatchSource`` of split ``role`` (with ``lengths`` (N,))."""
        ...

    def baselines(self, loaded: Any, prepared: Any) -> dict[str, dict[str, Any]]:
        """Cheap models fitted on train, scored per evaluation split (+ ``time_s``)."""
        ...

    def save_model(self, model: Any, prepared: Any, directory: Path) -> None:
        """Write the model folder (weights, labels, preprocessing, ``entrena_model.json``)."""
        ...

    def load_model(self, directory: Path) -> tuple[Any, dict[str, Any]]:
        """``(model in eval mode, meta)`` from a saved model folder."""
        ...

    def example_inputs(self, model: Any, meta: dict[str, Any],
                       batch_size: int) -> dict[str, Any]:
        """Example inputs (``input_names`` → tensors with B = ``batch_size``)."""
        ...


BUILTIN_TASKS: dict[str, str] = {
    "text-classification": "entrena.tasks.text:TextClassificationTask",
    "image-classification": "entrena.tasks.image_classification:ImageClassificationTask",
    "tabular-classification": "entrena.tasks.tabular:TabularClassificationTask",
}
"""Shipped tasks: name → ``module:class``, imported on first use (no torch at config time)."""

_REGISTERED: dict[str, Callable[[], Task]] = {}
_INSTANCES: dict[str, Task] = {}


def register_task(name: str, factory: Callable[[], Task]) -> None:
    """Add a task (or replace one) under ``name``.

    Args:
        name: The ``task:`` value.
        factory: Called once, on first use, to make the task.
    """
    _REGISTERED[name] = factory
    _INSTANCES.pop(name, None)


def task_names() -> list[str]:
    """Every task name known, sorted."""
    return sorted({*BUILTIN_TASKS, *_REGISTERED})


def get_task(name: str) -> Task:
    """The task registered under ``name``.

    Raises:
        ConfigError: ``name`` is unknown (the choices and the closest one are listed), or the
            task's module is not built in this version.
    """
    if name in _INSTANCES:
        return _INSTANCES[name]
    if name in _REGISTERED:
        task = _REGISTERED[name]()
    elif name in BUILTIN_TASKS:
        module_name, class_name = BUILTIN_TASKS[name].split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            raise ConfigError(f"task: {name!r} is not built in this version of entrena; use "
                              "task: text-classification") from None
        task = getattr(module, class_name)()
    else:
        close = difflib.get_close_matches(name, task_names(), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"task: unknown task {name!r}; choose one of "
                          f"{', '.join(task_names())}{hint}")
    _INSTANCES[name] = task
    return task

