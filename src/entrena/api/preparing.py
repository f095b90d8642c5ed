"""``entrena.prepare``: read, check, split and encode the data once; write the data report.

``entrena train`` goes through the same :func:`prepare_data`, which hands the work to the
config's task (:func:`entrena.tasks.base.get_task`): each task package reads, checks, splits
and encodes its own data (text through a cache keyed on a fingerprint of the files, the
``data`` section, the seed and the tokenizer).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from entrena.config import Config, LoadedConfig
from entrena.core.files import write_json_atomic
from entrena.core.rundir import RunPaths, resolve_run_dir
from entrena.errors import CheckFailed
from entrena.tasks.registry import get_task, load_config

__all__ = ["DataCheckFailed", "PrepareResult", "prepare", "prepare_data",
           "resolve_model_sources", "report_table", "check_failure",
           "write_report"]

log = logging.getLogger("entrena")


class DataCheckFailed(CheckFailed):
    """A data check set to ``error`` found something (exit code 3); the report was written.

    Attributes:
        report: The data report.
    """

    def __init__(self, message: str, report: dict[str, Any]):
        super().__init__(message)
        self.report = report


@dataclass
class PrepareResult:
    """What ``entrena.prepare`` produced.

    Attributes:
        run_dir: The run directory of the config.
        report: The data report (also in ``report_path`` when it was written).
        report_path: ``<run_dir>/data_report.json``, or ``None`` when the directory holds a
            training run whose report was left as it was.
        data: The task's prepared data (text: splits, token ids, tokenizer).
    """

    run_dir: Path
    report: dict[str, Any]
    report_path: Path | None
    data: Any





def resolve_model_sources(loaded: LoadedConfig) -> dict[str, str]:
    """Resolve the task's model names and files before any data is read (errors first).

    Returns:
        What the task needs to find its model again (text: ``{"tokenizer": …}`` and, for
        pretrained weights, ``"weights"``).
    """
    return get_task(loaded.config.task).model_sources(loaded)


def prepare_data(loaded: LoadedConfig, sources: dict[str, str]) -> Any:
    """Read, check, split and encode the config's data, as its task does it.

    Args:
        loaded: The loaded config.
        sources: From :func:`resolve_model_sources`.

    Returns:
        The task's prepared data (:class:`entrena.tasks.base.Prepared`). Failed checks are in
        ``report["checks"]`` (see :func:`check_failure`); nothing is raised for them here.

    Raises:
        DataError: A file is missing, unreachable, empty, undecodable or unparsable, a column
            is missing, labels mix numbers and strings, fewer than 2 classes, bad rows or
            unseen labels under ``error``, or a validation split that cannot be made.
    """
    return get_task(loaded.config.task).prepare(loaded, sources)


def check_failure(report: dict[str, Any], report_path: Path | None) -> DataCheckFailed | None:
    """The error for the checks that failed (``error`` policies), or ``None``."""
    failed = [c for c in report.get("checks", []) if c["status"] == "failed"]
    if not failed:
        return None
    where = f"; the report is in {report_path}" if report_path else ""
    what = "; ".join(f"{c['check']}: {c['message']}" for c in failed)
    names = ", ".join(f"data.checks.{c['check']}" for c in failed)
    return DataCheckFailed(f"data check failed: {what}{where}; fix the data, or set {names} "
                           "to warn (or drop)", report)


def write_report(paths: RunPaths, report: dict[str, Any], *, only_if_untrained: bool) -> bool:
    """Write ``data_report.json`` into the run directory (created if needed).

    Args:
        only_if_untrained: Leave the report of a directory that holds a training run
            (``status.json``) as it is.

    Returns:
        Whether it was written.
    """
    if only_if_untrained and paths.status.is_file():
        log.warning("%s holds a training run; its data_report.json (the data it trained on) "
                    "is left as it is; pass --run-dir to write this report elsewhere",
                    paths.root)
        return False
    paths.root.mkdir(parents=True, exist_ok=True)
    write_json_atomic(paths.data_report, report, durable=False)
    return True


def report_table(report: dict[str, Any]) -> Any:
    """The data report as a Rich renderable: a table per split, then the checks."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    splits = report["splits"]
    roles = [r for r in ("train", "validation", "test") if r in splits]
    table = Table(title="data", title_justify="left", show_header=True)
    table.add_column("")
    for role in roles:
        table.add_column(role, justify="right")

    def row(label: str, value: Any) -> None:
        try:  # a task's report may lack a row's keys (images have no empty texts)
            table.add_row(label, *[value(splits[r]) for r in roles])
        except KeyError:
            pass

    row("rows read", lambda s: f"{s['rows_read']:,}" + (" (split)" if s["file"] is None
                                                          else ""))
    row("rows kept", lambda s: f"{s['rows_kept']:,}")
    row("bad files skipped", lambda s: f"{s['bad_files']:,}")
    table_rows = report.get("features") is not None  # rows of feature columns, not texts
    row("empty row / label" if table_rows else "empty text / label",
        lambda s: f"{s['empty_text']:,} / {s['empty_label']:,}")
    # One name, one count: the split keys count repeated texts under any label; the checks
    # (and their messages) count repeats of text and label, under their own names.
    row("exact_duplicates (any label)", lambda s: f"{s['exact_duplicates']:,}")
    row("  exact_duplicates_same_label", lambda s: _count(s, "exact_duplicates_same_label"))
    if not table_rows:  # table rows are compared exactly: nothing to normalise
        row("normalised_duplicates (any label)", lambda s: f"{s['normalised_duplicates']:,}")
        row("  normalised_duplicates_same_label",
            lambda s: _count(s, "normalised_duplicates_same_label"))
    row("conflicting-label rows", lambda s: f"{s['conflicting_label_rows']:,}")
    row("leaked rows (train ↔ val/test)", lambda s: f"{s['leaked_rows']:,}")
    row("unseen-label rows", lambda s: f"{s['unseen_label_rows']:,}")
    if table_rows:
        row("unseen categories", lambda s: f"{sum(s.get('unseen_categories', {}).values()):,}")
    # LLM chats: rows without a question and its answer, skipped and listed
    row("empty answer / no user turn",
        lambda s: f"{s['empty_response']:,} / {s['no_user_turn']:,}")
    encoding = report.get("encoding")
    if encoding:
        row(f"truncated at {encoding['max_length']} tokens",
            lambda s: f"{s.get('truncated_fraction', 0):.1%}")
        row("  earlier turns dropped / question cut",
            lambda s: f"{s['turns_dropped_rows']:,} / {s['prompt_cut_rows']:,}")
        row("tokens: median / p95",
            lambda s: "{:.0f} / {:.0f}".format(s["token_length"].get("median", 0),
                                               s["token_length"].get("p95", 0)))
    if report.get("target"):  # a number to predict
        row("target mean (min - max)",
            lambda s: "{:.4g} ({:.4g} - {:.4g})".format(s["target"]["mean"], s["target"]["min"],
                                                       s["target"]["max"])
            if s.get("target", {}).get("mean") is not None else "-")
        row("targets outside training range", lambda s: f"{s.get('outside_training_range', 0):,}")
    shown, hidden = _labels_shown(report)
    for name in shown:
        row(f"label {name}", lambda s, n=name: f"{s['label_counts'].get(n, 0):,}")
    if hidden:
        row(f"{len(hidden)} more labels",
            lambda s: f"{sum(s['label_counts'].get(n, 0) for n in hidden):,}")
    lines: list[Table | Text] = [table]
    ratio = report.get("imbalance_ratio")
    features = report.get("features")
    notes = [f"imbalance ratio {ratio:.2f}" if ratio else None,
             f"{len(features['numeric'])} numeric and {len(features['categorical'])} "
             f"categorical columns, {features['width']} features" if features else None,
             f"max_length {encoding['max_length']} ({encoding['max_length_from']})"
             if encoding else None,
             _images_note(report.get("images")),
             "from the cache" if report.get("from_cache") else None]
    lines.append(Text("; ".join(n for n in notes if n)))
    for check in report.get("checks", []):
        if check["status"] != "ok":
            style = {"failed": "bold red", "warning": "yellow", "dropped": "cyan",
                     "clipped": "cyan", "read": "cyan"}[check["status"]]
            lines.append(Text.assemble((f"{check['status']:>8}", style),
                                       f"  {check['check']}: {check['message']}"))
    return Group(*lines)


