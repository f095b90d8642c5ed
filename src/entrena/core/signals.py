"""Stop signals as an exception raised where the program is, but never inside an import.

A Python signal handler runs between two bytecodes of whatever the main thread is doing.
Raising from it there is what makes "stop at once, say what is saved" work outside the fit,
but an exception that lands inside an import is not always an exception any more: Python
3.11 wraps one raised during a class's ``__set_name__`` (pydantic models are built at
import) in a ``RuntimeError``, and one raised in a Python function that C++ called where
it cannot pass an exception on ends the process (``std::terminate``: exit -6 with pybind11's
``At:`` trace of the Python stack). Both were seen with a SIGTERM 0.3-4 s after
``entrena train`` started, while its libraries were being imported (``benchmarks/chaos.py``:
the first in 1 of 160 tries here, the second once in CI).

So :func:`stop_signals` defers a signal that arrives while an import is on the main thread's
stack: it sends the same signal again :data:`REDELIVER_S` later, until no import is running,
and only then raises :class:`StopSignal`. A wrapper that still turns one into another error
is undone on the way out (:func:`stop_in`). Standard library only, so that the command line
installs it before it imports anything heavy.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = ["REDELIVER_S", "STOP_SIGNALS", "StopSignal", "importing", "stop_in",
           "stop_signals"]

STOP_SIGNALS = ("SIGTERM", "SIGUSR1", "SIGINT")
"""The signals that mean "stop": SIGTERM and SIGUSR1 (preemption notices of schedulers and
spot instances), SIGINT (Ctrl-C)."""

REDELIVER_S = 0.02
"""Seconds between two tries to deliver a signal deferred by an import: short against a
preemption notice's grace (30 s on GCP spot, 120 s on AWS), long against a handler's cost."""


class StopSignal(BaseException):
    """A stop signal arrived outside the fit (a ``BaseException``, like ``KeyboardInterrupt``,
    so that no ``except Exception`` swallows it).

    Args:
        signal_name: ``"SIGTERM"``, ``"SIGUSR1"`` or ``"SIGINT"``.
    """

    def __init__(self, signal_name: str):
        super().__init__(signal_name)
        self.signal_name = signal_name


def importing(frame: FrameType | None) -> bool:
    """Whether an import runs on the stack that ends at ``frame`` (the frame a signal handler
    is given): any frame of ``importlib``'s frozen bootstrap on the way out."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib."):
            return True
        frame = frame.f_back
    return False


def stop_in(exc: BaseException | None) -> StopSignal | None:
    """The :class:`StopSignal` that ``exc`` is or was raised from, or ``None``: its chain as
    a traceback prints it (``__cause__``, else ``__context__`` unless ``raise … from None``
    suppressed it: an error raised on purpose to report the signal is not the signal)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, StopSignal):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    return None


def _redeliver(signum: int) -> None:
    timer = threading.Timer(REDELIVER_S, signal.raise_signal, (signum,))
    timer.daemon = True
    timer.start()


def _handle(signum: int, frame: FrameType | None) -> None:
    if importing(frame):
        _redeliver(signum)
        return
    raise StopSignal(signal.Signals(signum).name)


@contextmanager
def stop_signals(names: tuple[str, ...] = STOP_SIGNALS) -> Iterator[None]:
    """Inside the block, the signals ``names`` raise :class:`StopSignal` where the main thread
    is (once no import runs); an error that wraps one leaves the block as the
    :class:`StopSignal` itself. The previous handlers are back after the block. On another
    thread than the main one (where Python cannot set handlers) it does nothing.

    Args:
        names: Signal names; those this platform lacks (SIGUSR1 on Windows) are skipped.

    Raises:
        StopSignal: One of ``names`` arrived.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for name in names:
        number = getattr(signal, name, None)
        if number is not None:
            previous[number] = signal.signal(number, _handle)
    try:
        yield
    except BaseException as exc:
        stop = stop_in(exc)
        if stop is None or stop is exc:
            raise
        raise StopSignal(stop.signal_name) from None
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
