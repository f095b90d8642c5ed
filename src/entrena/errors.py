"""The one exception hierarchy of entrena.

Every error a user can cause is an :class:`EntrenaError`; the CLI turns it into a one-line
message and an exit code. Classes also subclass the matching built-in, so ``except ValueError``
keeps working for library users.

Exit codes (see docs/architecture.md): 0 ok, 1 internal error, 2 bad input, 3 a check that ran
and failed, 130 interrupted by the user, 143 stopped by a preemption signal.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "closest_choice",
    "EntrenaError",
    "ConfigError",
    "DataError",
    "ResourceError",
    "CheckFailed",
    "Interrupted",
    "NonFiniteError",
    "ModelError",
    "EXIT_OK",
    "EXIT_INTERNAL",
    "EXIT_BAD_INPUT",
    "EXIT_CHECK_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_PREEMPTED",
]

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_BAD_INPUT = 2
EXIT_CHECK_FAILED = 3
EXIT_INTERRUPTED = 130
EXIT_PREEMPTED = 143


class EntrenaError(Exception):
    """Base class of every error entrena raises on purpose.

    Attributes:
        exit_code: The process exit code the CLI uses for this error.
    """

    exit_code: int = EXIT_BAD_INPUT


class ConfigError(EntrenaError, ValueError):
    """The configuration (YAML file, ``--set`` override or Python dict) is invalid."""


class DataError(EntrenaError, ValueError):
    """A data file is missing, unreadable, or does not match the configuration."""


class ResourceError(EntrenaError, RuntimeError):
    """The machine cannot run what was asked (device absent, out of memory, disk full)."""


class CheckFailed(EntrenaError, RuntimeError):
    """A check ran and failed; its outputs were still written."""

    exit_code = EXIT_CHECK_FAILED


class Interrupted(EntrenaError):
    """Training stopped on a signal after saving a resumable checkpoint.

    ``SIGINT`` (Ctrl-C) exits 130; ``SIGTERM`` and ``SIGUSR1`` (preemption notices) exit 143.
    The message says where the checkpoint is; running the same command resumes.

    Attributes:
        signal_name: ``"SIGTERM"``, ``"SIGUSR1"`` or ``"SIGINT"``.
        step: The optimizer step the checkpoint holds.
        signal_to_saved_s: Seconds from the signal to the checkpoint being on disk.
    """

    def __init__(self, message: str, *, signal_name: str, step: int,
                 signal_to_saved_s: float | None = None):
        super().__init__(message)
        self.signal_name = signal_name
        self.step = step
        self.signal_to_saved_s = signal_to_saved_s
        self.exit_code = EXIT_INTERRUPTED if signal_name == "SIGINT" else EXIT_PREEMPTED


class ModelError(EntrenaError, ValueError):
    """A saved model cannot be used as it is (its outputs are not finite: a diverged run)."""


class NonFiniteError(EntrenaError, FloatingPointError):
    """A loss or gradient became NaN or infinite under ``train.on_nonfinite: stop``.

    The last good state and the offending batch were saved; exits 1.
    """

    exit_code = EXIT_INTERNAL


def closest_choice(name: str, choices: Iterable[str]) -> str | None:
    """The choice closest to a mistyped ``name``, for an error's "did you mean …?", or
    ``None`` when none is close (``difflib``'s default similarity cutoff, 0.6).

    Compared case-insensitively, so ``SLURM`` finds ``slurm`` and ``ONNX`` finds ``onnx``
    (the choices themselves stay case-sensitive: the hint gives their spelling).
    """
    import difflib  # only when an error is being worded

    lowered: dict[str, str] = {}
    for choice in choices:
        lowered.setdefault(choice.lower(), choice)
    close = difflib.get_close_matches(name.lower(), list(lowered), n=1)
    return lowered[close[0]] if close else None
