"""``task: llm-sft`` on a tiny random Llama with SmolLM2's tokenizer: data formats, the target
mask, loss normalisation across gradient accumulation, the CLI end to end (metrics keys,
zero-shot baseline, saved chat template, predict), exact resume, and bad input."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from conftest import run_cli
from entrena.errors import ConfigError, DataError
from entrena.tasks.registry import get_task, load_config

ARCH = {"num_hidden_layers": 2, "hidden_size": 32, "num_attention_heads": 4,
        "num_key_value_heads": 2, "intermediate_size": 64}
GOOD = ["tasty", "lovely", "excellent", "perfect", "delicious", "wonderful"]
BAD = ["stale", "bitter", "broken", "awful", "bland", "late"]


@pytest.fixture(scope="session")
def smol_tokenizer(pytestconfig) -> str:
    """SmolLM2's tokenizer (with its ChatML template), converted from the GGUF file of the
    ``smollm2-135m`` alias (no model weights) into pytest's cache folder, which outlives
    the session (the conversion takes half a minute; the folder is keyed by the file's
    hash)."""
    from entrena.tasks.llm_sft.sources import resolve_llm_source

    cache = pytestconfig.cache.mkdir("entrena-llm-tokenizer")
    return resolve_llm_source("smollm2-135m", None, cache, tokenizer_only=True)


def chats(n: int, start: int = 0) -> list[dict]:
    rows = []
    for i in range(start, start + n):
        good = i % 2 == 0
        word = (GOOD if good else BAD)[i % 6]
        rows.append({"messages": [
            {"role": "user", "content": f"Review: the coffee was {word} ({i}). Great or other?"},
            {"role": "assistant", "content": "great" if good else "other"}]})
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def config(tmp: Path, tokenizer: str, **sections) -> dict:
    cfg = {"name": "tiny-llm", "task": "llm-sft",
           "data": {"train": str(tmp / "train.jsonl"), "validation_fraction": 0.25},
           "model": {"architecture": ARCH, "tokenizer": tokenizer, "max_length": 64},
           "train": {"max_epochs": 1, "batch_size": 4, "learning_rate": 1e-2, "num_threads": 1},
           "tracking": {"enabled": False}}
    for section, values in sections.items():
        cfg.setdefault(section, {}).update(values)
    return cfg


def prepare(tmp: Path, tokenizer: str, **sections):
    loaded = load_config(config(tmp, tokenizer, **sections))
    task = get_task("llm-sft")
    return loaded, task, task.prepare(loaded, task.model_sources(loaded))


# --- data: formats, chat template, EOS, truncation -------------------------------------------

def test_messages_become_chat_prompts_with_eos_appended_to_the_response(tmp_path,
                                                                       smol_tokenizer):
    write_jsonl(tmp_path / "train.jsonl", chats(8))
    _, _, prepared = prepare(tmp_path, smol_tokenizer)
    tokenizer, split = prepared.tokenizer, prepared.splits.train
    eos = tokenizer.eos_token_id
    assert tokenizer.pad_token_id == eos  # SmolLM2: pad is EOS (the TRL #1623 trap)
    for i in range(len(split)):
        prompt = split.prompts[i]
        assert prompt.startswith("<|im_start|>system") and prompt.endswith(
            "<|im_start|>assistant\n")
        ids, start = split.input_ids[i], split.prompt_lengths[i]
        assert ids[-1] == eos
        assert tokenizer.decode(ids[start:-1]) == split.responses[i]
        assert tokenizer.decode(ids[:start]) == prompt
    assert prepared.max_new_tokens == int(split.response_lengths.max())


def test_prompt_completion_and_template_give_the_same_chats(tmp_path, smol_tokenizer):
    rows = [("tasty coffee", "great"), ("stale beans", "other"), ("lovely tea", "great"),
            ("bitter cup", "other")] * 2
    write_jsonl(tmp_path / "train.jsonl",
                [{"prompt": f"Review: {r}\nIs it great or other?", "completion": c}
                 for r, c in rows])
    (tmp_path / "table.csv").write_text("review,score\n" + "".join(
        f"{r},{c}\n" for r, c in rows), encoding="utf-8")
    _, _, by_columns = prepare(tmp_path, smol_tokenizer, data={"validation_fraction": 0.25,
                                                               "checks": {
                                                                   "exact_duplicates": "warn"}})
    _, _, by_template = prepare(
        tmp_path, smol_tokenizer,
        data={"train": str(tmp_path / "table.csv"), "response_column": "score",
              "prompt_template": "Review: {review}\nIs it great or other?",
              "checks": {"exact_duplicates": "warn"}})
    assert by_columns.data_format == "prompt_completion"
    assert by_template.data_format == "template"
    assert sorted(by_columns.splits.train.prompts) == sorted(by_template.splits.train.prompts)
    assert by_template.report["checks"][0]["found"] == 4  # the repeated rows, counted


def test_a_template_on_the_command_line_wins_over_messages(tmp_path, smol_tokenizer):
    (tmp_path / "train.csv").write_text("review,score,messages\na,great,x\nb,other,y\n"
                                        "c,great,z\nd,other,w\n", encoding="utf-8")
    loaded = load_config(config(tmp_path, smol_tokenizer, data={
        "train": str(tmp_path / "train.csv"), "format": "messages",
        "response_column": "score"}),
        ['data.prompt_template="Review: {review}\\nIs it great or other?"'])
    assert loaded.config.data.prompt_template == "Review: {review}\nIs it great or other?"
    task = get_task("llm-sft")
    prepared = task.prepare(loaded, task.model_sources(loaded))
    assert prepared.data_format == "template"
    assert "Review: a\nIs it great or other?" in "".join(
        prepared.splits.train.prompts + prepared.splits.validation.prompts)


def test_a_long_prompt_is_cut_in_its_longest_field_and_counted(tmp_path, smol_tokenizer):
    long = " ".join(["very"] * 200)
    (tmp_path / "train.csv").write_text(f"review,score\n{long} good,great\nok,other\n"
                                        "fine,great\nbad,other\n", encoding="utf-8")
    _, _, prepared = prepare(tmp_path, smol_tokenizer, data={
        "train": str(tmp_path / "train.csv"), "response_column": "score",
        "prompt_template": "Review: {review}\nIs it great or other?"})
    splits = prepared.splits
    lengths = np.concatenate([splits.train.lengths, splits.validation.lengths])
    assert lengths.max() <= 64
    cut = [p for s in (splits.train, splits.validation) for p in s.prompts if "very" in p]
    assert cut and cut[0].rstrip().endswith("Is it great or other?<|im_end|>\n<|im_start|>"
                                            "assistant")
    rows = sum(s["truncated_rows"] for s in prepared.report["splits"].values())
    assert rows == 1


# --- batches and the loss -------------------------------------------------------------------

def test_the_target_mask_covers_the_response_and_its_eos_even_though_pad_is_eos(
        tmp_path, smol_tokenizer):
    write_jsonl(tmp_path / "train.jsonl", chats(8))
    loaded, task, prepared = prepare(tmp_path, smol_tokenizer)
    source = task.batches(loaded, prepared, "train", batch_size=4, shuffle=True)
    indices = source.plan(0)[0]
    batch = source.collate(indices)
    eos = prepared.tokenizer.eos_token_id
    for row, i in enumerate(indices):
        length = len(prepared.splits.train.input_ids[i])
        start = prepared.splits.train.prompt_lengths[i]
        target = batch["target_mask"][row]
        assert target[start:length].all() and not target[:start].any()
        assert not target[length:].any()  # padding (also id EOS) is never a target
        assert batch["input_ids"][row, length - 1] == eos  # the learned EOS
        assert (batch["input_ids"][row, length:] == eos).all()  # right padding with pad = EOS
    assert source.target_count(indices) == int(batch["target_mask"].sum())


def _step_weights(model_seed: int, plan: list[list[int]], accumulation: int, source):
    from entrena.engine.loop import FitSettings, fit
    from fakes import FakeBackend

    torch.manual_seed(model_seed)
    from entrena.tasks.llm_sft.model import build_sft_model

    model = build_sft_model(pretrained=None, architecture=ARCH, tokenizer=source.tokenizer,
                            finetuning="full", lora={}, dropout=0.0, max_new_tokens=2,
                            gradient_checkpointing=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)

    class Planned:
        lengths = source.lengths

        def plan(self, epoch):
            return plan

        def collate(self, indices):
            return source.collate(indices)

        def target_count(self, indices):
            return source.target_count(indices)

    from entrena.tasks.llm_sft.task import LlmSftTask

    fit(backend=FakeBackend(), model=model, optimizer=optimizer, train=Planned(),
        loss=LlmSftTask.loss, evaluate=lambda m: {"loss": 0.0},
        settings=FitSettings(max_epochs=1, gradient_accumulation_steps=accumulation,
                             gradient_clip_norm=None, check_gradients=False,
                             divergence_factor=None),
        callbacks=[])
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_accumulated_micro_batches_step_as_one_batch_normalised_by_target_tokens(
        tmp_path, smol_tokenizer):
    rows = chats(6)
    rows[0]["messages"][-1]["content"] = "great, truly great, the best coffee in years"
    write_jsonl(tmp_path / "train.jsonl", rows)
    loaded, task, prepared = prepare(tmp_path, smol_tokenizer,
                                     data={"validation_fraction": 0.2})
    source = task.batches(loaded, prepared, "train", batch_size=4, shuffle=False)
    source.tokenizer = prepared.tokenizer
    counts = [source.target_count([i]) for i in range(len(source))]
    assert len(set(counts)) > 1  # unequal micro-batches: a mean of means would differ
    one = _step_weights(0, [[0, 1, 2, 3]], 1, source)
    two = _step_weights(0, [[0], [1, 2, 3]], 2, source)
    for key in one:
        torch.testing.assert_close(one[key], two[key], rtol=1e-4, atol=1e-6)


def test_lora_state_dict_holds_only_the_adapters(smol_tokenizer):
    from entrena.tasks.llm_sft.model import build_sft_model
    from entrena.tasks.llm_sft.tokenizer import build_tokenizer

    tokenizer = build_tokenizer(smol_tokenizer)
    model = build_sft_model(pretrained=None, architecture=ARCH, tokenizer=tokenizer,
                            finetuning="lora", lora={"r": 4, "alpha": 8, "dropout": 0.0,
                                                     "target_modules": "all-linear"},
                            dropout=0.0, max_new_tokens=2, gradient_checkpointing=False)
    state = model.state_dict()
    assert state and all("lora_" in key for key in state)
    # 2 layers x 7 projections (q, k, v, o, gate, up, down) x (A, B); not the output head
    assert len(state) == 2 * 7 * 2
    model.load_state_dict(state)
    with pytest.raises(RuntimeError, match="missing"):
        model.load_state_dict(dict(list(state.items())[1:]))


def test_lora_layers_adapts_only_the_last_decoder_layers(smol_tokenizer):
    """``model.lora.layers: 1`` of 2: adapters on the top layer's 7 projections only, and the
    backward pass leaves the bottom layer's weights and activations without gradients."""
    from entrena.tasks.llm_sft.model import build_sft_model
    from entrena.tasks.llm_sft.tokenizer import build_tokenizer

    tokenizer = build_tokenizer(smol_tokenizer)
    lora = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": "all-linear", "layers": 1}
    model = build_sft_model(pretrained=None, architecture=ARCH, tokenizer=tokenizer,
                            finetuning="lora", lora=lora, dropout=0.0, max_new_tokens=2,
                            gradient_checkpointing=False)
    state = model.state_dict()
    assert len(state) == 1 * 7 * 2
    assert all(".layers.1." in key for key in state)
    with pytest.raises(ConfigError, match=r"model.lora.layers: 3 layers, but the model has 2"):
        build_sft_model(pretrained=None, architecture=ARCH, tokenizer=tokenizer,
                        finetuning="lora", lora={**lora, "layers": 3}, dropout=0.0,
                        max_new_tokens=2, gradient_checkpointing=False)
    for targets, said in ((["foo"], "['foo'] name no layer"), ([], "[] is empty")):
        with pytest.raises(ConfigError, match=r"model.lora.target_modules: " + re.escape(said)):
            build_sft_model(pretrained=None, architecture=ARCH, tokenizer=tokenizer,
                            finetuning="lora", lora={**lora, "layers": None,
                                                     "target_modules": targets},
                            dropout=0.0, max_new_tokens=2, gradient_checkpointing=False)


