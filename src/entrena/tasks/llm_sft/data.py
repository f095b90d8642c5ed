"""Examples of ``task: llm-sft``: read rows, turn each into a chat prompt and a response,
tokenize with the model's chat template, check, split.

A row becomes ``(prompt messages, response text)``:

- ``messages`` (JSONL, the OpenAI chat format): the turns before the last one are the
  prompt, the last one must be the assistant's and is the response;
- ``prompt_completion``: ``[system?] + user(prompt)`` → ``completion``;
- ``template``: ``[system?] + user(prompt_template.format(**row))`` → ``response_column``.

The prompt is rendered by the tokenizer's chat template with the generation prompt (the
assistant header), exactly as prediction renders it; the response's tokens get the EOS token
appended, so the model learns to stop. Token ids per example: ``prompt + response + [EOS]``
(at most ``model.max_length``), with the prompt's length kept to mask the loss.
"""

from __future__ import annotations

import json
import logging
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from entrena.errors import ConfigError, DataError

__all__ = ["SftExample", "SftSplit", "SftSplits", "PreparedSft", "read_rows", "row_examples",
           "tokenize_example", "prepare_sft", "template_fields", "ROLES"]

log = logging.getLogger("entrena")

ROLES = ("system", "user", "assistant")
"""The roles a ``messages`` turn may have."""

_CUT_MARGIN = 4
"""Extra tokens cut from a too-long prompt text (decoding and re-encoding a cut text can
merge or split a token at the cut)."""


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
class SftSplit:
    """One split, tokenized.

    Attributes:
        prompts: Rendered prompt texts (chat template, generation prompt included), (N,).
        responses: Response texts, (N,).
        input_ids: Token ids per example: prompt + response + EOS, each (L_i,) int64.
        prompt_lengths: Tokens of each prompt, (N,) int64.
        row_ids: Row (JSONL line) numbers in their file, 1-based, (N,).
        truncated: Whether each prompt was cut to fit ``max_length``, (N,) bool.
    """

    prompts: list[str]
    responses: list[str]
    input_ids: list[np.ndarray]
    prompt_lengths: np.ndarray
    row_ids: np.ndarray
    truncated: np.ndarray

    def __len__(self) -> int:
        return len(self.prompts)

    @property
    def labels(self) -> np.ndarray:
        """Example index per example, (N,) int64 (the protocol's per-example ``labels``)."""
        return np.arange(len(self.prompts), dtype=np.int64)

    @property
    def texts(self) -> list[str]:
        """The prompts (what the loop's non-finite report shows of a batch's rows)."""
        return self.prompts

    @property
    def lengths(self) -> np.ndarray:
        """Tokens per example, (N,) int64."""
        return np.array([len(ids) for ids in self.input_ids], dtype=np.int64)

    @property
    def response_lengths(self) -> np.ndarray:
        """Response tokens per example, EOS included, (N,) int64."""
        return self.lengths - self.prompt_lengths

    def subset(self, index: np.ndarray) -> SftSplit:
        index = np.asarray(index, dtype=np.int64)
        return SftSplit([self.prompts[i] for i in index], [self.responses[i] for i in index],
                        [self.input_ids[i] for i in index], self.prompt_lengths[index],
                        self.row_ids[index], self.truncated[index])


@dataclass
class SftSplits:
    """``train``, ``validation``, ``test`` (or ``None``); no classes (``labels`` is empty)."""

    train: SftSplit
    validation: SftSplit
    test: SftSplit | None
    labels: list[str] = field(default_factory=list)

    def roles(self) -> list[tuple[str, SftSplit]]:
        return [(role, split) for role, split in (("train", self.train),
                                                  ("validation", self.validation),
                                                  ("test", self.test)) if split is not None]


@dataclass
class PreparedSft:
    """Tokenized splits, ready to fit.

    Attributes:
        splits: The splits.
        tokenizer: The tokenizer (its chat template renders every prompt).
        max_length: Longest example in tokens (``model.max_length``).
        max_new_tokens: Tokens generated per prompt (the longest training response, EOS
            included, unless configured).
        report: The data report (``data_report.json``).
        from_cache: Always ``False`` (tokenizing short chats takes milliseconds per hundred).
        data_format: ``messages``, ``prompt_completion`` or ``template``.
    """

    splits: SftSplits
    tokenizer: Any
    max_length: int
    max_new_tokens: int
    report: dict[str, Any]
    from_cache: bool = False
    data_format: str = "messages"
    model_meta: dict[str, Any] = field(default_factory=dict)
    """``entrena_model.json``'s content (set by the task: the format and settings that turn
    a row into a prompt, so that prediction renders prompts as training did)."""


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
                line = line.strip().lstrip("\ufeff")
                if not line:
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DataError(f"{key}: {name}: line {number} is not JSON: {exc.msg} "
                                    f"(column {exc.colno}); write one JSON object per line"
                                    ) from None
                if not isinstance(record, dict):
                    raise DataError(f"{key}: {name}: line {number} is a JSON "
                                    f"{type(record).__name__}, not an object; write one "
                                    "{\"column\": value, …} object per line")
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
        raise DataError(f"{key}: {name}: cannot be read as {fmt.upper()}: "
                        f"{str(exc).splitlines()[0]}; check the file") from None
    frame.columns = [str(c).strip() for c in frame.columns]
    return [(i + 1, row) for i, row in enumerate(frame.to_dict("records"))]


