# ruff: noqa: F811 - smol_tokenizer is the fixture imported from test_llm_sft
"""``task: llm-sft`` conversations as people write them (issue 44): a multi-turn chat over
``model.max_length`` loses whole earlier turns before its last question is cut, and a lone
assistant turn or an empty final answer is named by its line with the fix, skipped or
refused as ``data.on_bad_rows`` says."""

from __future__ import annotations

import io
import logging
import re

import pytest
import yaml

from conftest import run_cli
from entrena.errors import DataError
from test_llm_sft import chats, config, prepare, smol_tokenizer, write_jsonl  # noqa: F401

CHECKS = {"exact_duplicates": "warn", "leakage": "warn"}


def _turn(role: str, content: str) -> dict:
    return {"role": role, "content": content}


def _long_chat(history_words: int) -> dict:
    """A system turn, a long earlier exchange, then the question being answered."""
    return {"messages": [
        _turn("system", "Be brief."),
        _turn("user", "Tell me about the trip: " + " ".join(["sunny"] * history_words)),
        _turn("assistant", "It was " + " ".join(["lovely"] * history_words)),
        _turn("user", "Was it worth the money?"),
        _turn("assistant", "yes")]}


# --- the cut: whole earlier turns, oldest first ---------------------------------------------

def test_history_cuts_drop_whole_exchanges_oldest_first_keeping_system_and_question():
    from entrena.tasks.llm_sft.tokens import history_cuts

    turns = [_turn("system", "s"), _turn("user", "u1"), _turn("assistant", "a1"),
             _turn("user", "u2"), _turn("assistant", "a2"), _turn("user", "u3")]
    cuts = [[t["content"] for t in cut] for cut in history_cuts(turns)]
    assert cuts == [["s", "u2", "a2", "u3"], ["s", "u3"]]
    assert list(history_cuts([_turn("user", "only")])) == []


def test_a_chat_over_the_limit_loses_its_earlier_turns_not_its_question(tmp_path,
                                                                       smol_tokenizer):
    # Before: the long earlier exchange was kept and the last question cut (to "Was it"), or,
    # a few tokens more, the run stopped blaming the 2-token response.
    for words in (14, 30):
        write_jsonl(tmp_path / "train.jsonl", chats(6) + [_long_chat(words)])
        _, _, prepared = prepare(tmp_path, smol_tokenizer, data={"checks": CHECKS})
        splits = [prepared.splits.train, prepared.splits.validation]
        prompts = [p for s in splits for p in s.prompts if "worth the money" in p]
        assert len(prompts) == 1, words
        assert "Was it worth the money?<|im_end|>" in prompts[0]
        assert "Be brief." in prompts[0] and "sunny" not in prompts[0]
        assert "lovely" not in prompts[0]
        report = prepared.report["splits"]
        assert sum(r["turns_dropped_rows"] for r in report.values()) == 1
        assert sum(r["prompt_cut_rows"] for r in report.values()) == 0
        assert sum(r["truncated_rows"] for r in report.values()) == 1


def test_a_chat_that_fits_keeps_every_turn(tmp_path, smol_tokenizer):
    write_jsonl(tmp_path / "train.jsonl", chats(6) + [_long_chat(2)])
    _, _, prepared = prepare(tmp_path, smol_tokenizer, data={"checks": CHECKS})
    prompts = [p for s in (prepared.splits.train, prepared.splits.validation)
               for p in s.prompts if "worth the money" in p]
    assert "sunny sunny" in prompts[0] and "lovely lovely" in prompts[0]
    assert sum(r["truncated_rows"] for r in prepared.report["splits"].values()) == 0


def test_only_a_question_too_long_alone_is_cut_inside_and_counted(tmp_path, smol_tokenizer):
    chat = _long_chat(3)
    chat["messages"][3]["content"] = "Was it worth it? " + " ".join(["really"] * 60)
    write_jsonl(tmp_path / "train.jsonl", chats(6) + [chat])
    _, _, prepared = prepare(tmp_path, smol_tokenizer, data={"checks": CHECKS})
    report = prepared.report["splits"]
    assert sum(r["prompt_cut_rows"] for r in report.values()) == 1
    assert sum(r["turns_dropped_rows"] for r in report.values()) == 1  # dropped first
    prompts = [p for s in (prepared.splits.train, prepared.splits.validation)
               for p in s.prompts if "worth it" in p]
    assert "Be brief." in prompts[0] and "sunny" not in prompts[0]


