"""Rows of ``task: llm-sft`` as chats: read a file's rows and turn each into the prompt's
turns and the response to learn.

A row becomes ``(prompt messages, response text)``:

- ``messages`` (JSONL, the OpenAI chat format): the turns before the last one are the
  prompt, the last one must be the assistant's and is the response;
- ``prompt_completion``: ``[system?] + user(prompt)`` → ``completion``;
- ``template``: ``[system?] + user(prompt_template.format(**row))`` → ``response_column``.

Rows that hold no question and its answer are bad rows (:data:`BAD_ROWS`): an empty or
whitespace-only response, or (``messages``) an assistant turn with no user turn before it.
They are named by line with the fix, then skipped and listed (``data.on_bad_rows: skip``)
or refused together (``error``). A malformed conversation (not a list of turns, an unknown
role, no assistant turn, not ending with the assistant's) is always refused.
"""

from __future__ import annotations

import logging
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from entrena.data.sources import json_object
from entrena.errors import ConfigError, DataError

__all__ = ["ROLES", "BAD_ROWS", "SftExample", "ChatRows", "template_fields", "read_rows",
           "data_format", "chat_rows", "row_examples", "is_empty"]

log = logging.getLogger("entrena")

ROLES = ("system", "user", "assistant")
"""The roles a ``messages`` turn may have."""

BAD_ROWS = {
    "empty_response": ("the final assistant turn is empty (blank or whitespace), so there is "
                       "nothing to learn", "write the answer in it or remove the {unit}"),
    "no_user_turn": ("the assistant turn has no user turn before it, so it answers nothing",
                     "add the user's question before it or remove the {unit}"),
}
"""Kind of bad row → (what is wrong, how to fix it); ``{unit}`` is ``line`` or ``row``."""

REPORTED_ROWS = 100
"""Row numbers listed in the data report per kind of skipped row (all are counted)."""


@dataclass
class SftExample:
    """One row as a chat: the prompt turns and the response to learn.

    Attributes:
        messages: The prompt's turns (``{"role", "content"}``), without the response.
        response: The response text (the EOS token is added at tokenization).
        where: ``file:line`` (JSONL) or ``file: row n`` for messages.
        row: The source row (template fields), for the prompt cut and predictions.
    """

    messages: list[dict[str, str]]
    response: str
    where: str
    row: dict[str, Any] = field(default_factory=dict)


@dataclass
class ChatRows:
    """A file's rows as examples, and the bad rows left out.

    Attributes:
        examples: The examples, in row order.
        numbers: Each example's row (JSONL line) number, 1-based.
        skipped: Kind of bad row (:data:`BAD_ROWS`) → its row numbers (every one).
    """

    examples: list[SftExample]
    numbers: list[int]
    skipped: dict[str, list[int]] = field(default_factory=dict)


def template_fields(template: str, key: str = "data.prompt_template") -> list[str]:
    """The column names a format string uses.

    Raises:
        ConfigError: The template is not a valid format string, or uses a positional
            field (``{}``).
    """
    try:
        names = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    except ValueError as exc:
        raise ConfigError(f"{key} = {template!r} is not a Python format string ({exc}); name "
                          "columns in braces, write a literal brace as {{ or }}") from None
    fields = []
    for name in names:
        base = name.split(".")[0].split("[")[0]
        if not base or base.isdigit():
            raise ConfigError(f"{key} = {template!r} has a field without a column name "
                              f"({{{name}}}); write {{column}} with a column of the data")
        if base not in fields:
            fields.append(base)
    return fields


