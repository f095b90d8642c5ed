"""The console entrena's tables, progress bars and notices go to: standard error."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

__all__ = ["PIPE_WIDTH", "quiet_transformers", "stderr_console"]

PIPE_WIDTH = 160
"""Columns of a console that is not a terminal (a log file, a pipe, CI) and has no
``COLUMNS`` in the environment: rich's 80 would cut the plan's option names and wrap its
memory figures over four lines."""


def stderr_console() -> Any:
    """A ``rich.console.Console`` on standard error: the terminal's width, else ``COLUMNS``,
    else :data:`PIPE_WIDTH`."""
    from rich.console import Console

    isatty = getattr(sys.stderr, "isatty", None)
    piped = not (isatty and isatty()) and not os.environ.get("COLUMNS")
    return Console(stderr=True, width=PIPE_WIDTH if piped else None)


def quiet_transformers() -> None:
    """transformers' and PEFT's warnings, logs and progress bars off (entrena logs what
    matters), and the tokenizers library single-threaded unless set."""
    import warnings

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"(transformers|peft)\.")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    except ImportError:  # pragma: no cover - older transformers
        pass
