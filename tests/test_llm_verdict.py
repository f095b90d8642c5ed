# ruff: noqa: F811 - smol_tokenizer is the fixture imported from test_llm_sft
"""An honest verdict for ``task: llm-sft`` (issue 44): when the responses are a small set of
labels the baselines include the majority answer, the zero-shot baseline generates as many
tokens as the tuned model, and a model that gives one answer to almost every prompt is named
in the headline (report, CLI closing table, ``metrics.json``)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from test_llm_sft import chats, config, smol_tokenizer, write_jsonl  # noqa: F401

# --- what a label set is ------------------------------------------------------------------

def test_a_few_repeated_answers_are_labels_and_free_text_is_not():
    from entrena.tasks.llm_sft.evaluation import label_answers

    assert label_answers(["Great", "other ", "great", "OTHER", "great"]) == ["great", "other"]
    # 95% of the rows in 20 answers, a stray one allowed.
    rows = [f"label {i % 20}" for i in range(95)] + [f"odd {i}" for i in range(5)]
    assert len(label_answers(rows)) == 20
    assert label_answers(rows + ["odd x"]) is None  # 5.9% outside the 20 commonest
    assert label_answers([f"label {i % 30}" for i in range(300)]) is None  # 30 even answers
    assert label_answers([f"a sentence number {i}" for i in range(12)]) is None  # all unique
    assert label_answers([]) is None


def test_the_majority_answer_baseline_scores_each_split_with_its_rows():
    from entrena.tasks.llm_sft.evaluation import majority_answer_baseline
    from entrena.tasks.significance import ROWS

    train = ["other"] * 6 + ["great"] * 4
    found = majority_answer_baseline(train, {"validation": ["great", "Other"],
                                             "test": ["other", "great", "other ", "great"]})
    assert found["answer"] == "other"
    assert found["test"]["exact_match"] == 0.5 and found["validation"]["exact_match"] == 0.5
    assert found["test"][ROWS]["y_pred"].tolist() == [1, 0, 1, 0]
    assert found["test"][ROWS]["index"] is None
    assert majority_answer_baseline([f"free text {i}" for i in range(10)],
                                    {"test": ["x"]}) is None


# --- the one-answer finding ---------------------------------------------------------------

def _answers(share, reference_share, rows=120, role="test"):
    return {role: {"exact_match": 0.5, "answers": {
        "rows": rows, "distinct": 2, "commonest": "great", "commonest_share": share,
        "reference_share": reference_share}}}


def test_a_model_giving_one_answer_to_almost_every_prompt_is_named():
    from entrena.callbacks.diagnosis import group_of
    from entrena.recipes.verdicts import one_answer_finding

    found = one_answer_finding(_answers(117 / 120, 0.45))
    assert found is not None and found["code"] == "one_answer"
    assert group_of("one_answer") == "model"
    assert found["figure"] == "test: 98% of 120 prompts answered 'great' (45% of the " \
                              "references are)"
    assert one_answer_finding(_answers(0.95, 0.45, role="validation"))["figure"].startswith(
        "validation: ")
    assert one_answer_finding(_answers(0.85, 0.45)) is None  # answers spread enough
    assert one_answer_finding(_answers(0.97, 0.95)) is None  # the references are one answer
    assert one_answer_finding(_answers(1.0, 0.5, rows=8)) is None  # too few prompts to say
    assert one_answer_finding({"test": {"accuracy": 0.5}}) is None  # not a generative task


def test_the_headline_and_the_cli_closing_table_name_the_finding(capsys):
    from entrena.cli import _print_summary
    from entrena.recipes.verdicts import one_answer_finding
    from entrena.reporting.headline import headline

    finding = {**one_answer_finding(_answers(117 / 120, 0.45)), "group": "model"}
    metrics = {**_answers(117 / 120, 0.45), "diagnosis": [finding], "fit": {"epochs": 1},
               "baseline": {"comparison": {"split": "test", "metric": "exact_match",
                                           "model": 0.475, "best": "majority_answer",
                                           "best_score": 0.55, "outcome": "ties"}}}
    html = headline(metrics, {})
    assert "gives one answer to almost every prompt" in html
    assert "98% of 120 prompts answered" in html
    assert "majority answer" in html
    _print_summary(SimpleNamespace(metrics=metrics, run_dir="runs/x", model_dir="runs/x/model",
                                   already_finished=False))
    said = capsys.readouterr().err
    assert "one_answer" in said and "gives one answer to almost every prompt" in said


# --- end to end: a one-answer model on two-answer data --------------------------------------

def _two_answer_rows(n: int, start: int, great_every: int) -> list[dict]:
    """Chats answering "great" on one row in ``great_every``, "other" on the rest."""
    rows = chats(n, start)
    for i, row in enumerate(rows):
        row["messages"][-1]["content"] = "great" if i % great_every == 0 else "other"
    return rows


@pytest.fixture
def one_answer_run(tmp_path, smol_tokenizer, monkeypatch):
    """A run whose tuned model answers "great" to every prompt while the training answers
    are mostly "other" and the test ones 45% "great" (the issue's 117 of 120 at 0.475, below
    the 0.55 of always answering the commoner one)."""
    from transformers import AutoTokenizer

    import entrena.tasks.llm_sft.model as sft_model
    from entrena.api import train

    tok = AutoTokenizer.from_pretrained(smol_tokenizer)
    ids = tok("great", add_special_tokens=False).input_ids + [tok.eos_token_id]
    budgets = []

    def always_great(self, input_ids, target_mask, rows, cols, logits):
        out = torch.full((input_ids.shape[0], self.max_new_tokens), -1, dtype=torch.long)
        width = min(len(ids), self.max_new_tokens)
        out[:, :width] = torch.tensor(ids[:width])
        return out

    original = sft_model.greedy_generate

    def recording(lm, prompts, *, max_new_tokens, **kwargs):
        budgets.append(max_new_tokens)
        return original(lm, prompts, max_new_tokens=max_new_tokens, **kwargs)

    monkeypatch.setattr(sft_model.SftModel, "_generate", always_great)
    monkeypatch.setattr(sft_model, "greedy_generate", recording)
    write_jsonl(tmp_path / "train.jsonl", _two_answer_rows(24, 0, great_every=3))
    test = _two_answer_rows(120, 500, great_every=2)
    for row in test[::20]:  # 45% "great": 54 of 120
        row["messages"][-1]["content"] = "other"
    write_jsonl(tmp_path / "test.jsonl", test)
    cfg = config(tmp_path, smol_tokenizer, data={"test": str(tmp_path / "test.jsonl")},
                 train={"max_steps": 1, "eval_batch_size": 16}, model={"finetuning": "full"})
    result = train(cfg, run_dir=tmp_path / "run")
    return result, budgets


def test_a_one_answer_model_is_compared_with_the_majority_answer_and_named(one_answer_run):
    result, budgets = one_answer_run
    metrics = result.metrics
    assert metrics["test"]["exact_match"] == pytest.approx(54 / 120)
    majority = metrics["baseline"]["majority_answer"]
    assert majority["answer"] == "other"
    assert majority["test"]["exact_match"] == pytest.approx(66 / 120)
    verdict = metrics["baseline"]["comparison"]
    assert verdict["best"] == "majority_answer" and verdict["outcome"] != "beats"
    assert verdict["difference_ci"] is not None  # the paired bootstrap, as other tasks
    codes = [f["code"] for f in metrics["diagnosis"]]
    assert "one_answer" in codes
    assert metrics["test"]["answers"]["commonest"] == "great"
    report = (result.run_dir / "report.html").read_text()
    headline = report[report.index("<p class='headline"):report.index("<p class='legend'>")]
    assert "gives one answer to almost every prompt" in headline
    # The zero-shot base model generates as many new tokens as the tuned model.
    zero = metrics["baseline"]["zero_shot"]
    assert budgets and set(budgets) == {zero["max_new_tokens"]}
    report = json.loads((result.run_dir / "data_report.json").read_text())
    assert zero["max_new_tokens"] == report["encoding"]["max_new_tokens"]


def test_the_answers_summary_is_no_curve_of_the_report():
    from entrena.reporting.plots import validation_series

    events = [{"type": "eval", "step": s, "validation": {
        "exact_match": 0.5, "answers": {"rows": 10, "commonest": "great"}}} for s in (1, 2)]
    assert validation_series(events) == {"exact_match": ([1, 2], [0.5, 0.5])}


def test_the_zero_shot_answers_are_scored_against_their_own_references(tmp_path,
                                                                     smol_tokenizer,  # noqa: F811
                                                                     monkeypatch):
    """A base model that answers every prompt right (an oracle standing in for greedy
    generation) scores 1.0, whatever the prompts' lengths: each batch is generated sorted by
    length, and each answer must be matched with its own prompt's reference (a fresh user
    found a model scoring 1.0 on test and 0.125 as its own zero-shot baseline)."""
    import numpy as np

    from entrena.tasks.llm_sft import baselines
    from test_llm_sft import prepare

    rows = chats(24)
    for i, row in enumerate(rows):  # prompts of many lengths, in no order
        row["messages"][0]["content"] += " really" * ((i * 7) % 11)
    write_jsonl(tmp_path / "train.jsonl", rows)
    test_rows = chats(16, start=100)
    for i, row in enumerate(test_rows):
        row["messages"][0]["content"] += " truly" * ((i * 5) % 9)
    write_jsonl(tmp_path / "test.jsonl", test_rows)
    loaded, task, prepared = prepare(tmp_path, smol_tokenizer,
                                     data={"test": str(tmp_path / "test.jsonl")},
                                     train={"eval_batch_size": 8})
    split = prepared.splits.test
    answers = {tuple(split.input_ids[i][:split.prompt_lengths[i]].tolist()):
               split.input_ids[i][split.prompt_lengths[i]:] for i in range(len(split))}

    def oracle(model, prompts, *, max_new_tokens, eos_token_id, pad_token_id):
        out = [answers[tuple(p.tolist())] for p in prompts]
        width = max(len(a) for a in out)
        return torch.from_numpy(np.stack([np.pad(a, (0, width - len(a)),
                                                 constant_values=pad_token_id) for a in out]))

    monkeypatch.setattr("entrena.tasks.llm_sft.model.greedy_generate", oracle)
    found = baselines.zero_shot_baseline(loaded, prepared, task.model_sources(loaded))
    assert found["zero_shot"]["test"]["exact_match"] == 1.0
