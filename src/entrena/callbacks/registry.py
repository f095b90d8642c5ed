"""Callbacks by name: what ``train.callbacks`` can name, beside the built-in ones.

The training recipe wires the built-in callbacks itself (LR schedule, early stopping, best
weights, checkpoints, preemption, time limit, efficiency, events, progress: they need the
run's state). Any other callback is registered under a name, with :func:`register_callback`
or by another package in the ``entrena.callbacks`` entry-point group, and a config asks for it
with ``train.callbacks: [name, ...]``; the recipe builds them after the built-in ones, in that
order, and their ``state_dict()`` goes into every checkpoint as the built-ins' does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from entrena.core.callback import Callback
from entrena.errors import ConfigError, closest_choice

__all__ = ["CALLBACKS", "ENTRY_POINT_GROUP", "register_callback", "callback_names",
           "check_callbacks", "build_callbacks"]

CALLBACKS: dict[str, Callable[[], Callback]] = {}
"""Registered callbacks: name → a factory (a class or a function) called once per run."""

ENTRY_POINT_GROUP = "entrena.callbacks"
"""Callbacks other packages declare: ``[project.entry-points."entrena.callbacks"]`` with
``<name> = "module:ClassOrFactory"``."""


def register_callback(name: str, factory: Callable[[], Callback]) -> None:
    """Add (or replace) the callback ``name``; ``factory()`` makes one for a run."""
    CALLBACKS[name] = factory


def _entry_points() -> dict[str, Any]:
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def callback_names() -> list[str]:
    """Every callback name known (registered or declared by an installed package), sorted."""
    return sorted({*CALLBACKS, *_entry_points()})


def check_callbacks(names: Sequence[str]) -> None:
    """Refuse a ``train.callbacks`` name nothing is registered under (checked before any data
    is read).

    Raises:
        ConfigError: An unknown name (the known ones, or that there are none, and the closest).
    """
    known = callback_names()
    for name in names:
        if name not in known:
            close = closest_choice(name, known)
            hint = f"; did you mean {close!r}?" if close else ""
            choices = (f"choose from {', '.join(known)}" if known else
                       "no callback is registered (entrena.callbacks.registry.register_callback "
                       "or the entrena.callbacks entry point)")
            raise ConfigError(f"train.callbacks: unknown callback {name!r}; {choices}{hint}")


def build_callbacks(names: Sequence[str]) -> list[Callback]:
    """One new callback per name, in order.

    Raises:
        ConfigError: An unknown name.
    """
    check_callbacks(names)
    declared = _entry_points()
    return [CALLBACKS[name]() if name in CALLBACKS else declared[name].load()()
            for name in names]
