"""Examples of ``task: llm-sft``, ready to fit: the files' rows read as chats
(:mod:`~entrena.tasks.llm_sft.chats`), checked (duplicates, leakage, truncation), split,
subsampled and tokenized with the model's chat template
(:mod:`~entrena.tasks.llm_sft.tokens`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from entrena.errors import ConfigError, DataError
from entrena.tasks.llm_sft.chats import (
    BAD_ROWS,
    REPORTED_ROWS,
    SftExample,
    chat_rows,
    data_format,
    read_rows,
)
from entrena.tasks.llm_sft.tokens import fit_example, render_prompt

if TYPE_CHECKING:
    from entrena.config.loading import LoadedConfig
    from entrena.tasks.llm_sft.config import LlmSftConfig

__all__ = ["SftSplit", "SftSplits", "PreparedSft", "prepare_sft"]

log = logging.getLogger("entrena")


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


def _refuse_unsupported(loaded: LoadedConfig[LlmSftConfig]) -> None:
    """The shared ``data`` keys this task cannot honour, refused when set."""
    data = loaded.config.data
    for name, why in (("group_column", "examples are split at random"),
                      ("label_column", "set data.response_column (with data.prompt_template) "
                                       "for the column to learn"),
                      ("on_unseen_labels", "responses are free text, not classes")):
        if getattr(data, name) != type(data).model_fields[name].default:
            raise ConfigError(f"data.{name} does not apply to task llm-sft ({why}); remove it")


@dataclass
class _ReadSplit:
    """One split's files as read: the examples, their row numbers, the rows read and the bad
    rows skipped (kind → row numbers, ``file:row`` when the split has several files)."""

    examples: list[SftExample]
    numbers: list[int]
    read: int
    skipped: dict[str, list[Any]]


def _read_split(loaded: LoadedConfig[LlmSftConfig], files: list[Any], role: str, fmt: str | None
                ) -> tuple[str, _ReadSplit]:
    data = loaded.config.data
    key = f"data.{role}"
    found = _ReadSplit([], [], 0, {})
    for file in files:
        rows = read_rows(file.path, file.name, file.format, key=key,
                         encoding=file.scan.encoding, delimiter=file.delimiter)
        found.read += len(rows)
        if fmt is None:
            fmt = data_format(data, rows[0][1] if rows else None)
        got = chat_rows(rows, data, fmt, name=file.name, key=key,
                        on_bad_rows=data.on_bad_rows)
        found.examples += got.examples
        found.numbers += got.numbers
        for kind, numbers in got.skipped.items():
            found.skipped.setdefault(kind, []).extend(
                numbers if len(files) == 1 else [f"{file.name}:{n}" for n in numbers])
    assert fmt is not None
    return fmt, found


def _skipped_entry(found: _ReadSplit) -> dict[str, Any]:
    """The data report's count of each kind of bad row and ``skipped_rows``: their row
    numbers, at most :data:`REPORTED_ROWS` a kind."""
    return {**{kind: len(found.skipped.get(kind, [])) for kind in BAD_ROWS},
            "skipped_rows": {kind: rows[:REPORTED_ROWS] for kind, rows in found.skipped.items()}}


def _tokenize_split(tokenizer: Any, examples: list[SftExample], numbers: list[int],
                    max_length: int, template: str | None) -> tuple[SftSplit, dict[str, int]]:
    """The split as ids, and how many examples were made to fit each way
    (:func:`~entrena.tasks.llm_sft.tokens.fit_example`): ``turns_dropped_rows`` lost
    earlier turns, ``prompt_cut_rows`` had the question cut inside (a row can be both)."""
    prompts, ids, prompt_lengths, truncated = [], [], [], []
    cuts = {"turns_dropped_rows": 0, "prompt_cut_rows": 0}
    for example in examples:
        fitted = fit_example(tokenizer, example, max_length, template=template)
        prompts.append(fitted.prompt)
        ids.append(fitted.ids)
        prompt_lengths.append(fitted.prompt_length)
        truncated.append(fitted.truncated)
        cuts["turns_dropped_rows"] += fitted.turns_dropped > 0
        cuts["prompt_cut_rows"] += fitted.prompt_cut
    split = SftSplit(prompts, [e.response for e in examples], ids,
                     np.array(prompt_lengths, dtype=np.int64),
                     np.array(numbers, dtype=np.int64), np.array(truncated, dtype=bool))
    return split, cuts


def _subsample(index: np.ndarray, limit: int | None, seed: int) -> np.ndarray:
    """At most ``limit`` of ``index``, drawn with ``seed``, in their original order."""
    if limit is None or len(index) <= limit:
        return index
    return np.sort(np.random.default_rng(seed).permutation(index)[:limit])


def _select_rows(raw: dict[str, Any], rendered: dict[str, list[str]], specs: dict[str, Any],
                 data: Any, seed: int, report: dict[str, Any]) -> dict[str, np.ndarray]:
    """The examples kept per split (indices into ``raw[role]``): training's exact duplicates
    and leaked prompts counted (and dropped as ``data.checks`` says), the validation split
    carved from training when no file is given (seeded; ``raw`` and ``rendered`` then get a
    ``validation`` entry sharing training's), the subsamples drawn. Adds the ``exact_duplicates``
    and ``leakage`` check records and counts to ``report``.

    Raises:
        DataError: Fewer than 2 training examples to split a validation set from, or the
            leakage check dropped every training example.
    """
    from entrena.data.hygiene import check_record

    checks, train_examples = data.checks, raw["train"][0]
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
        if len(index["train"]) == 0:
            raise DataError(f"data.train: {specs['train']}: all {count} training prompts also "
                            f"occur in validation or test (data.checks.leakage: drop left "
                            f"none); give held-out files with other prompts, or set "
                            f"data.checks.leakage: warn to keep them")
    index["train"] = _subsample(index["train"], data.max_train_samples, seed)
    for role in ("validation", "test"):
        if role in index:
            index[role] = _subsample(index[role], data.max_eval_samples, seed)
    return index


def prepare_sft(loaded: LoadedConfig[LlmSftConfig], sources: dict[str, str]) -> PreparedSft:
    """Read, check, split and tokenize the config's data.

    The checks, the validation split and the subsamples work on the rendered prompts, so
    only the examples kept are tokenized (4,000 reviews subsampled to 800 tokenize 800).

    Returns:
        The prepared data; ``report`` has ``splits.<role>`` (``rows_read``, ``rows_kept``,
        the bad rows skipped by kind and ``skipped_rows`` (their numbers),
        ``exact_duplicates``, ``leaked_rows``, ``truncated_rows`` (any cut),
        ``turns_dropped_rows`` (earlier turns dropped whole) and ``prompt_cut_rows`` (the
        question or a template field cut inside; a row can be both), token lengths),
        ``checks``, ``encoding`` and ``fingerprint``.

    Raises:
        ConfigError: A shared data key the task cannot honour, or a tokenizer without a chat
            template.
        DataError: A file cannot be read, a column or template field is missing, a
            conversation is malformed, bad rows under ``data.on_bad_rows: error``, a
            response does not fit ``model.max_length``, or a split is empty.
    """
    import hashlib

    from entrena.data.hygiene import check_record
    from entrena.data.tables import open_config_sources
    from entrena.tasks.llm_sft.sources import chat_template_of
    from entrena.tasks.llm_sft.tokenizer import build_tokenizer

    _refuse_unsupported(loaded)
    cfg = loaded.config
    data, seed, max_length = cfg.data, cfg.train.seed, cfg.model.max_length
    specs, files, _ = open_config_sources(loaded)
    tokenizer = build_tokenizer(sources["tokenizer"], chat_template_of(loaded),
                                "model.tokenizer" if cfg.model.tokenizer else "model.name")
    fmt: str | None = None
    raw: dict[str, tuple[list[SftExample], list[int], _ReadSplit]] = {}
    for role in ("train", "validation", "test"):
        if role in files:
            fmt, found = _read_split(loaded, files[role], role, fmt)
            raw[role] = (found.examples, found.numbers, found)
    assert fmt is not None
    template = data.prompt_template if fmt == "template" else None
    report: dict[str, Any] = {"task": "llm-sft", "format": fmt, "labels": [], "checks": [],
                              "splits": {}}
    for role, (_, _, found) in raw.items():
        report["splits"][role] = {"file": specs[role], "rows_read": found.read,
                                  **_skipped_entry(found)}
    rendered: dict[str, list[str]] = {
        role: [render_prompt(tokenizer, e.messages, e.where) for e in examples]
        for role, (examples, _, _) in raw.items()}
    train_examples = raw["train"][0]
    if not train_examples:
        raise DataError(f"data.train: {specs['train']}: no example with a response; check the "
                        "format settings (data.format, columns, template)")
    index = _select_rows(raw, rendered, specs, data, seed, report)
    checks = data.checks
    splits: dict[str, SftSplit] = {}
    for role in ("train", "validation", "test"):
        if role not in index:
            continue
        if len(index[role]) == 0:
            raise DataError(f"data.{role}: no example left after the checks; check the data")
        examples, numbers, _ = raw[role]
        log.info("tokenizing %d %s examples", len(index[role]), role)
        splits[role], cuts = _tokenize_split(tokenizer, [examples[i] for i in index[role]],
                                             [numbers[i] for i in index[role]], max_length,
                                             template)
        entry = report["splits"].setdefault(  # a validation split carved from training
            role, {"file": None, "rows_read": 0, **{kind: 0 for kind in BAD_ROWS}})
        entry.update(rows_kept=len(splits[role]), **_split_counts(splits[role]), **cuts)
    train = splits["train"]
    configured = cfg.model.max_new_tokens
    max_new = int(train.response_lengths.max()) if configured == "auto" else int(configured)
    share = report["splits"]["train"]["truncated_fraction"]
    entry = report["splits"]["train"]
    how = (f": {entry['turns_dropped_rows']} lost earlier turns, {entry['prompt_cut_rows']} "
           f"had the question cut" if entry["turns_dropped_rows"] else "")
    report["checks"].append(check_record(
        "truncation", share, checks.truncation,
        f"{share:.1%} of training prompts were cut to fit model.max_length {max_length} "
        f"tokens{how} (limit {checks.max_truncated_fraction:.0%})",
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
