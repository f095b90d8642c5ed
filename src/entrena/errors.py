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
    "closest_choices",
    "HINT_CUTOFF",
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


HINT_CUTOFF = 0.6
"""How alike (``difflib`` ratio, 0–1) a mistyped name must be to a choice for an error to
say "did you mean …?": ``difflib``'s own default, for every hint. Compound names that users
type a part of (hardware catalog entries, LLM names, config keys: ``warmup`` for
``warmup_fraction``) add ``fragments=True`` rather than a lower cutoff. The catalog's 0.3 of
before offered unrelated entries (``spot``, ``mi300``, ``trn1`` → ``gcp-t4``, ``RTX-3090``,
``T4``; only ``awsp3`` → ``aws-p3.2xlarge`` is lost), the config keys' 0.5 too (``text_col``
→ ``test``); containment finds ``p4d``, ``qwen``, ``warmup``."""


def closest_choices(name: str, choices: Iterable[str], *, n: int = 1,
                    cutoff: float = HINT_CUTOFF, fragments: bool = False) -> list[str]:
    """The (at most ``n``) choices closest to a mistyped ``name``, closest first, for an
    error's "did you mean …?"; empty when none is close.

    Compared case-insensitively, so ``SLURM`` finds ``slurm`` and ``ONNX`` finds ``onnx``
    (the choices themselves stay case-sensitive: the hint gives their spelling).

    Args:
        name: What was given.
        choices: The valid names.
        n: How many to return at most.
        cutoff: The ``difflib`` similarity a choice needs (:data:`HINT_CUTOFF`; a decision
            that is not a hint may ask for more).
        fragments: Also take a choice that contains ``name`` (of 3 characters or more: ``a``
            would be in most) or is contained in it, the nearest in length first, before the
            ``difflib`` matches; for compound names users type a part of.
    """
    import difflib  # only when an error is being worded

    lowered: dict[str, str] = {}
    for choice in choices:
        lowered.setdefault(choice.lower(), choice)
    key = name.lower()
    close = [lowered[match] for match in difflib.get_close_matches(
        key, list(lowered), n=n + 2 if fragments else n, cutoff=cutoff)]
    if fragments:
        containing = [choice for low, choice in lowered.items()
                      if (len(key) >= 3 and key in low) or (low and low in key)]
        close = sorted(containing, key=lambda choice: abs(len(choice) - len(name))) + close
    return list(dict.fromkeys(close))[:n]


def closest_choice(name: str, choices: Iterable[str], *, cutoff: float = HINT_CUTOFF,
                   fragments: bool = False) -> str | None:
    """The choice closest to a mistyped ``name``, or ``None`` when none is close
    (:func:`closest_choices` with ``n=1``: case-insensitive, :data:`HINT_CUTOFF`)."""
    found = closest_choices(name, choices, cutoff=cutoff, fragments=fragments)
    return found[0] if found else None
