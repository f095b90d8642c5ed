"""The callback base class: one no-op method per event, plus state for resume."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from entrena.core.state import TrainState

__all__ = ["Callback"]


class Callback:
    """Reacts to loop events. Override only the methods you need.

    Every method receives the mutable :class:`~entrena.core.state.TrainState`. A callback that
    keeps state returns it from :meth:`state_dict` so a resumed run restores it.
    """

    def on_fit_start(self, state: TrainState) -> None: ...
    def on_epoch_start(self, state: TrainState) -> None: ...
    def on_batch_start(self, state: TrainState) -> None: ...
    def on_after_backward(self, state: TrainState) -> None: ...
    def on_batch_end(self, state: TrainState) -> None: ...
    def on_eval_start(self, state: TrainState) -> None: ...
    def on_eval_end(self, state: TrainState) -> None: ...
    def on_step_end(self, state: TrainState) -> None: ...
    def on_epoch_end(self, state: TrainState) -> None: ...
    def on_checkpoint(self, state: TrainState) -> None: ...
    def on_fit_end(self, state: TrainState) -> None: ...

    def state_dict(self) -> dict[str, Any]:
        """State to save in a checkpoint (plain Python values and CPU tensors)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