def test_a_response_that_cannot_fit_names_the_prompt_part_it_competes_with(tmp_path,
                                                                          smol_tokenizer):
    chat = {"messages": [_turn("system", " ".join(["rule"] * 70)), _turn("user", "hi"),
                         _turn("assistant", "yes")]}
    write_jsonl(tmp_path / "train.jsonl", chats(6) + [chat])
    with pytest.raises(DataError, match=r"line 7: the prompt's fixed part \(the chat template "
                                        r"and the system turn\) is \d+ tokens") as caught:
        prepare(tmp_path, smol_tokenizer, data={"checks": CHECKS})
    assert "model.max_length = 64" in str(caught.value)
    assert "\n" not in str(caught.value)


# --- rows that are not a question and its answer --------------------------------------------

LONE = {"messages": [_turn("system", "Be brief."), _turn("assistant", "great")]}
EMPTY = {"messages": [_turn("user", "Was it good?"), _turn("assistant", "  \n ")]}


def test_a_lone_assistant_turn_and_an_empty_answer_are_skipped_and_listed(
        tmp_path, smol_tokenizer, caplog):
    # Before: a lone assistant turn was "internal error: ValueError" (exit 1, no line); an
    # empty answer was skipped with a count only.
    write_jsonl(tmp_path / "train.jsonl",
                chats(4) + [LONE, EMPTY, {"messages": [_turn("assistant", "x")]}] + chats(4, 10))
    with caplog.at_level(logging.WARNING, logger="entrena"):
        _, _, prepared = prepare(tmp_path, smol_tokenizer, data={"checks": CHECKS})
    entry = prepared.report["splits"]["train"]
    assert entry["skipped_rows"] == {"no_user_turn": [5, 7], "empty_response": [6]}
    assert entry["no_user_turn"] == 2 and entry["empty_response"] == 1
    assert len(prepared.splits.train) + len(prepared.splits.validation) == 8
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "lines 5, 7: the assistant turn has no user turn before it" in said
    assert "line 6: the final assistant turn is empty" in said
    assert "data.on_bad_rows: skip" in said
    from rich.console import Console

    from entrena.api.preparing import report_table

    console = Console(width=200, record=True, file=io.StringIO())
    console.print(report_table(prepared.report))
    table = console.export_text()
    assert re.search(r"empty answer / no user turn\s*│\s*1 / 2\s*│\s*0 / 0", table), table


@pytest.mark.parametrize("row, message", [
    (LONE, "line 5: the assistant turn has no user turn before it"),
    (EMPTY, "line 5: the final assistant turn is empty")])
def test_bad_rows_are_refused_by_line_under_on_bad_rows_error(tmp_path, smol_tokenizer, row,
                                                              message):
    write_jsonl(tmp_path / "train.jsonl", chats(4) + [row] + chats(4, 10))
    with pytest.raises(DataError, match=message) as caught:
        prepare(tmp_path, smol_tokenizer, data={"checks": CHECKS, "on_bad_rows": "error"})
    text = str(caught.value)
    assert "\n" not in text and "data.on_bad_rows: skip" in text


def test_a_lone_assistant_turn_exits_2_with_its_line_at_the_command_line(tmp_path,
                                                                         smol_tokenizer):
    write_jsonl(tmp_path / "train.jsonl", chats(4) + [LONE])
    cfg = config(tmp_path, smol_tokenizer, data={"on_bad_rows": "error"})
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    result = run_cli("train", "config.yaml", cwd=tmp_path, timeout=120)
    assert result.returncode == 2, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: data.train: ") and "line 5" in last
    assert "add the user's question before it" in last
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    assert not (tmp_path / "runs" / "tiny-llm" / "model").exists()


def test_an_empty_response_column_is_named_with_its_rows(tmp_path, smol_tokenizer):
    (tmp_path / "train.csv").write_text("review,score\nnice,great\nbad, \nok,other\n"
                                        "fine,great\nmeh,\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"train.csv: rows 2, 5: the response \('score'\) is "
                                        r"empty .*write the response or remove the row"):
        prepare(tmp_path, smol_tokenizer, data={
            "train": str(tmp_path / "train.csv"), "response_column": "score",
            "prompt_template": "Review: {review}", "on_bad_rows": "error"})


def test_a_leakage_check_that_drops_every_training_prompt_says_so(tmp_path,
                                                                 smol_tokenizer):  # noqa: F811
    """A test file holding every training prompt (and more: not a copy, which is refused
    apart): the leakage check (drop) names itself
    and the fix, rather than 'no example left after the checks'."""
    write_jsonl(tmp_path / "train.jsonl", chats(8))
    write_jsonl(tmp_path / "test.jsonl", chats(10))  # every training row, and more
    with pytest.raises(DataError, match=r"all 6 training prompts also occur in validation or "
                                        r"test \(data.checks.leakage: drop left none\)"):
        prepare(tmp_path, smol_tokenizer, data={"test": str(tmp_path / "test.jsonl")})