def test_forward_share_follows_what_the_backward_pass_runs_through(smol_tokenizer):
    """An evaluation's share of a training step: 1/2 for LoRA on every layer (backward ≈ one
    forward), 2/3 on half of them, 1/3 for full fine-tuning (backward ≈ two forwards)."""
    from entrena.tasks.llm_sft.model import build_sft_model
    from entrena.tasks.llm_sft.task import LlmSftTask
    from entrena.tasks.llm_sft.tokenizer import build_tokenizer

    tokenizer = build_tokenizer(smol_tokenizer)
    shares = []
    for finetuning, layers in (("lora", None), ("lora", 1), ("full", None)):
        model = build_sft_model(
            pretrained=None, architecture=ARCH, tokenizer=tokenizer, finetuning=finetuning,
            lora={"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": "all-linear",
                  "layers": layers}, dropout=0.0, max_new_tokens=2,
            gradient_checkpointing=False)
        shares.append(LlmSftTask.forward_share(model))
    assert shares == pytest.approx([1 / 2, 2 / 3, 1 / 3])


# --- the CLI end to end ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, smol_tokenizer):
    """``entrena train`` (full fine-tuning: a random base learns nothing through adapters in
    a few steps) on 40 chats, then ``entrena predict``."""
    work = tmp_path_factory.mktemp("llm-cli")
    write_jsonl(work / "train.jsonl", chats(40))
    write_jsonl(work / "test.jsonl", chats(12, start=100))
    cfg = config(work, smol_tokenizer, data={"test": str(work / "test.jsonl")},
                 model={"finetuning": "full"}, tracking={"enabled": True},
                 train={"max_epochs": 6, "learning_rate": 3e-2, "evals_per_epoch": 1})
    (work / "config.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    run_dir = work / "runs" / "tiny-llm"
    result = run_cli("train", "config.yaml", "--run-dir", run_dir, cwd=work)
    write_jsonl(work / "prompts.jsonl", [
        {"messages": r["messages"][:1], "id": n} for n, r in enumerate(chats(6, start=200))])
    predicted = run_cli("predict", run_dir, "--input", "prompts.jsonl", "--output",
                        "out.jsonl", cwd=work)
    return work, run_dir, result, predicted


def test_train_writes_the_metrics_scripts_depend_on(tiny_run):
    _, run_dir, result, _ = tiny_run
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    for split in ("validation", "test"):
        for key in ("exact_match", "eos_share", "loss", "perplexity"):
            assert isinstance(metrics[split][key], float), (split, key)
        assert metrics[split]["perplexity"] == pytest.approx(math.exp(metrics[split]["loss"]))
    # The zero-shot baseline is scored where the verdict reads it: test.
    assert "validation" not in metrics["baseline"]["zero_shot"]
    zero = metrics["baseline"]["zero_shot"]["test"]
    assert set(zero) == {"exact_match", "eos_share", "exact_match_ci95", "prompts"}
    assert 1 <= zero["prompts"] <= metrics["data"]["test_rows"]
    assert zero["exact_match_ci95"][0] <= zero["exact_match"] <= zero["exact_match_ci95"][1]
    assert metrics["baseline"]["comparison"]["metric"] == "exact_match"
    # The tiny model learns the answer and to stop; the random base does neither.
    assert metrics["validation"]["eos_share"] >= 0.9
    assert metrics["test"]["exact_match"] > metrics["baseline"]["zero_shot"]["test"][
        "exact_match"]
    assert (run_dir / "report.html").read_text().count("<h2>Samples</h2>") == 1


def test_the_chat_template_is_saved_with_the_model(tiny_run, smol_tokenizer):
    _, run_dir, result, _ = tiny_run
    assert result.returncode == 0
    from entrena.tasks.llm_sft.tokenizer import build_tokenizer

    saved, original = build_tokenizer(str(run_dir / "model")), build_tokenizer(smol_tokenizer)
    assert saved.chat_template == original.chat_template
    meta = json.loads((run_dir / "model" / "entrena_model.json").read_text())
    assert meta["task"] == "llm-sft" and meta["format"] == "messages"


def test_the_run_is_registered_as_an_mlflow_chat_model_that_answers_as_chat_does(tiny_run):
    """Training registers the run as an MLflow chat model (OpenAI's chat schema); loaded
    from the registry it answers a conversation with the text `entrena chat` gives, counts
    its tokens, and a bad request is MLflow's INVALID_PARAMETER_VALUE (HTTP 400)."""
    import mlflow
    from mlflow.exceptions import MlflowException

    from entrena.api.chatting import open_session

    work, run_dir, result, _ = tiny_run
    assert result.returncode == 0
    assert "MLflow model: models:/tiny-llm/1" in result.stderr
    question = chats(1, start=300)[0]["messages"][:1]
    session, _ = open_session(run_dir, max_new_tokens=8)
    expected = session.answer(question)
    mlflow.set_tracking_uri(f"sqlite:///{work / 'runs' / 'mlflow.db'}")
    try:
        model = mlflow.pyfunc.load_model("models:/tiny-llm/1")
    finally:
        mlflow.set_tracking_uri(None)
    answer = model.predict({"messages": question, "max_tokens": 8})
    choice = answer["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": expected.text}
    assert expected.text in ("great", "other")  # the tiny model learnt the answers
    assert choice["finish_reason"] == "stop" and answer["model"] == "tiny-llm"
    assert answer["usage"]["prompt_tokens"] == expected.prompt_tokens
    assert answer["usage"]["completion_tokens"] == expected.completion_tokens
    with pytest.raises(MlflowException, match=r"messages\[0\]\.role 'robot'") as bad:
        model.predict({"messages": [{"role": "robot", "content": "hi"}]})
    assert bad.value.error_code == "INVALID_PARAMETER_VALUE"
    with pytest.raises(MlflowException, match="give n 1"):
        model.predict({"messages": question, "n": 2})


def test_a_chat_answer_takes_a_system_message_and_stops_at_max_tokens(tiny_run):
    """A leading system message replaces the training one (none here); an answer cut at
    max_new_tokens says `length`; malformed conversations are one line each."""
    from entrena.api.chatting import open_session

    _, run_dir, _, _ = tiny_run
    session, _ = open_session(run_dir, max_new_tokens=8)
    question = chats(1, start=301)[0]["messages"][:1]
    cut = session.answer(question, max_new_tokens=1)
    assert (cut.completion_tokens, cut.finish_reason) == (1, "length")
    system = {"role": "system", "content": "Answer in one word."}
    told = session.answer([system, *question])
    rendered = session.tokenizer.apply_chat_template([system, *question], tokenize=False,
                                                     add_generation_prompt=True)
    assert told.prompt_tokens == len(session.tokenizer(rendered, add_special_tokens=False)
                                     ["input_ids"])
    assert told.prompt_tokens != session.answer(question).prompt_tokens  # not the default
    for messages, words in [
            ([], "at least one"),
            ([{"role": "user", "content": 3}], "messages[0].content"),
            ([{"role": "system", "content": "x"}], "add the user's turn"),
            ([*question, {"role": "system", "content": "x"}], "a system message goes first")]:
        with pytest.raises(DataError, match=re.escape(words)):
            session.answer(messages)


def test_serve_plans_mlflow_for_a_chat_run_without_gguf(tiny_run):
    """`entrena serve RUN` of an LLM run with no GGUF bundle: MLflow's server on the chat
    model it writes (loadable, answering), a curl line with messages; --engine llama.cpp
    is refused in one line."""
    import mlflow

    from entrena.api.serving import serve_plan

    _, run_dir, _, _ = tiny_run
    plan = serve_plan(run_dir, port=5123)
    assert plan.engine == "mlflow" and plan.url == "http://127.0.0.1:5123/invocations"
    assert '"messages": [{"role": "user"' in plan.curl
    answer = mlflow.pyfunc.load_model(plan.model).predict(
        {"messages": chats(1, start=302)[0]["messages"][:1], "max_tokens": 4})
    assert answer["choices"][0]["message"]["role"] == "assistant"
    with pytest.raises(DataError, match="no GGUF model to serve with llama.cpp"):
        serve_plan(run_dir, engine="llama.cpp", write=False)
    with pytest.raises(ConfigError, match="--engine 'vllm'"):
        serve_plan(run_dir, engine="vllm", write=False)


def test_predict_writes_generated_text_for_every_row(tiny_run):
    work, _, _, predicted = tiny_run
    assert predicted.returncode == 0, predicted.stderr[-3000:]
    rows = [json.loads(line) for line in (work / "out.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == list(range(6))
    assert all(isinstance(r["generated_text"], str) for r in rows)
    assert sum(r["generated_text"] in ("great", "other") for r in rows) >= 4


def test_predict_input_errors_say_how_and_text_column_is_refused(tiny_run, tmp_path):
    # Before: a missing 'messages' column gave no fix, and --text-column was silently ignored.
    _, run_dir, result, _ = tiny_run
    assert result.returncode == 0, result.stderr[-3000:]
    (tmp_path / "in.csv").write_text("text\nhello\n")
    missing = run_cli("predict", run_dir, "-i", "in.csv", "-o", "out.csv", cwd=tmp_path)
    assert missing.returncode == 2, missing.stderr
    line = missing.stderr.strip().splitlines()[-1]
    assert line.startswith("error: in.csv: column(s) 'messages' needed by the messages format "
                           "are missing; columns are: 'text'; give rows shaped as the training")
    ignored = run_cli("predict", run_dir, "-i", "in.csv", "-o", "out.csv", "--text-column",
                      "text", cwd=tmp_path)
    assert ignored.returncode == 2, ignored.stderr
    assert ignored.stderr.strip().splitlines()[-1] == (
        "error: --text-column 'text': a chat model reads the columns it was trained on "
        "('messages'), not one named here; leave --text-column out and rename the input's "
        "columns")
    assert not (tmp_path / "out.csv").exists()


def test_any_two_class_csv_trains_through_the_demo_config(tmp_path, smol_tokenizer):
    """Done-when 2 where it can be checked in seconds: the shipped reviews-chat config with
    only the data keys the issue names overridden (train, test, template, response column)
    takes another two-class CSV (other column names, other labels) and ends above the
    zero-shot baseline with >= 90% of generations ending in EOS. The tiny random model
    stands in for SmolLM2 (so it is fully fine-tuned: random weights learn nothing through
    adapters in a few steps); the real model's run is in docs/benchmarks.md."""
    import entrena

    spam = ["win cash now", "free prize inside", "claim your reward", "cheap pills today"]
    ham = ["see you at lunch", "the meeting moved", "call mum tonight", "notes from class"]
    for name, start, n in (("sms_train.csv", 0, 48), ("sms_test.csv", 500, 16)):
        lines = ["message,kind"] + [
            f"{(spam if i % 2 else ham)[i % 4]} #{i},{'spam' if i % 2 else 'ham'}"
            for i in range(start, start + n)]
        (tmp_path / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    root = Path(__file__).resolve().parents[1]
    result = entrena.train(
        root / "examples" / "reviews-chat" / "config.yaml", run_dir=tmp_path / "run",
        overrides=[f"data.train={tmp_path / 'sms_train.csv'}",
                   f"data.test={tmp_path / 'sms_test.csv'}",
                   'data.prompt_template="Message: {message}\\nIs it spam or ham?"',
                   "data.response_column=kind",
                   # the tiny stand-in model and a schedule that fits it
                   f"model.architecture={json.dumps(ARCH)}", f"model.tokenizer={smol_tokenizer}",
                   "model.finetuning=full", "model.max_length=64",
                   "data.validation_fraction=0.25", "train.max_epochs=6", "train.batch_size=4",
                   "train.learning_rate=3e-2", "train.num_threads=1", "tracking.enabled=false"])
    metrics = result.metrics
    zero = metrics["baseline"]["zero_shot"]["test"]
    assert metrics["test"]["exact_match"] > zero["exact_match"]
    for split in ("validation", "test"):
        assert metrics[split]["eos_share"] >= 0.9, split
    assert json.loads((tmp_path / "run" / "model" / "entrena_model.json").read_text())[
        "prompt_template"] == "Message: {message}\nIs it spam or ham?"


# --- bad input: one line, exit 2 ------------------------------------------------------------

BAD_INPUT = {
    "no_messages": ([chats(1)[0], {"prompt": "x", "completion": "y"}],
                    {"format": "messages"}, "line 2 has no 'messages'"),
    "unknown_role": ([{"messages": [{"role": "robot", "content": "hi"},
                                    {"role": "assistant", "content": "great"}]}],
                     {}, "turn 1 has role 'robot'; roles are system, user, assistant"),
    "no_assistant": ([{"messages": [{"role": "user", "content": "hi"}]}], {},
                     "the conversation has no assistant turn"),
    "missing_column": (None, {"prompt_template": "Review: {review} {stars}",
                              "response_column": "score"},
                       "data.prompt_template names column 'stars', which the data lacks"),
    "long_response": ([{"messages": [{"role": "user", "content": "hi"},
                                     {"role": "assistant", "content": "word " * 80}]}],
                      {}, "responses are never cut"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
def test_bad_data_is_refused_with_one_line(tmp_path, smol_tokenizer, case):
    rows, data, message = BAD_INPUT[case]
    if rows is None:
        (tmp_path / "train.csv").write_text("review,score\nnice,great\nbad,other\n")
        data = {**data, "train": str(tmp_path / "train.csv")}
    else:
        write_jsonl(tmp_path / "train.jsonl", rows * 4)
    with pytest.raises(DataError, match=message.replace("(", r"\(").replace(")", r"\)")
                       ) as caught:
        prepare(tmp_path, smol_tokenizer,
                data={**data, "checks": {"exact_duplicates": "warn", "leakage": "warn"}})
    assert "\n" not in str(caught.value)


def test_qlora_on_a_cpu_is_refused_at_the_command_line_with_exit_2(tmp_path, smol_tokenizer):
    write_jsonl(tmp_path / "train.jsonl", chats(8))
    cfg = config(tmp_path, smol_tokenizer, model={"finetuning": "qlora"},
                 train={"accelerator": "cpu"})
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    result = run_cli("train", "config.yaml", cwd=tmp_path, timeout=120)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines == [lines[-1]] and lines[0].startswith("error: model.finetuning = 'qlora' "
                                                        "needs a CUDA GPU")
    assert not (tmp_path / "runs").exists()


def test_a_bad_jsonl_line_exits_2_at_the_command_line(tmp_path, smol_tokenizer):
    write_jsonl(tmp_path / "train.jsonl", chats(4) + [{"messages": [
        {"role": "user", "content": "hi"}]}])
    cfg = config(tmp_path, smol_tokenizer)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    result = run_cli("train", "config.yaml", cwd=tmp_path, timeout=120)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("error: data.train: ") and "line 5" in lines[-1]
    assert "Traceback" not in result.stderr


def test_shared_keys_the_task_cannot_honour_are_refused(tmp_path, smol_tokenizer):
    write_jsonl(tmp_path / "train.jsonl", chats(4))
    with pytest.raises(ConfigError, match="data.group_column does not apply"):
        prepare(tmp_path, smol_tokenizer, data={"group_column": "id"})


def test_evaluation_generations_equal_plain_greedy_decoding(smol_tokenizer):
    """Rows whose reference is the model's own greedy output take the shortcut (no
    decoding); the others are decoded; both must equal plain greedy decoding."""
    from entrena.tasks.llm_sft.model import build_sft_model, greedy_generate
    from entrena.tasks.llm_sft.tokenizer import build_tokenizer

    tokenizer = build_tokenizer(smol_tokenizer)
    torch.manual_seed(0)
    model = build_sft_model(pretrained=None, architecture=ARCH, tokenizer=tokenizer,
                            finetuning="full", lora={}, dropout=0.0, max_new_tokens=3,
                            gradient_checkpointing=False).eval()
    prompts = [torch.tensor(tokenizer(text, add_special_tokens=False)["input_ids"])
               for text in ("the coffee was tasty", "stale beans again and again", "hi",
                            "a lovely cup of tea")]
    greedy = greedy_generate(model.lm, prompts, max_new_tokens=3, eos_token_id=model.eos_token_id,
                             pad_token_id=model.pad_token_id)
    responses = [greedy[0][greedy[0] >= 0], torch.tensor([5, 6, 7]),
                 greedy[2][greedy[2] >= 0], torch.tensor([9])]
    sequences = [torch.cat([p, r]) for p, r in zip(prompts, responses, strict=True)]
    width = max(len(s) for s in sequences)
    ids = torch.full((4, width), model.pad_token_id)
    mask, target = torch.zeros_like(ids), torch.zeros_like(ids)
    for row, (p, s) in enumerate(zip(prompts, sequences, strict=True)):
        ids[row, :len(s)], mask[row, :len(s)], target[row, len(p):len(s)] = s, 1, 1
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, target_mask=target)
    assert out.shape == (4, 2 + 3)
    assert torch.equal(out[:, 2:].long(), greedy)


def test_the_zero_shot_baseline_runs_at_the_runs_precision(tmp_path, smol_tokenizer,
                                                            monkeypatch):
    """Under bf16-mixed the base model's zero-shot answers are computed as the tuned model's
    evaluation is (bf16 autocast), not in fp32 beside it."""
    from entrena.api import train
    from entrena.tasks.llm_sft.task import LlmSftTask

    seen = []
    original = LlmSftTask.baselines

    def recording(self, loaded, prepared):
        seen.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")))
        return original(self, loaded, prepared)

    monkeypatch.setattr(LlmSftTask, "baselines", recording)
    write_jsonl(tmp_path / "train.jsonl", chats(16))
    cfg = config(tmp_path, smol_tokenizer, train={"precision": "bf16-mixed", "max_steps": 2},
                 model={"finetuning": "full"})
    result = train(cfg, run_dir=tmp_path / "run")
    assert seen == [(True, torch.bfloat16)]
    assert set(result.metrics["baseline"]["zero_shot"]["validation"]) == {
        "exact_match", "eos_share", "exact_match_ci95", "prompts"}


def test_predict_of_a_missing_input_file_says_to_check_the_path(tmp_path):
    # Before: "--input prompts.jsonl: file not found", with no fix. The file is checked before
    # the model is read, so no model is needed here.
    from types import SimpleNamespace

    from entrena.tasks.llm_sft.predict import predict_chats

    location, options = SimpleNamespace(meta={}), SimpleNamespace(input_column=None)
    with pytest.raises(DataError) as caught:
        predict_chats(location, Path("prompts.jsonl"), tmp_path / "out.jsonl", options)
    assert str(caught.value) == (f"--input prompts.jsonl: file not found; check the path (cwd "
                                 f"is {tmp_path})")
    with pytest.raises(DataError) as caught:
        predict_chats(location, tmp_path / "p.jsonl", tmp_path / "out.jsonl", options)
    assert str(caught.value) == f"--input {tmp_path / 'p.jsonl'}: file not found; check the path"
    assert not (tmp_path / "out.jsonl").exists()


def test_the_torch_generator_answers_in_batches_as_one_prompt_at_a_time(smol_tokenizer):
    """Prompts of different lengths, sorted into batches and left-padded, get the answers
    they get alone, returned in the prompts' order (export parity and predict use it)."""
    from entrena.tasks.llm_sft.generators import TorchGenerator
    from entrena.tasks.llm_sft.model import build_sft_model, greedy_generate
    from entrena.tasks.llm_sft.tokenizer import build_tokenizer

    tokenizer = build_tokenizer(smol_tokenizer)
    torch.manual_seed(1)
    model = build_sft_model(pretrained=None, architecture=ARCH, tokenizer=tokenizer,
                            finetuning="full", lora={}, dropout=0.0, max_new_tokens=4,
                            gradient_checkpointing=False).eval()
    texts = ["a lovely cup of tea, strong and hot", "hi", "stale beans again and again",
             "the coffee was tasty", "ok", "bitter, burnt and far too expensive for it"]
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]

    def answers(batch_size):
        return TorchGenerator(model.lm, eos_token_id=model.eos_token_id,
                              pad_token_id=model.pad_token_id,
                              batch_size=batch_size).generate(texts, ids, 4)

    alone = [[int(t) for t in greedy_generate(
        model.lm, [torch.tensor(p)], max_new_tokens=4, eos_token_id=model.eos_token_id,
        pad_token_id=model.pad_token_id)[0].tolist() if t >= 0] for p in ids]
    for batch_size in (1, 4):
        got = answers(batch_size)
        assert got.ids == alone
        assert got.prompt_ids == ids
    assert len({tuple(a) for a in alone}) > 1  # the prompts get different answers


# --- exact resume ---------------------------------------------------------------------------

class _Crash:
    """A callback that kills the fit (an exception, as a crash) after step ``at``."""

    def __init__(self, at: int):
        self.at = at

    def __getattr__(self, name):
        if name.startswith("on_"):
            return lambda state: None
        raise AttributeError(name)

    def on_step_end(self, state):
        if state.step == self.at:
            raise RuntimeError("simulated crash")

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


def _adapter(run_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(run_dir / "model" / "adapter" / "adapter_model.safetensors"))


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_a_crashed_lora_run_resumes_to_the_same_adapter_weights(tmp_path, smol_tokenizer,
                                                                precision):
    """bf16-mixed stores the frozen base in bfloat16 (engine/frozen.py): the resumed run
    builds and casts it again, to the same weights."""
    import entrena

    write_jsonl(tmp_path / "train.jsonl", chats(24))
    cfg = config(tmp_path, smol_tokenizer, model={"lora": {"r": 4, "alpha": 8, "dropout": 0.1}},
                 train={"max_epochs": 2, "batch_size": 4, "gradient_accumulation_steps": 2,
                        "checkpoint": {"every_steps": 2}, "precision": precision})
    entrena.train(cfg, run_dir=tmp_path / "straight")
    with pytest.raises(RuntimeError, match="simulated crash"):
        entrena.train(cfg, run_dir=tmp_path / "crashed", callbacks=[_Crash(at=3)])
    resumed = entrena.train(cfg, run_dir=tmp_path / "crashed")
    assert resumed.resumed_from_step == 2
    straight, again = _adapter(tmp_path / "straight"), _adapter(tmp_path / "crashed")
    assert straight.keys() == again.keys() and len(straight) == 2 * 7 * 2
    for key in straight:
        assert torch.equal(straight[key], again[key]), key
    assert any(bool(v.abs().sum()) for k, v in straight.items() if "lora_B" in k)  # it trained
    stored = "frozen weights:" in (tmp_path / "straight" / "train.log").read_text()
    assert stored == (precision == "bf16-mixed")


@pytest.mark.slow
def test_a_sigkilled_lora_run_resumes_to_the_same_adapter_weights(tmp_path, smol_tokenizer):
    """The real process killed with SIGKILL after a checkpoint, then the same command."""
    import signal
    import subprocess
    import time

    from conftest import clean_env, entrena_command

    write_jsonl(tmp_path / "train.jsonl", chats(32))
    cfg = config(tmp_path, smol_tokenizer, model={"lora": {"r": 4, "alpha": 8, "dropout": 0.1}},
                 train={"max_epochs": 3, "batch_size": 4, "checkpoint": {"every_steps": 2},
                        "log_every_steps": 1})
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    assert run_cli("train", "config.yaml", "--run-dir", "straight", cwd=tmp_path).returncode == 0
    command = [*entrena_command(), "train", "config.yaml", "--run-dir", "killed"]
    process = subprocess.Popen(command, cwd=tmp_path, env=clean_env(),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    checkpoints = tmp_path / "killed" / "checkpoints"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        if len(list(checkpoints.glob("step-*.pt"))) >= 2:  # mid-run, past two saves
            break
        time.sleep(0.05)
    assert process.poll() is None, "the run ended before it could be killed"
    process.send_signal(signal.SIGKILL)
    process.wait()
    resumed = run_cli("train", "config.yaml", "--run-dir", "killed", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming from step" in resumed.stderr
    straight, again = _adapter(tmp_path / "straight"), _adapter(tmp_path / "killed")
    for key in straight:
        assert torch.equal(straight[key], again[key]), key


@pytest.mark.slow
def test_real_smollm2_learns_the_reviews_answer_format(tmp_path, reviews_data):
    """A reduced demo: SmolLM2-135M, LoRA, 96 training reviews, 48 test reviews."""
    import entrena

    root = Path(__file__).resolve().parents[1]
    result = entrena.train(root / "examples" / "reviews-chat" / "config.yaml",
                           run_dir=tmp_path / "run",
                           overrides=["data.max_train_samples=96", "data.max_eval_samples=48",
                                      "data.validation_fraction=0.02", "tracking.enabled=false"])
    metrics = result.metrics
    zero = metrics["baseline"]["zero_shot"]["test"]
    assert metrics["test"]["eos_share"] >= 0.9
    assert metrics["test"]["exact_match"] >= zero["exact_match"] + 0.2
    assert (tmp_path / "run" / "model" / "adapter" / "adapter_model.safetensors").is_file()


def test_gradient_checkpointing_gives_the_same_gradients(smol_tokenizer):
    from entrena.tasks.llm_sft.model import build_sft_model
    from entrena.tasks.llm_sft.tokenizer import build_tokenizer

    tokenizer = build_tokenizer(smol_tokenizer)
    ids = torch.randint(10, 1000, (2, 12))
    mask, target = torch.ones_like(ids), torch.zeros_like(ids)
    target[:, -3:] = 1
    grads = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        model = build_sft_model(pretrained=None, architecture=ARCH, tokenizer=tokenizer,
                                finetuning="lora", lora={"r": 4, "alpha": 8, "dropout": 0.0,
                                                         "target_modules": "all-linear"},
                                dropout=0.0, max_new_tokens=2,
                                gradient_checkpointing=checkpointing)
        assert model.causal_lm.model.gradient_checkpointing is checkpointing
        for name, p in model.named_parameters():  # non-zero B, so A gets a gradient too
            if "lora_B" in name:
                torch.nn.init.normal_(p, std=0.1)
        out = model(input_ids=ids, attention_mask=mask, target_mask=target)
        (out[:, 0].sum() / out[:, 1].sum()).backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad})
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name], rtol=1e-4, atol=1e-6)


def test_wilson_interval_matches_published_values():
    """Wilson (1927) 95% intervals: 0 of 10 → [0, 0.2775], 5 of 10 → [0.2366, 0.7634]
    (Newcombe, 1998, Stat. Med. 17:857, table I)."""
    from entrena.tasks.llm_sft.evaluation import wilson_interval

    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson_interval(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


@pytest.mark.parametrize("answer", [None, "great"])
def test_the_zero_shot_baseline_draws_prompts_until_its_score_is_settled(
        tmp_path, smol_tokenizer, monkeypatch, answer):
    """A base model that never answers in the trained form is settled after a few batches;
    one right half the time (always "great") needs the whole test split for ±0.05."""
    import entrena.tasks.llm_sft.model as sft_model
    from entrena.api import train

    if answer is not None:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(smol_tokenizer)
        ids = tok(answer, add_special_tokens=False).input_ids + [tok.eos_token_id]

        def always(lm, prompts, *, max_new_tokens, eos_token_id, pad_token_id, **_):
            out = torch.full((len(prompts), max_new_tokens), -1, dtype=torch.long)
            out[:, :min(len(ids), max_new_tokens)] = torch.tensor(ids[:max_new_tokens])
            return out

        monkeypatch.setattr(sft_model, "greedy_generate", always)
    write_jsonl(tmp_path / "train.jsonl", chats(16))
    write_jsonl(tmp_path / "test.jsonl", chats(120, start=500))
    cfg = config(tmp_path, smol_tokenizer, data={"test": str(tmp_path / "test.jsonl")},
                 train={"max_steps": 1, "eval_batch_size": 8}, model={"finetuning": "full"})
    zero = train(cfg, run_dir=tmp_path / "run").metrics["baseline"]["zero_shot"]["test"]
    low, high = zero["exact_match_ci95"]
    if answer is None:  # the random base answers nothing right: 40 prompts settle it
        assert zero["exact_match"] == 0.0 and zero["prompts"] == 40
        assert (high - low) / 2 <= 0.05
    else:
        assert zero["prompts"] == 120 and 0.4 < zero["exact_match"] < 0.6
        assert (high - low) / 2 > 0.05
