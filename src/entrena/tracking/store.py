"""Opening a tracker's store within a bound: :func:`open_within`.

Apart from :mod:`entrena.tracking.base` (the protocol and the registry, which names the
shipped trackers) so that a tracker module can use it without importing the registry that
imports it.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["STORE_PROBE_TIMEOUT_S", "open_within"]

STORE_PROBE_TIMEOUT_S = 5.0
"""Seconds a tracker waits for its store to open before it warns and turns itself off
(issue 18: a dead SQLite path once cost 104 s of MLflow's retries)."""


def open_within(open_store: Callable[[], object], timeout_s: float = STORE_PROBE_TIMEOUT_S
                ) -> None:
    """Call ``open_store()`` in a daemon thread and wait for it at most ``timeout_s`` seconds.

    Args:
        open_store: Opens (and closes) the tracker's store once, with the client's own
            timeouts as short as it allows.
        timeout_s: The bound, in seconds.

    Raises:
        TimeoutError: It did not return in time (the thread is left to finish alone).
        Exception: What ``open_store`` raised.
    """
    import threading

    outcome: list[BaseException | None] = []

    def attempt() -> None:
        try:
            open_store()
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            outcome.append(exc)

    thread = threading.Thread(target=attempt, name="entrena-tracking-probe", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if not outcome:
        raise TimeoutError(f"no answer in {timeout_s:g} s")
    if outcome[0] is not None:
        raise outcome[0]