def _empty(value: Any) -> bool:
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
    """Turn rows into examples; rows with an empty response are skipped (or refused with
    ``on_bad_rows: error``).

    Returns:
        ``(examples, row numbers of the examples)``.

    Raises:
        DataError: A missing column, a template naming a missing column, a malformed
            conversation, or an empty response under ``on_bad_rows: error``.
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
    examples, numbers = [], []
    for number, row in rows:
        where = f"{key}: {name}: " + (f"line {number}" if name.endswith(".jsonl")
                                      else f"row {number}")
        if fmt == "messages":
            if data.messages_column not in row:
                raise DataError(f"{where} has no {data.messages_column!r} (keys: "
                                f"{', '.join(map(repr, row)) or 'none'}); every line of the "
                                f"messages format needs one, or set data.prompt_template and "
                                f"data.response_column to read columns instead")
            prompt, response = _check_messages(row[data.messages_column], where,
                                               data.messages_column)
        elif fmt == "template":
            values = {c: ("" if _empty(row.get(c)) else row.get(c)) for c in row}
            prompt = system + [{"role": "user",
                                "content": data.prompt_template.format(**values)}]
            response = row.get(data.response_column)
        else:
            prompt = system + [{"role": "user", "content": str(row.get(data.prompt_column, ""))}]
            response = row.get(data.completion_column)
        if _empty(response):
            if on_bad_rows == "error":
                raise DataError(f"{where}: the response is empty; fill it in, or set "
                                f"data.on_bad_rows: skip to leave such rows out")
            continue
        examples.append(SftExample(prompt, str(response), where, row))
        numbers.append(number)
    return examples, numbers


def render_prompt(tokenizer: Any, messages: list[dict[str, str]]) -> str:
    """The prompt as the model sees it: the chat template with the assistant header."""
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def tokenize_example(tokenizer: Any, example: SftExample, max_length: int, *,
                     template: str | None = None) -> tuple[str, np.ndarray, int, bool]:
    """``(prompt text, ids (L,) int64, prompt tokens, truncated)`` of one example.

    ``ids`` is prompt + response + EOS. A too-long prompt is cut in its longest text (the
    template's longest field, or the last user turn) and rendered again.

    Raises:
        DataError: The response (with EOS) and the prompt's fixed part do not fit
            ``max_length``.
    """
    response = _encode(tokenizer, example.response) + [int(tokenizer.eos_token_id)]
    messages = [dict(m) for m in example.messages]
    row = dict(example.row)
    truncated = False
    for _ in range(3):
        prompt = render_prompt(tokenizer, messages)
        prompt_ids = _encode(tokenizer, prompt)
        over = len(prompt_ids) + len(response) - max_length
        if over <= 0:
            ids = np.array(prompt_ids + response, dtype=np.int64)
            return prompt, ids, len(prompt_ids), truncated
        truncated = True
        if template is not None:
            fields = [c for c in template_fields(template) if isinstance(row.get(c), str)]
            longest = max(fields, key=lambda c: len(row[c]), default=None)
            text = row[longest] if longest else ""
        else:
            users = [m for m in messages if m["role"] == "user"]
            text = users[-1]["content"] if users else ""
        tokens = _encode(tokenizer, text)
        keep = len(tokens) - over - _CUT_MARGIN
        if keep <= 0:
            break
        cut = tokenizer.decode(tokens[:keep])
        if template is not None:
            row[longest] = cut
            messages[-1] = {"role": "user", "content": template.format(
                **{c: ("" if _empty(v) else v) for c, v in row.items()})}
        else:
            users[-1]["content"] = cut
    raise DataError(f"{example.where}: the response is {len(response)} tokens (EOS included) "
                    f"and does not fit model.max_length = {max_length} with the prompt's fixed "
                    f"part; responses are never cut (a cut response teaches the model not to "
                    f"stop): raise model.max_length or shorten the response")


def _split_counts(split: SftSplit) -> dict[str, Any]:
    lengths = split.lengths
    return {"token_length": ({"median": float(np.median(lengths)),
                              "p95": float(np.quantile(lengths, 0.95)),
                              "max": int(lengths.max())} if len(lengths) else {}),
            "response_tokens": ({"median": float(np.median(split.response_lengths)),
                                 "max": int(split.response_lengths.max())}
                                if len(lengths) else {}),
            "truncated_rows": int(split.truncated.sum()),
            "truncated_fraction": round(float(split.truncated.mean()) if len(split) else 0.0, 4)}


def _refuse_unsupported(loaded: Any) -> None:
    """The shared ``data`` keys this task cannot honour, refused when set."""
    data = loaded.config.data
    for name, why in (("group_column", "examples are split at random"),
                      ("label_column", "set data.response_column (with data.prompt_template) "
                                       "for the column to learn"),
                      ("on_unseen_labels", "responses are free text, not classes")):
        if getattr(data, name) != type(data).model_fields[name].default:
            raise ConfigError(f"data.{name} does not apply to task llm-sft ({why}); remove it")


def _read_split(loaded: Any, files: list[Any], role: str, fmt: str | None
                ) -> tuple[str, list[SftExample], list[int], int]:
    data = loaded.config.data
    key = f"data.{role}"
    examples: list[SftExample] = []
    numbers: list[int] = []
    read = 0
    for file in files:
        rows = read_rows(file.path, file.name, file.format, key=key,
                         encoding=file.scan.encoding, delimiter=file.delimiter)
        read += len(rows)
        if fmt is None:
            fmt = data_format(data, rows[0][1] if rows else None)
        got, got_numbers = row_examples(rows, data, fmt, name=file.name, key=key,
                                        on_bad_rows=data.on_bad_rows)
        examples += got
        numbers += got_numbers
    assert fmt is not None
    return fmt, examples, numbers, read


def _tokenize_split(tokenizer: Any, examples: list[SftExample], numbers: list[int],
                    max_length: int, template: str | None) -> SftSplit:
    prompts, ids, prompt_lengths, truncated = [], [], [], []
    for example in examples:
        prompt, tokens, prompt_length, cut = tokenize_example(tokenizer, example, max_length,
                                                              template=template)
        prompts.append(prompt)
        ids.append(tokens)
        prompt_lengths.append(prompt_length)
        truncated.append(cut)
    return SftSplit(prompts, [e.response for e in examples], ids,
                    np.array(prompt_lengths, dtype=np.int64), np.array(numbers, dtype=np.int64),
                    np.array(truncated, dtype=bool))


def _subsample(index: np.ndarray, limit: int | None, seed: int) -> np.ndarray:
    """At most ``limit`` of ``index``, drawn with ``seed``, in their original order."""
    if limit is None or len(index) <= limit:
        return index
    return np.sort(np.random.default_rng(seed).permutation(index)[:limit])


def prepare_sft(loaded: Any, sources: dict[str, str]) -> PreparedSft:
    """Read, check, split and tokenize the config's data.

    The checks, the validation split and the subsamples work on the rendered prompts, so
    only the examples kept are tokenized (4,000 reviews subsampled to 800 tokenize 800).

    Returns:
        The prepared data; ``report`` has ``splits.<role>`` (``rows_read``, ``rows_kept``,
        ``exact_duplicates``, ``leaked_rows``, ``truncated_rows``, token lengths),
        ``checks``, ``encoding`` and ``fingerprint``.

    Raises:
        ConfigError: A shared data key the task cannot honour, or a tokenizer without a chat
            template.
        DataError: A file cannot be read, a column or template field is missing, a
            conversation is malformed, a response does not fit ``model.max_length``, or a
            split is empty.
    """
    import hashlib

    from entrena.data.hygiene import check_record
    from entrena.data.tables import open_config_sources
    from entrena.tasks.llm_sft.model import build_tokenizer

    _refuse_unsupported(loaded)
    cfg = loaded.config
    data, seed, max_length = cfg.data, cfg.train.seed, cfg.model.max_length
    specs, files, _ = open_config_sources(loaded)
    tokenizer = build_tokenizer(sources["tokenizer"])
    fmt, raw = None, {}
    for role in ("train", "validation", "test"):
        if role in files:
            fmt, examples, numbers, read = _read_split(loaded, files[role], role, fmt)
            raw[role] = (examples, numbers, read)
    assert fmt is not None
    template = data.prompt_template if fmt == "template" else None
    report: dict[str, Any] = {"task": "llm-sft", "format": fmt, "labels": [], "checks": [],
                              "splits": {}}
    for role, (examples, _, read) in raw.items():
        report["splits"][role] = {"file": specs[role], "rows_read": read,
                                  "empty_response": read - len(examples)}
    rendered = {role: [render_prompt(tokenizer, e.messages) for e in examples]
                for role, (examples, _, _) in raw.items()}
    train_examples = raw["train"][0]
    if not train_examples:
        raise DataError(f"data.train: {specs['train']}: no example with a response; check the "
                        "format settings (data.format, columns, template)")
    checks = data.checks
    # Exact duplicates (prompt + response) in training, dropped as the checks say.
    seen: set[str] = set()
    repeated = []
    for prompt, example in zip(rendered["train"], train_examples, strict=True):
        key = prompt + "\x00" + example.response
        repeated.append(key in seen)
        seen.add(key)
    count = int(sum(repeated))
    report["checks"].append(check_record(
        "exact_duplicates", count, checks.exact_duplicates,
        f"{count} training examples repeat an earlier one (prompt and response)"))
    report["splits"]["train"]["exact_duplicates"] = count
    index = {role: np.arange(len(raw[role][0])) for role in raw}
    if count and checks.exact_duplicates == "drop":
        index["train"] = np.flatnonzero(~np.array(repeated))
    if "validation" not in raw:
        train = index["train"]
        if len(train) < 2:
            raise DataError(f"data.train: {specs['train']}: {len(train)} example(s) cannot be "
                            "split into training and validation; add rows or set "
                            "data.validation")
        order = np.random.default_rng(seed).permutation(len(train))
        held = max(1, int(round(len(train) * data.validation_fraction)))
        index["validation"], index["train"] = (np.sort(train[order[:held]]),
                                               np.sort(train[order[held:]]))
        raw["validation"], rendered["validation"] = raw["train"], rendered["train"]
    # Leakage: training prompts that also occur in validation or test.
    held_out = {rendered[role][i] for role in ("validation", "test") if role in index
                for i in index[role]}
    leaked = np.array([rendered["train"][i] in held_out for i in index["train"]], dtype=bool)
    count = int(leaked.sum())
    report["checks"].append(check_record(
        "leakage", count, checks.leakage,
        f"{count} training prompts also occur in validation or test"))
    report["splits"]["train"]["leaked_rows"] = count
    if count and checks.leakage == "drop":
        index["train"] = index["train"][~leaked]
    index["train"] = _subsample(index["train"], data.max_train_samples, seed)
    for role in ("validation", "test"):
        if role in index:
            index[role] = _subsample(index[role], data.max_eval_samples, seed)
    splits: dict[str, SftSplit] = {}
    for role in ("train", "validation", "test"):
        if role not in index:
            continue
        if len(index[role]) == 0:
            raise DataError(f"data.{role}: no example left after the checks; check the data")
        examples, numbers, _ = raw[role]
        log.info("tokenizing %d %s examples", len(index[role]), role)
        splits[role] = _tokenize_split(tokenizer, [examples[i] for i in index[role]],
                                       [numbers[i] for i in index[role]], max_length, template)
        entry = report["splits"].setdefault(role, {"file": None, "rows_read": 0})
        entry.update(rows_kept=len(splits[role]), **_split_counts(splits[role]))
    train = splits["train"]
    configured = cfg.model.max_new_tokens
    max_new = int(train.response_lengths.max()) if configured == "auto" else int(configured)
    share = report["splits"]["train"]["truncated_fraction"]
    report["checks"].append(check_record(
        "truncation", share, checks.truncation,
        f"{share:.1%} of training prompts were cut to fit model.max_length {max_length} "
        f"tokens (limit {checks.max_truncated_fraction:.0%})",
        failing=share > checks.max_truncated_fraction))
    report["encoding"] = {"tokenizer": sources["tokenizer"], "max_length": max_length,
                          "max_length_from": "model.max_length",
                          "max_new_tokens": max_new, "eos_token": tokenizer.eos_token,
                          "chat_template_sha256": hashlib.sha256(
                              str(tokenizer.chat_template).encode()).hexdigest()[:16]}
    material = json.dumps([report, [f.scan.sha256 for fs in files.values() for f in fs],
                           data.model_dump(mode="json"), seed], sort_keys=True, default=str)
    report["fingerprint"] = hashlib.sha256(material.encode()).hexdigest()[:24]
    report["from_cache"] = False
    return PreparedSft(SftSplits(train, splits["validation"], splits.get("test")), tokenizer,
                       max_length, max_new, report, False, fmt)