def read_rows(path: Path, name: str, fmt: str, *, key: str, encoding: str | None,
              delimiter: str | None) -> list[tuple[int, dict[str, Any]]]:
    """Rows of one file as ``(row number, {column: value})``: JSONL lines as parsed (nested
    values kept), CSV/TSV/Parquet rows with their values as strings or numbers.

    Row numbers are 1-based JSONL lines, or data rows (the header not counted).

    Raises:
        DataError: A line is not a JSON object, or the file cannot be parsed.
    """
    if fmt == "jsonl":
        rows = []
        with path.open("r", encoding=encoding or "utf-8", newline="") as handle:
            for number, line in enumerate(handle, start=1):
                record = json_object(line, number, f"{key}: {name}")
                if record is not None:
                    rows.append((number, record))
        return rows
    import pandas as pd

    try:
        if fmt == "parquet":
            frame = pd.read_parquet(path)
        else:
            frame = pd.read_csv(path, sep=delimiter or ",", encoding=encoding or "utf-8",
                                dtype=str, keep_default_na=False)
    except (ValueError, OSError, pd.errors.ParserError) as exc:
        from entrena.data.sources import CSV_FIX, PARQUET_FIX

        fix = PARQUET_FIX if fmt == "parquet" else CSV_FIX
        reason = (str(exc).splitlines() or [type(exc).__name__])[0].rstrip(".")
        raise DataError(f"{key}: {name}: cannot be read as {fmt.upper()}: {reason}; {fix}"
                        ) from None
    frame.columns = [str(c).strip() for c in frame.columns]
    return [(i + 1, row) for i, row in enumerate(frame.to_dict("records"))]


def is_empty(value: Any) -> bool:
    """A missing value: ``None``, NaN or blank text."""
    return value is None or (isinstance(value, float) and np.isnan(value)) or \
        (isinstance(value, str) and not value.strip())


def _check_messages(value: Any, where: str, column: str) -> tuple[list[dict[str, str]], str]:
    """``(prompt turns, response)`` of one conversation.

    Raises:
        DataError: Not a list of ``{"role", "content"}`` objects, an unknown role, no
            assistant turn, or a conversation not ending with the assistant's turn.
    """
    fix = (f"write {column!r} as a list of {{\"role\": \"system\"|\"user\"|\"assistant\", "
           f"\"content\": \"...\"}} ending with the assistant turn to learn")
    if not isinstance(value, list) or not value:
        raise DataError(f"{where}: {column!r} is {type(value).__name__}, not a non-empty list "
                        f"of turns; {fix}")
    turns = []
    for number, turn in enumerate(value, start=1):
        if not isinstance(turn, dict) or not isinstance(turn.get("content"), str):
            raise DataError(f"{where}: turn {number} of {column!r} is not an object with a "
                            f"string 'content'; {fix}")
        role = turn.get("role")
        if role not in ROLES:
            raise DataError(f"{where}: turn {number} has role {role!r}; roles are "
                            f"{', '.join(ROLES)}; {fix}")
        turns.append({"role": role, "content": turn["content"]})
    if not any(t["role"] == "assistant" for t in turns):
        raise DataError(f"{where}: the conversation has no assistant turn, so there is nothing "
                        f"to learn; {fix}")
    if turns[-1]["role"] != "assistant":
        raise DataError(f"{where}: the conversation ends with a {turns[-1]['role']} turn; "
                        f"{fix} (later turns are not learned)")
    return turns[:-1], turns[-1]["content"]


def _bad_row(prompt: list[dict[str, str]], response: Any, fmt: str) -> str | None:
    """The kind of bad row (:data:`BAD_ROWS`) a row is, or ``None`` for a good one."""
    if is_empty(response):
        return "empty_response"
    if fmt == "messages" and not any(turn["role"] == "user" for turn in prompt):
        return "no_user_turn"
    return None


def _rows_words(numbers: list[int], unit: str, limit: int = 10) -> str:
    """``"line 5"``, ``"lines 5, 7"``, ``"lines 5, 7, … and 12 more"``."""
    shown = ", ".join(str(n) for n in numbers[:limit])
    more = f" and {len(numbers) - limit} more" if len(numbers) > limit else ""
    return f"{unit}{'s' if len(numbers) > 1 else ''} {shown}{more}"


def _bad_rows_line(where: str, kind: str, numbers: list[int], unit: str,
                   column: str | None) -> str:
    """``"data.train: f.jsonl: lines 5, 7: <what is wrong>; <fix>"``; ``column``: the
    response column of a format that reads columns (``None`` for ``messages``)."""
    what, fix = BAD_ROWS[kind]
    if kind == "empty_response" and column is not None:
        what = (f"the response ({column!r}) is empty (blank or whitespace), so there is "
                "nothing to learn")
        fix = "write the response or remove the {unit}"
    return f"{where}: {_rows_words(numbers, unit)}: {what}; {fix.format(unit=unit)}"


