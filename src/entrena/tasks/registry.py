"""The tasks entrena knows, by name: built in, registered in Python, or declared by a package.

A task is one package under ``entrena/tasks/<name>/`` (or a third party's) and one line here
(:data:`BUILTIN_TASKS`), or an entry point in the ``entrena.tasks`` group. Everything else in
entrena reaches a task through this registry: :func:`get_task` (the
:class:`~entrena.tasks.base.Task` object) and :func:`config_schema` (its config class), and
:func:`load_config` validates a config against the class its ``task:`` names. No module
outside ``entrena/tasks/`` names a task.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from entrena.config.loading import LoadedConfig, TaskSchemas
from entrena.config.loading import load_config as _load_config
from entrena.core.registry import Registry, import_target
from entrena.errors import ConfigError, DataError

if TYPE_CHECKING:
    from entrena.config.schema import Config
    from entrena.tasks.base import AnyTask

__all__ = ["BUILTIN_TASKS", "DEFAULT_TASK", "ENTRY_POINT_GROUP", "TASKS", "register_task",
           "get_task", "recorded_task", "task_names", "model_files", "config_schema",
           "builtin_config_schemas", "SCHEMAS", "load_config"]

BUILTIN_TASKS: dict[str, tuple[str, str]] = {
    "text-classification": ("entrena.tasks.text.task:TextClassificationTask",
                            "entrena.tasks.text.config:TextClassificationConfig"),
    "image-classification": (
        "entrena.tasks.image_classification.task:ImageClassificationTask",
        "entrena.tasks.image_classification.config:ImageClassificationConfig"),
    "tabular-classification": (
        "entrena.tasks.tabular.task:TabularClassificationTask",
        "entrena.tasks.tabular.config:TabularClassificationConfig"),
    "tabular-regression": (
        "entrena.tasks.tabular_regression.task:TabularRegressionTask",
        "entrena.tasks.tabular_regression.config:TabularRegressionConfig"),
    "text-regression": (
        "entrena.tasks.text_regression.task:TextRegressionTask",
        "entrena.tasks.text_regression.config:TextRegressionConfig"),
    "llm-sft": ("entrena.tasks.llm_sft.task:LlmSftTask",
                "entrena.tasks.llm_sft.config:LlmSftConfig"),
}
"""Shipped tasks: name → (the task class, its config class), each ``module:class``, imported
on first use (a config class imports pydantic only, so loading a config never imports
torch)."""

DEFAULT_TASK = "text-classification"
"""The ``task:`` of a config that names none, and of a model folder or bundle that records
none (text bundles were written before models recorded their task)."""

ENTRY_POINT_GROUP = "entrena.tasks"
"""Third-party tasks: a package declares ``[project.entry-points."entrena.tasks"]`` with
``<task name> = "module:ClassOrFactory"``; the object is called once, on first use, and the
task it returns names its config class in ``config_model``."""

TASKS: Registry[Callable[[], AnyTask]] = Registry(
    "task", "task", builtin={name: task for name, (task, _) in BUILTIN_TASKS.items()},
    entry_point_group=ENTRY_POINT_GROUP)
"""Task factories by name (:class:`~entrena.core.registry.Registry`): registered, shipped,
or declared in :data:`ENTRY_POINT_GROUP`."""

_INSTANCES: dict[str, AnyTask] = {}


def register_task(name: str, factory: Callable[[], AnyTask]) -> None:
    """Add a task (or replace one) under ``name``.

    Args:
        name: The ``task:`` value.
        factory: Called once, on first use, to make the task (a class or a function); the
            task's ``config_model`` is its config class.
    """
    TASKS.register(name, factory)
    _INSTANCES.pop(name, None)


def task_names() -> list[str]:
    """Every task name known (built in, registered, or declared by an installed package),
    sorted."""
    return TASKS.names()


def get_task(name: str | None) -> AnyTask:
    """The task registered under ``name`` (:data:`DEFAULT_TASK` for ``None``).

    Raises:
        ConfigError: ``name`` is unknown (the choices and the closest one are listed).
    """
    name = name or DEFAULT_TASK
    if name not in _INSTANCES:
        _INSTANCES[name] = TASKS.get(name)()
    return _INSTANCES[name]


def recorded_task(name: Any, where: str | Path) -> AnyTask:
    """The task a saved model records (``task`` in its ``entrena_model.json``).

    Args:
        name: The recorded name (``None``, a model that records none: :data:`DEFAULT_TASK`).
        where: The file that records it, named in the message.

    Raises:
        DataError: No task of that name is installed (the choices and the closest one are
            listed, with how to fix it).
    """
    known = task_names()
    if name is None or (isinstance(name, str) and name in known):
        return get_task(name)
    raise DataError(f"{where}: the model's task {name!r} is not an installed task (installed: "
                    f"{', '.join(known)}{TASKS.hint(name, known)}); install the package that "
                    "provides it, or correct \"task\" in that file")


def config_schema(name: str | None) -> type[Config]:
    """The config class of task ``name`` (:data:`DEFAULT_TASK` for ``None``): the common
    sections with the task's own keys.

    Raises:
        ConfigError: ``name`` is unknown.
    """
    name = name or DEFAULT_TASK
    if name in BUILTIN_TASKS and name not in TASKS.registered:
        return import_target(BUILTIN_TASKS[name][1])
    schema = getattr(get_task(name), "config_model", None)
    if schema is None:
        raise ConfigError(f"task: {name!r} has no config_model (its config class); the task's "
                          "package must set it (see docs/adding-a-task.md)")
    return schema


def builtin_config_schemas() -> dict[str, type[Config]]:
    """The config class of every shipped task, by name (for the config reference page)."""
    return {name: import_target(config) for name, (_, config) in BUILTIN_TASKS.items()}


def model_files(name: str | None) -> tuple[str, ...]:
    """The files a saved model folder of task ``name`` holds (for
    :func:`entrena.exporting.bundle.locate_run`)."""
    return tuple(get_task(name).model_files)


class _Schemas:
    """The registry seen by the config loader (:class:`entrena.config.loading.TaskSchemas`)."""

    def names(self) -> list[str]:
        return task_names()

    def schema_for(self, name: str | None) -> type[Config]:
        return config_schema(name)


SCHEMAS: TaskSchemas = _Schemas()
"""What :func:`load_config` validates against."""


def load_config(source: str | Path | dict[str, Any] | Config,
                overrides: list[str] | dict[str, Any] | None = None) -> LoadedConfig:
    """Load and validate a config against its task's config class.

    Args:
        source: Path to a YAML file, a mapping with the same structure, or a config object.
        overrides: ``--set`` strings (``"train.max_epochs=2"``) or ``{dotted_key: value}``.

    Returns:
        The validated config (an instance of its task's config class) and the folder
        relative paths resolve against.

    Raises:
        ConfigError: The file is missing or not YAML, the task is unknown, a key is unknown
            or belongs to another task, a value is invalid (every problem, with file:line), or
            ``tracking.backends`` / ``train.callbacks`` names an unregistered tracker or
            callback.
    """
    from entrena.callbacks.registry import check_callbacks
    from entrena.tracking.base import check_trackers

    loaded = _load_config(source, overrides, schemas=SCHEMAS)
    for key, check, names in (
            (("tracking", "backends"), check_trackers, loaded.config.tracking.backends),
            (("train", "callbacks"), check_callbacks, loaded.config.train.callbacks)):
        try:
            check(names)
        except ConfigError as exc:
            given = ".".join(key) in _override_keys(overrides)
            line = loaded.lines.get(key)
            where = ("--set " if given else
                     f"{loaded.source}:{line}: " if loaded.source and line else "")
            raise ConfigError(f"{where}{exc}") from None
    return loaded


def _override_keys(overrides: list[str] | dict[str, Any] | None) -> list[str]:
    if isinstance(overrides, dict):
        return list(overrides)
    return [item.partition("=")[0].strip() for item in overrides or []]