LABELS_SHOWN = 20
"""Labels listed one per row in the data table; more are summed in one row (all are in
``data_report.json``)."""


def _labels_shown(report: dict[str, Any]) -> tuple[list[str], list[str]]:
    """``(labels given a row, the rest)``: the :data:`LABELS_SHOWN` most frequent training
    labels when there are more, in label order."""
    names = list(report["labels"])
    if len(names) <= LABELS_SHOWN:
        return names, []
    counts = ((report.get("splits") or {}).get("train") or {}).get("label_counts") or {}
    top = set(sorted(names, key=lambda n: -counts.get(n, 0))[:LABELS_SHOWN])
    return [n for n in names if n in top], [n for n in names if n not in top]


def _count(split: dict[str, Any], key: str) -> str:
    """A count the split may lack (validation and test have no training checks): ``–``."""
    return f"{split[key]:,}" if key in split else "–"


def _images_note(images: dict[str, Any] | None) -> str | None:
    """``1 x 8 x 8 images (…), decoded cache`` for an image report, else ``None``."""
    if not images:
        return None
    side = images["image_size"]
    return (f"{images['channels']} x {side} x {side} images ({images['image_size_from']})"
            + (", decoded cache" if images.get("decoded_cache") else ""))


def _print(console: Any, renderable: Any) -> None:
    if console is None:
        from entrena.core.console import stderr_console

        console = stderr_console()
    console.print(renderable, soft_wrap=True)


def prepare(config: str | Path | dict[str, Any] | Config, *, run_dir: str | Path | None = None,
            overrides: list[str] | dict[str, Any] | None = None, console: Any = None,
            quiet: bool = False) -> PrepareResult:
    """Read, check, split and encode the data as the config says; write the data report.

    Args:
        config: A YAML file, a dict, or a :class:`~entrena.config.Config`.
        run_dir: The run directory whose ``data_report.json`` is written; default
            ``runs/<name>``. A directory that holds a training run keeps its report.
        overrides: ``--set`` style overrides (``["data.checks.leakage=error"]`` or a dict).
        console: A ``rich.console.Console`` for the table (default: one on stderr).
        quiet: Print nothing.

    Returns:
        The report, where it was written, and the prepared data.

    Raises:
        ConfigError: The config is invalid or names an unknown model.
        DataError: The data is missing, unreadable or inconsistent (see :func:`prepare_data`).
        CheckFailed: A check set to ``error`` found something; the report was written first.
    """
    loaded = load_config(config, overrides)
    sources = resolve_model_sources(loaded)
    paths = RunPaths(resolve_run_dir(loaded.config.name, run_dir))
    data = prepare_data(loaded, sources)
    written = write_report(paths, data.report, only_if_untrained=True)
    if not quiet:
        _print(console, report_table(data.report))
    report_path = paths.data_report if written else None
    failure = check_failure(data.report, report_path)
    if failure is not None:
        raise failure
    return PrepareResult(paths.root, data.report, report_path, data)
