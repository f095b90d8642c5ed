"""``entrena predict`` for ``task: llm-sft``: each input row gets a ``generated_text``.

Prompts are built as in training, from the model folder's ``entrena_model.json`` (format,
template, columns, system prompt) and its tokenizer's chat template: a JSONL of
``messages`` (a conversation ending with a user turn, or with an assistant turn that is
then generated again), of ``prompt`` rows, or a table with the template's columns (CSV,
TSV, JSONL, Parquet). Generation is greedy, at most the model's ``max_new_tokens``. The
output (JSONL, or CSV for a ``.csv`` name) holds every input column, ``generated_text`` and
``ends_with_eos``; it is written to a temporary file and renamed when complete.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from entrena.errors import DataError

__all__ = ["predict_chats"]

log = logging.getLogger("entrena")

_FORMATS = {".jsonl": "jsonl", ".csv": "csv", ".tsv": "csv", ".parquet": "parquet"}


def _prompt_turns(row: dict[str, Any], meta: dict[str, Any], where: str) -> list[dict[str, str]]:
    from entrena.tasks.llm_sft.chats import ROLES

    if meta["format"] == "messages":
        turns = row.get(meta["messages_column"])
        if not isinstance(turns, list) or not turns or not all(
                isinstance(t, dict) and t.get("role") in ROLES
                and isinstance(t.get("content"), str) for t in turns):
            raise DataError(f"{where}: {meta['messages_column']!r} must be a list of "
                            f"{{\"role\": \"system\"|\"user\"|\"assistant\", \"content\": ...}} "
                            f"turns")
        turns = [{"role": t["role"], "content": t["content"]} for t in turns]
        return turns[:-1] if turns[-1]["role"] == "assistant" else turns
    system = [{"role": "system", "content": meta["system_prompt"]}] \
        if meta.get("system_prompt") else []
    if meta["format"] == "template":
        values = {k: ("" if v is None else v) for k, v in row.items()}
        return system + [{"role": "user", "content": meta["prompt_template"].format(**values)}]
    return system + [{"role": "user", "content": str(row.get(meta["prompt_column"], ""))}]


def _check_columns(rows: list[tuple[int, dict[str, Any]]], meta: dict[str, Any],
                   name: str) -> None:
    from entrena.tasks.llm_sft.chats import template_fields

    columns = sorted({c for _, row in rows for c in row})
    if meta["format"] == "template":
        wanted = template_fields(meta["prompt_template"])
        what = "the model's prompt template"
    elif meta["format"] == "messages":
        wanted, what = [meta["messages_column"]], "the messages format"
    else:
        wanted, what = [meta["prompt_column"]], "the prompt/completion format"
    missing = [c for c in wanted if c not in columns]
    if missing:
        raise DataError(f"{name}: column(s) {', '.join(map(repr, missing))} needed by {what} "
                        f"are missing; columns are: {', '.join(map(repr, columns)) or 'none'}")


def predict_chats(location: Any, data: Path, output: Path, options: Any) -> dict[str, Any]:
    """Generate a response for every row of ``data`` into ``output``.

    Args:
        location: The model (:class:`~entrena.exporting.prediction.ModelLocation`).
        data: Input rows (JSONL, CSV, TSV, Parquet).
        output: Where to write (JSONL, or CSV for ``.csv``).
        options: ``batch_size``, ``threads`` (:class:`PredictOptions`).

    Returns:
        The summary ``entrena predict`` prints (``rows.read`` / ``predicted`` / ``skipped``,
        ``output``, ``eos_share``, ``time_s`` …), shaped as the other tasks' summaries.

    Raises:
        DataError: An unsupported file type, an unreadable file, or missing columns (checked
            before the model is loaded).
    """
    import torch

    from entrena.tasks.llm_sft.chats import SftExample, read_rows
    from entrena.tasks.llm_sft.model import _pad_id, greedy_generate, load_sft_model
    from entrena.tasks.llm_sft.tokens import tokenize_example

    started = time.perf_counter()
    fmt = _FORMATS.get(data.suffix.lower())
    if fmt is None:
        raise DataError(f"--input {data}: unsupported file type {data.suffix!r}; use "
                        f"{', '.join(_FORMATS)}")
    if not data.is_file():
        raise DataError(f"--input {data}: file not found")
    meta = location.meta
    delimiter = "\t" if data.suffix.lower() == ".tsv" else ","
    rows = read_rows(data, str(data), fmt, key="--input", encoding="utf-8",
                     delimiter=delimiter)
    _check_columns(rows, meta, str(data))
    if options.threads:
        torch.set_num_threads(int(options.threads))
    model, tokenizer, meta = load_sft_model(location.folder)
    limit = int(meta["max_length"])
    prompts = []
    for number, row in rows:
        where = f"{data}: line {number}" if fmt == "jsonl" else f"{data}: row {number}"
        example = SftExample(_prompt_turns(row, meta, where), "", where, row)
        _, ids, prompt_length, _ = tokenize_example(
            tokenizer, example, limit, template=meta.get("prompt_template"))
        prompts.append(torch.from_numpy(ids[:prompt_length]))
    texts, ended = [], []
    eos, pad = int(tokenizer.eos_token_id), _pad_id(tokenizer)
    batch = max(1, int(options.batch_size))
    order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
    generated: dict[int, list[int]] = {}
    for start in range(0, len(order), batch):
        chunk = order[start:start + batch]
        out = greedy_generate(model.lm, [prompts[i] for i in chunk],
                              max_new_tokens=model.max_new_tokens, eos_token_id=eos,
                              pad_token_id=pad)
        for row, i in enumerate(chunk):
            generated[i] = [int(t) for t in out[row] if t >= 0]
    for i in range(len(prompts)):
        texts.append(tokenizer.decode(generated[i], skip_special_tokens=True).strip())
        ended.append(eos in generated[i])
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(f".{output.name}.tmp")
    records = [{**row, "generated_text": text, "ends_with_eos": end}
               for (_, row), text, end in zip(rows, texts, ended, strict=True)]
    if output.suffix.lower() == ".csv":
        import pandas as pd

        pd.DataFrame(records).to_csv(tmp, index=False)
    else:
        with tmp.open("w", encoding="utf-8") as handle:
            for record in records:
                handle.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
    os.replace(tmp, output)
    elapsed = time.perf_counter() - started
    log.info("%d rows generated into %s in %.1fs", len(records), output, elapsed)
    return {"input": str(data), "output": str(output), "model": str(location.folder),
            "backend": "torch", "columns_added": ["generated_text", "ends_with_eos"],
            "rows": {"read": len(records), "predicted": len(records), "skipped": 0},
            "skipped": {}, "eos_share": sum(ended) / max(1, len(ended)), "time_s": elapsed,
            "throughput_rows_per_s": len(records) / elapsed if elapsed > 0 else 0.0}
