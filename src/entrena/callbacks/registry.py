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

from entrena.core.callback import Callback
from entrena.core.registry import Registry

__all__ = ["CALLBACKS", "ENTRY_POINT_GROUP", "REGISTRY", "register_callback", "callback_names",
           "check_callbacks", "build_callbacks"]

ENTRY_POINT_GROUP = "entrena.callbacks"
"""Callbacks other packages declare: ``[project.entry-points."entrena.callbacks"]`` with
``<name> = "module:ClassOrFactory"``."""

REGISTRY: Registry[Callable[[], Callback]] = Registry(
    "callback", "train.callbacks", entry_point_group=ENTRY_POINT_GROUP,
    none_known="no callback is registered (entrena.callbacks.registry.register_callback or "
               "the entrena.callbacks entry point)")
"""Callback factories by name (:class:`~entrena.core.registry.Registry`)."""

CALLBACKS: dict[str, Callable[[], Callback]] = REGISTRY.registered
"""Registered callbacks: name → a factory (a class or a function) called once per run."""


def register_callback(name: str, factory: Callable[[], Callback]) -> None:
    """Add (or replace) the callback ``name``; ``factory()`` makes one for a run."""
    REGISTRY.register(name, factory)


def callback_names() -> list[str]:
    """Every callback name known (registered or declared by an installed package), sorted."""
    return REGISTRY.names()


def check_callbacks(names: Sequence[str]) -> None:
    """Refuse a ``train.callbacks`` name nothing is registered under (checked before any data
    is read).

    Raises:
        ConfigError: An unknown name (the known ones, or that there are none, and the closest).
    """
    REGISTRY.check(names)


def build_callbacks(names: Sequence[str]) -> list[Callback]:
    """One new callback per name, in order.

    Raises:
        ConfigError: An unknown name.
    """
    check_callbacks(names)
    return [REGISTRY.get(name)() for name in names]
