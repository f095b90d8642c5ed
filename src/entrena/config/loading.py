"""Loading a config: YAML with line numbers, ``--set`` overrides, validation, path resolution.

All problems of one config are collected and raised together as one :class:`ConfigError`,
each line naming the file and line, the key, what was given, and how to fix it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol

import yaml
from pydantic import BaseModel, ValidationError
from typing_extensions import TypeVar

from entrena.config.schema import Config
from entrena.errors import ConfigError, closest_choice

__all__ = ["ConfigT", "LoadedConfig", "TaskSchemas", "load_config", "parse_overrides",
           "apply_overrides", "validate_config"]


class TaskSchemas(Protocol):
    """The config classes of the tasks (``entrena.tasks.registry.SCHEMAS``): the loader
    validates a config against the class its ``task:`` names."""

    def names(self) -> list[str]:
        """Every task name, sorted."""
        ...

    def schema_for(self, name: str | None) -> type[Config]:
        """The config class of task ``name`` (the default task for ``None``).

        Raises:
            ConfigError: Unknown task (the message lists the known ones).
        """
        ...


ConfigT = TypeVar("ConfigT", bound=Config, default=Config, covariant=True)
"""The config class a :class:`LoadedConfig` holds: a task's own (``LoadedConfig[
TabularClassificationConfig]``) where a task reads its keys, :class:`Config` where only the
common sections are read. Covariant: a loaded config is never changed, so a
``LoadedConfig[TextClassificationConfig]`` is a ``LoadedConfig[Config]``."""


@dataclass(frozen=True)
class LoadedConfig(Generic[ConfigT]):
    """A validated config and where it came from.

    Attributes:
        config: The validated config, every default filled in and, from :func:`load_config`,
            every relative path (data files, cache folder, local model folders) made absolute
            against ``base_dir``.
        base_dir: Folder that relative data paths resolve against (the config file's folder).
        source: The config file, or ``None`` for a dict given in Python.
    """

    config: ConfigT
    base_dir: Path
    source: Path | None = None
    lines: dict[tuple[str, ...], int] = field(default_factory=dict, compare=False)

    def resolve_path(self, path: str) -> str:
        """Resolve a data path against the config's folder (URLs and absolute paths unchanged)."""
        if "://" in path or Path(path).is_absolute():
            return path
        return str((self.base_dir / path).resolve())

    def portable_dump(self) -> dict[str, Any]:
        """The config as plain values with every relative path made absolute, so the dump
        loads the same data and model from any folder (a run's ``config.yaml``,
        ``best_config.yaml``).

        Resolved: ``data.train``, ``data.validation``, ``data.test``, ``data.cache_dir`` and
        ``model.weights_file`` always; ``model.name`` and ``model.tokenizer`` when they name an
        existing folder next to the config (an alias or hub id stays as written).
        """
        dumped = self.config.model_dump(mode="json")
        data, model = dumped.get("data", {}), dumped.get("model", {})
        for key in ("train", "validation", "test", "cache_dir"):
            if isinstance(data.get(key), str):
                data[key] = self.resolve_path(data[key])
        if isinstance(model.get("weights_file"), str):
            model["weights_file"] = self.resolve_path(model["weights_file"])
        for key in ("name", "tokenizer"):
            value = model.get(key)
            if isinstance(value, str) and not Path(value).is_absolute() \
                    and (self.base_dir / value).is_dir():
                model[key] = self.resolve_path(value)
        return dumped


def _line_map(node: yaml.Node, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], int]:
    """Map each key path of a YAML mapping to its 1-based line number."""
    lines: dict[tuple[str, ...], int] = {}
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = (*prefix, str(key_node.value))
            lines[key] = key_node.start_mark.line + 1
            lines.update(_line_map(value_node, key))
    return lines


