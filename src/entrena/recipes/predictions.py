"""``predictions/<role>.csv``: the per-row predictions of the run's evaluation splits.

The recipe scores validation (and test) once more with the weights it keeps; a task with a
``prediction_table`` hook turns those outputs into a table (for classifiers
:func:`entrena.tasks.predictions.classification_table`), written here as UTF-8 CSV (temp file
+ rename) and summed up for ``metrics.json`` (file, rows, mistakes, the most confident ones).
A task without the hook writes none; nothing here names a task.
"""

from __future__ import annotations

import io
import logging
from operator import methodcaller
from pathlib import Path
from typing import Any

from entrena.config import LoadedConfig
from entrena.core.files import write_atomic
from entrena.tasks.base import AnyTask, Prepared
from entrena.tasks.predictions import most_confident_mistakes

__all__ = ["write_predictions"]

log = logging.getLogger("entrena")


def write_predictions(task: AnyTask, loaded: LoadedConfig, prepared: Prepared,
                      scored: dict[str, tuple[Any, Any]], folder: Path) -> dict[str, Any]:
    """Write ``folder/<role>.csv`` for each scored split.

    Args:
        task: The task (its optional ``prediction_table(loaded, prepared, role, outputs,
            targets)`` makes the table).
        scored: ``role -> (outputs (N, ...), targets (N, ...))`` in example order.
        folder: The run's ``predictions/`` folder.

    Returns:
        ``{role: {"file", "rows", "mistakes", "most_confident_mistakes"}}`` (``mistakes`` and
        the list only where the table has a ``correct`` column); empty when the task has no
        hook.
    """
    table_of = getattr(task, "prediction_table", None)
    if table_of is None:
        return {}
    summary: dict[str, Any] = {}
    for role, (outputs, targets) in scored.items():
        frame = table_of(loaded, prepared, role, outputs, targets)
        path = folder / f"{role}.csv"
        buffer = io.StringIO()
        frame.to_csv(buffer, index=False)
        data = buffer.getvalue().encode("utf-8")
        write_atomic(path, methodcaller("write", data), durable=False)
        entry: dict[str, Any] = {"file": f"{folder.name}/{path.name}", "rows": len(frame)}
        if "correct" in frame.columns:
            entry["mistakes"] = int((frame["correct"] == "no").sum())
            entry["most_confident_mistakes"] = most_confident_mistakes(frame)
        summary[role] = entry
        log.info("%s predictions: %s (%d rows%s)", role, path, len(frame),
                 f", {entry['mistakes']} wrong" if "mistakes" in entry else "")
    return summary
