"""One small registry by name, behind tasks, callbacks and trackers.

A :class:`Registry` maps names to objects (a factory, usually) from three sources, looked up
in this order: registered in Python (:meth:`Registry.register`), shipped with entrena (given
at construction; a ``"module:attribute"`` string is imported on first use), and declared by an
installed package in an entry-point group (``[project.entry-points."<group>"]`` with
``<name> = "module:attribute"``, loaded on first use). An unknown name is refused with one
line: the config key, the name, the known ones and the closest
(:func:`entrena.errors.closest_choice`).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from typing import Any, Generic, TypeVar

from entrena.errors import ConfigError, closest_choice

__all__ = ["Registry", "import_target"]

T = TypeVar("T")


def import_target(target: str) -> Any:
    """The object a ``"module:attribute"`` string names, its module imported now."""
    module_name, attribute = target.split(":")
    return getattr(importlib.import_module(module_name), attribute)


class Registry(Generic[T]):
    """Names → objects: registered, shipped, or declared in an entry-point group.

    Args:
        kind: What a name names, for messages (``"task"``, ``"callback"``, ``"tracker"``).
        key: The config key that names them, for messages (``"train.callbacks"``).
        builtin: The shipped entries: name → the object, or ``"module:attribute"``.
        entry_point_group: The group other packages declare entries in (``None``: none).
        none_known: What the message says instead of the list when no name is known.

    Attributes:
        registered: The entries registered in Python, name → object (a plain dict: tests
            may patch it).
    """

    def __init__(self, kind: str, key: str, *, builtin: Mapping[str, T | str] | None = None,
                 entry_point_group: str | None = None, none_known: str = "none is known"):
        self.kind = kind
        self.key = key
        self.builtin: dict[str, T | str] = dict(builtin or {})
        self.entry_point_group = entry_point_group
        self.none_known = none_known
        self.registered: dict[str, T] = {}

    def register(self, name: str, obj: T) -> None:
        """Add (or replace) the entry ``name``; it wins over a shipped or declared one."""
        self.registered[name] = obj

    def _declared(self) -> dict[str, Any]:
        if self.entry_point_group is None:
            return {}
        from importlib.metadata import entry_points

        return {ep.name: ep for ep in entry_points(group=self.entry_point_group)}

    def names(self) -> list[str]:
        """Every name known (registered, shipped or declared by an installed package),
        sorted."""
        return sorted({*self.registered, *self.builtin, *self._declared()})

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name in self.registered or name in self.builtin
                                          or name in self._declared())

    def get(self, name: str) -> T:
        """The object registered, shipped or declared under ``name`` (imported or loaded
        now for a shipped string or an entry point).

        Raises:
            ConfigError: ``name`` is unknown (:meth:`unknown`).
        """
        if name in self.registered:
            return self.registered[name]
        if name in self.builtin:
            target = self.builtin[name]
            return import_target(target) if isinstance(target, str) else target
        declared = self._declared()
        if name in declared:
            return declared[name].load()
        raise self.unknown(name)

    def hint(self, name: object, known: Iterable[str] | None = None) -> str:
        """``"; did you mean 'x'?"`` for the known name closest to ``name``, or ``""``."""
        close = closest_choice(name, self.names() if known is None else known) \
            if isinstance(name, str) else None
        return f"; did you mean {close!r}?" if close else ""

    def unknown(self, name: str) -> ConfigError:
        """The error for an unknown ``name``: ``<key>: unknown <kind> 'name'; choose from
        a, b; did you mean 'a'?``."""
        known = self.names()
        choices = f"choose from {', '.join(known)}" if known else self.none_known
        return ConfigError(f"{self.key}: unknown {self.kind} {name!r}; {choices}"
                           f"{self.hint(name, known)}")

    def check(self, names: Iterable[str]) -> None:
        """Refuse the first of ``names`` that is unknown.

        Raises:
            ConfigError: An unknown name (:meth:`unknown`).
        """
        for name in names:
            if name not in self:
                raise self.unknown(name)