def _refuse_repeated_keys(node: yaml.Node | None, path: Path,
                          prefix: tuple[str, ...] = ()) -> None:
    """A key written twice in one mapping (YAML keeps the last: a second ``data:`` section
    silently replaces the first).

    Raises:
        ConfigError: Names the key and both lines.
    """
    if not isinstance(node, yaml.MappingNode):
        return
    seen: dict[str, int] = {}
    for key_node, value_node in node.value:
        name, line = str(key_node.value), key_node.start_mark.line + 1
        if name in seen:
            key = ".".join((*prefix, name))
            raise ConfigError(f"{path}:{line}: key '{key}' is written twice (also line "
                              f"{seen[name]}); YAML would keep only this one: merge them")
        seen[name] = line
        _refuse_repeated_keys(value_node, path, (*prefix, name))


def _read_yaml(path: Path) -> tuple[dict[str, Any], dict[tuple[str, ...], int]]:
    if path.is_dir():
        raise ConfigError(f"{path}: is a folder; give the config file (a .yaml file)")
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found; check the path (cwd is {Path.cwd()})")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise ConfigError(f"{path}:{line}: byte {exc.start} (0x{raw[exc.start]:02x}) is not "
                          "UTF-8; save the config as UTF-8") from None
    try:
        node = yaml.compose(text)
        _refuse_repeated_keys(node, path)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{where}: invalid YAML: {problem}; fix the syntax") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}:1: the config must be a mapping of keys (name:, data:, ...)")
    return data, (_line_map(node) if node is not None else {})


def parse_overrides(items: list[str] | None) -> dict[str, Any]:
    """Parse ``--set dotted.key=value`` strings; values are YAML scalars (``1e-4``, ``true``).

    Raises:
        ConfigError: An item has no ``=`` or an empty key.
    """
    overrides: dict[str, Any] = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(
                f"--set {item!r}: expected dotted.key=value, e.g. --set train.max_epochs=2"
            )
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        if isinstance(value, str) and _NUMBER.match(value.strip()):
            value = float(value)  # YAML 1.1 reads 1e-4 (no dot) as a string
        overrides[key.strip()] = value
    return overrides


_NUMBER = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")