def data_format(data: Any, first_row: dict[str, Any] | None) -> str:
    """The format a config's data is read in (see ``data.format``)."""
    if data.prompt_template is not None:
        return "template"
    if data.format != "auto":
        return str(data.format)
    if first_row is not None and data.messages_column in first_row:
        return "messages"
    return "prompt_completion"


def row_examples(rows: list[tuple[int, dict[str, Any]]], data: Any, fmt: str, *, name: str,
                 key: str, on_bad_rows: str) -> tuple[list[SftExample], list[int]]:
    """``(examples, row numbers of the examples)`` of :func:`chat_rows`."""
    found = chat_rows(rows, data, fmt, name=name, key=key, on_bad_rows=on_bad_rows)
    return found.examples, found.numbers


def chat_rows(rows: list[tuple[int, dict[str, Any]]], data: Any, fmt: str, *, name: str,
              key: str, on_bad_rows: str) -> ChatRows:
    """Turn rows into examples. Bad rows (:data:`BAD_ROWS`: an empty response, a lone
    assistant turn) are skipped, listed and warned about by line with the fix, or, with
    ``on_bad_rows: error``, refused together.

    Returns:
        The examples, their row numbers and the skipped rows by kind.

    Raises:
        DataError: A missing column, a template naming a missing column, a malformed
            conversation, or bad rows under ``on_bad_rows: error`` (every one named).
    """
    columns: list[str] = sorted({c for _, row in rows for c in row}) if rows else []
    present = ", ".join(repr(c) for c in columns) or "none"

    def need(column: str, config_key: str) -> None:
        if column not in columns:
            raise DataError(f"{key}: {name}: {config_key} = {column!r} is not a column of the "
                            f"data; columns are: {present}; set {config_key} to one of them")

    system = ([{"role": "system", "content": data.system_prompt}]
              if data.system_prompt else [])
    if fmt == "template":
        if not data.response_column:
            raise ConfigError("data.response_column: the template format needs the column "
                              "holding the response to learn; set data.response_column")
        for column in template_fields(data.prompt_template):
            if column not in columns:
                raise DataError(f"{key}: {name}: data.prompt_template names column {column!r}, "
                                f"which the data lacks; columns are: {present}; fix the "
                                f"template or the data")
        need(data.response_column, "data.response_column")
    elif fmt == "prompt_completion":
        need(data.prompt_column, "data.prompt_column")
        need(data.completion_column, "data.completion_column")
    unit = "line" if name.endswith(".jsonl") else "row"
    found = ChatRows([], [])
    for number, row in rows:
        where = f"{key}: {name}: {unit} {number}"
        response: object  # a column's value: any JSON value, None when missing
        if fmt == "messages":
            if data.messages_column not in row:
                raise DataError(f"{where} has no {data.messages_column!r} (keys: "
                                f"{', '.join(map(repr, row)) or 'none'}); every line of the "
                                f"messages format needs one, or set data.prompt_template and "
                                f"data.response_column to read columns instead")
            prompt, response = _check_messages(row[data.messages_column], where,
                                               data.messages_column)
        elif fmt == "template":
            values = {c: ("" if is_empty(row.get(c)) else row.get(c)) for c in row}
            prompt = system + [{"role": "user",
                                "content": data.prompt_template.format(**values)}]
            response = row.get(data.response_column)
        else:
            prompt = system + [{"role": "user", "content": str(row.get(data.prompt_column, ""))}]
            response = row.get(data.completion_column)
        bad = _bad_row(prompt, response, fmt)
        if bad is not None:
            found.skipped.setdefault(bad, []).append(number)
            continue
        found.examples.append(SftExample(prompt, str(response), where, row))
        found.numbers.append(number)
    response_column = (None if fmt == "messages" else data.response_column
                       if fmt == "template" else data.completion_column)
    lines = [_bad_rows_line(f"{key}: {name}", kind, numbers, unit, response_column)
             for kind, numbers in found.skipped.items()]
    if lines and on_bad_rows == "error":
        raise DataError("; ".join(lines) + "; or set data.on_bad_rows: skip to leave such "
                        f"{unit}s out")
    for line in lines:
        log.warning("%s (skipped: data.on_bad_rows: skip; the data report lists them)", line)
    return found
