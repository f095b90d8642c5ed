"""Stop cleanly on a signal (preemption notice, ``scancel``, Ctrl-C) or at a time limit.

:class:`Preemption` turns SIGTERM, SIGUSR1 and SIGINT into "finish this step, save a
checkpoint, leave": the handler only records the signal; at the next step boundary the
callback marks the fit interrupted and asks the loop for a checkpoint. A second SIGINT
restores Python's default (``KeyboardInterrupt``), so Ctrl-C twice still quits at once.

:class:`TimeLimit` ends training for good after ``train.max_time`` (summed over resumed
sessions), with a final evaluation, checkpoint and best-weights restore like ``max_steps``.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from entrena.core.callback import Callback
from entrena.core.state import TrainState

__all__ = ["Preemption", "TimeLimit", "SIGNALS"]

log = logging.getLogger("entrena")

SIGNALS = ("SIGTERM", "SIGUSR1", "SIGINT")
"""The signals :class:`Preemption` handles (those the platform has)."""


class Preemption(Callback):
    """Records the first stop signal and interrupts the fit at the next step boundary.

    Use :meth:`installed` around the fit; outside it the previous handlers are in place.

    Attributes:
        signal_name: The first signal received (``"SIGTERM"`` …), or ``""``.
        received_at: ``time.monotonic()`` when it arrived (to measure time to saved).
    """

    def __init__(self) -> None:
        self.signal_name = ""
        self.received_at: float | None = None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if not self.signal_name:
            self.signal_name, self.received_at = name, time.monotonic()
            if name == "SIGINT":  # a second Ctrl-C quits at once
                signal.signal(signal.SIGINT, signal.default_int_handler)
            log.warning("%s received: saving a checkpoint after the current step%s", name,
                        " (Ctrl-C again to quit without saving)" if name == "SIGINT" else "")

    def request(self, name: str) -> None:
        """Act as if signal ``name`` arrived (for callers that learn of preemption otherwise)."""
        if not self.signal_name:
            self.signal_name, self.received_at = name, time.monotonic()

    @contextmanager
    def installed(self) -> Iterator[Preemption]:
        """Install the handlers (main thread only; elsewhere signals keep their defaults)."""
        if threading.current_thread() is not threading.main_thread():
            log.debug("not in the main thread: stop signals are not handled")
            yield self
            return
        try:
            for name in SIGNALS:
                number = getattr(signal, name, None)
                if number is not None:
                    self._previous[number] = signal.signal(number, self._handle)
            yield self
        finally:
            for number, previous in self._previous.items():
                signal.signal(number, previous)
            self._previous.clear()

    def on_step_end(self, state: TrainState) -> None:
        if self.signal_name and not state.interrupted:
            state.interrupted = self.signal_name
            state.checkpoint_due = self.signal_name


class TimeLimit(Callback):
    """Stops training after ``limit_s`` seconds of fitting, counted across resumed sessions.

    Args:
        limit_s: The budget in seconds (``train.max_time``).
        clock: Monotonic seconds (tests pass a fake one).
    """

    def __init__(self, limit_s: float, clock: Callable[[], float] = time.monotonic):
        self.limit_s = limit_s
        self.clock = clock
        self.elapsed_before_s = 0.0
        self._started: float | None = None

    def elapsed_s(self) -> float:
        """Seconds of fitting so far, earlier sessions included."""
        if self._started is None:
            return self.elapsed_before_s
        return self.elapsed_before_s + (self.clock() - self._started)

    def on_fit_start(self, state: TrainState) -> None:
        self._started = self.clock()

    def on_batch_end(self, state: TrainState) -> None:
        if (state.extras.get("last_micro") and not state.should_stop
                and self.elapsed_s() >= self.limit_s):
            state.should_stop, state.stop_reason = True, "max_time"
            log.info("train.max_time reached after %.0fs: stopping", self.elapsed_s())

    def state_dict(self) -> dict[str, Any]:
        return {"elapsed_s": self.elapsed_s()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.elapsed_before_s = float(state.get("elapsed_s", 0.0))