def _fields_at(path: tuple[str, ...], schema: type[BaseModel] = Config
               ) -> dict[str, Any] | None:
    """The pydantic fields of the section at ``path`` of config class ``schema`` (``None`` if
    it is not a section)."""
    model: type[BaseModel] = schema
    for part in path:
        info = model.model_fields.get(part)
        if info is None:
            return None
        candidates = [info.annotation, *getattr(info.annotation, "__args__", ())]
        sub = next(
            (c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None
        )
        if sub is None:
            return None
        model = sub
    return dict(model.model_fields)


def apply_overrides(data: dict[str, Any], overrides: dict[str, Any],
                    schema: type[BaseModel] = Config,
                    schemas: TaskSchemas | None = None) -> dict[str, Any]:
    """Return a copy of ``data`` with each dotted key set.

    Args:
        schema: The config class the keys must belong to (the config's task's).
        schemas: The other tasks' classes, to say which task a foreign key belongs to.

    Raises:
        ConfigError: A key names no config field (the message lists the closest valid keys,
            or the task that uses it).
    """
    result = _deep_copy(data)
    problems = []
    for dotted, value in overrides.items():
        parts = tuple(dotted.split("."))
        fields = _fields_at(parts[:-1], schema)
        if fields is None or parts[-1] not in fields:
            owners = _owners(parts, schema, schemas)
            problems.append(f"--set {dotted}: " + (_foreign(dotted, owners, schema) if owners
                                                   else f"no such config key; "
                                                        f"{_suggest(parts, schema)}"))
            continue
        node = result
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = {}
                node[part] = child
            node = child
        node[parts[-1]] = value
    if problems:
        raise ConfigError("\n".join(problems))
    return result


def _deep_copy(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _deep_copy(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_deep_copy(v) for v in data]
    return data


def _task_of(schema: type[BaseModel]) -> str:
    info = schema.model_fields.get("task")
    return str(info.default) if info is not None and info.default else "the default task"


def _owners(parts: tuple[str, ...], schema: type[BaseModel],
            schemas: TaskSchemas | None) -> list[str]:
    """The other tasks whose config has the key ``parts``."""
    if schemas is None:
        return []
    owners = []
    for name in schemas.names():
        try:
            other = schemas.schema_for(name)
        except ConfigError:  # a task that cannot be loaded owns nothing here
            continue
        fields = _fields_at(parts[:-1], other)
        if other is not schema and fields is not None and parts[-1] in fields:
            owners.append(name)
    return owners


def _foreign(dotted: str, owners: list[str], schema: type[BaseModel]) -> str:
    return (f"only used by task {' or '.join(owners)}, and this config's task is "
            f"{_task_of(schema)}; remove {dotted} (or change task)")


def _suggest(parts: tuple[str, ...], schema: type[BaseModel] = Config) -> str:
    """'did you mean …?' for an unknown key, else the list of valid keys at that level.

    The first part of the path that names nothing is the one corrected (``trian.max_epochs``
    → ``train.max_epochs``).
    """
    depth = 0
    while depth < len(parts) - 1 and _fields_at(parts[:depth + 1], schema) is not None:
        depth += 1
    parent, wrong, rest = parts[:depth], parts[depth], parts[depth + 1:]
    fields = _fields_at(parent, schema)
    if fields is None:
        return "see the config reference (docs/reference/config.md) for the valid keys"
    prefix = ".".join(parent) + "." if parent else ""
    suffix = "." + ".".join(rest) if rest else ""
    close = closest_choice(wrong, fields, fragments=True)
    if close:
        return f"did you mean '{prefix}{close}{suffix}'?"
    return f"valid keys here: {', '.join(prefix + f for f in fields)}"


def _schema_loc(loc: tuple[str, ...], schema: type[BaseModel] = Config) -> tuple[str, ...]:
    """The part of a pydantic error location that names config keys (drops union branch tags
    such as ``literal['auto']`` or ``constrained-int``)."""
    if loc[:2] == ("tune", "space") and len(loc) > 2:
        return loc[:3]  # tune.space.<config path>: the dotted key is one name
    for depth in range(len(loc)):
        fields = _fields_at(loc[:depth], schema)
        if fields is None or loc[depth] not in fields:
            return loc[:depth] or loc[:1]
    return loc


def _format_error(err: dict[str, Any], source: str, lines: dict[tuple[str, ...], int | str],
                  msg: str | None = None, schema: type[BaseModel] = Config,
                  schemas: TaskSchemas | None = None) -> str:
    loc = tuple(str(p) for p in err["loc"])
    if err["type"] != "extra_forbidden":
        loc = _schema_loc(loc, schema)
    key = ".".join(loc)
    line = None
    for depth in range(len(loc), 0, -1):
        line = lines.get(loc[:depth])
        if line:
            break
    where = line if isinstance(line, str) else f"{source}:{line}" if line else source
    kind = err["type"]
    if kind == "extra_forbidden":
        owners = _owners(loc, schema, schemas)
        if owners:
            return f"{where}: {key}: {_foreign(key, owners, schema)}"
        return f"{where}: unknown key '{key}'; {_suggest(loc, schema)}"
    if kind == "missing":
        return f"{where}: missing required key '{key}'; add it to the config"
    if not err["loc"]:  # a whole-config rule: the message starts with the dotted key
        lines_of = lines or {}
        out = []
        for text in (msg or err["msg"].removeprefix("Value error, ")).split("\n"):
            named = tuple(text.split(": ", 1)[0].split("."))
            found = next((lines_of[named[:d]] for d in range(len(named), 0, -1)
                          if named[:d] in lines_of), None)
            where = found if isinstance(found, str) else f"{source}:{found}" if found else source
            out.append(f"{where}: {text}")
        return "\n".join(out)
    given = err.get("input")
    msg = msg or err["msg"].removeprefix("Value error, ")
    if kind == "list_type" and isinstance(given, str | int | float):
        msg += f"; write a list, e.g. [{given}]"
    return f"{where}: {key} = {given!r} is invalid: {msg}"


def validate_config(
    data: dict[str, Any],
    *,
    source: str = "<config>",
    lines: dict[tuple[str, ...], int | str] | None = None,
    schema: type[Config] = Config,
    schemas: TaskSchemas | None = None,
) -> Config:
    """Validate a config mapping against ``schema`` (the config's task's class), collecting
    every problem into one :class:`ConfigError`."""
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        # A value failing every branch of a union (`auto` or an integer) is one message.
        merged: dict[tuple[Any, ...], list[str]] = {}
        for err in errors:
            loc = tuple(str(p) for p in err["loc"])
            key = loc if err["type"] == "extra_forbidden" else _schema_loc(loc, schema)
            merged.setdefault(key, []).append(err["msg"].removeprefix("Value error, "))
        messages = []
        seen: set[tuple[Any, ...]] = set()
        for err in errors:
            loc = tuple(str(p) for p in err["loc"])
            key = loc if err["type"] == "extra_forbidden" else _schema_loc(loc, schema)
            if key in seen:
                continue
            seen.add(key)
            text = " or ".join(dict.fromkeys(merged[key]))
            messages.append(_format_error(err, source, lines or {}, text, schema, schemas))
        messages.sort(key=_line_of)
        raise ConfigError("\n".join(dict.fromkeys(messages))) from None


def _line_of(message: str) -> int:
    """Sort key: the line number after ``file:`` (messages without one go last)."""
    head = message.split(": ", 1)[0]
    number = head.rsplit(":", 1)[-1]
    return int(number) if number.isdigit() else 1 << 30


def load_config(
    source: str | Path | dict[str, Any] | Config,
    overrides: list[str] | dict[str, Any] | None = None,
    *,
    schemas: TaskSchemas | None = None,
) -> LoadedConfig:
    """Load and validate a config from a YAML file, a dict or a :class:`Config`.

    Most callers want :func:`entrena.load_config` (``entrena.tasks.registry.load_config``),
    which passes the registered tasks as ``schemas``.

    Args:
        source: Path to a YAML file, a mapping with the same structure, or a config object.
        overrides: ``--set`` strings (``"train.max_epochs=2"``) or a ``{dotted_key: value}`` dict.
        schemas: The tasks' config classes; the config is validated against the one its
            ``task:`` names. ``None``: the common :class:`Config` only (no task's own keys).

    Returns:
        The validated config with the folder relative paths resolve against.

    Raises:
        ConfigError: The file is missing or not YAML, the task is unknown, a key is unknown
            (or another task's), a value is invalid.
    """
    if isinstance(overrides, list):
        overrides = parse_overrides(overrides)
    if isinstance(source, Config):
        data, lines, origin, base = source.model_dump(), {}, None, Path.cwd()
    elif isinstance(source, dict):
        data, lines, origin, base = source, {}, None, Path.cwd()
    else:
        origin = Path(source)
        data, lines = _read_yaml(origin)
        base = origin.resolve().parent
    where: dict[tuple[str, ...], int | str] = dict(lines)
    schema = _schema(data, overrides or {}, schemas, str(origin or "<config>"), lines)
    if overrides:
        data = apply_overrides(data, overrides, schema, schemas)
        # a bad value given with --set is blamed on --set, not on the file's line
        paths = [tuple(key.split(".")) for key in overrides]
        where = {k: v for k, v in where.items() if not any(k[:len(p)] == p for p in paths)}
        where.update({p: f"--set {'.'.join(p)}" for p in paths})
    config = validate_config(data, source=str(origin or "<config>"), lines=where, schema=schema,
                             schemas=schemas)
    loaded = LoadedConfig(config=config, base_dir=base, source=origin, lines=lines)
    # Resolved once, here: every path in the config is absolute from now on (the run's
    # config.yaml, checkpoints and DDP workers all see the same values).
    absolute = type(config).model_validate(loaded.portable_dump())
    return LoadedConfig(config=absolute, base_dir=base, source=origin, lines=lines)


def _schema(data: dict[str, Any], overrides: dict[str, Any], schemas: TaskSchemas | None,
            source: str, lines: dict[tuple[str, ...], int]) -> type[Config]:
    """The config class ``task:`` (or ``--set task=``) names.

    Raises:
        ConfigError: An unknown task, named with where it was given.
    """
    if schemas is None:
        return Config
    name = overrides.get("task", data.get("task"))
    if name is not None and not isinstance(name, str):
        name = str(name)
    try:
        return schemas.schema_for(name)
    except ConfigError as exc:
        where = "--set task" if "task" in overrides else \
            f"{source}:{lines[('task',)]}" if ("task",) in lines else source
        raise ConfigError(f"{where}: {exc}") from None
