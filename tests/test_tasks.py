"""The task registry (``entrena.tasks.registry``) and the task-specific config keys."""

from __future__ import annotations

import pytest

from entrena.errors import ConfigError
from entrena.tasks.base import Task
from entrena.tasks.registry import get_task, load_config, register_task, task_names


def test_text_task_is_registered_and_satisfies_the_protocol():
    task = get_task("text-classification")
    assert isinstance(task, Task)
    assert task.input_names == ("input_ids", "attention_mask")
    assert get_task("text-classification") is task  # made once


def test_unknown_task_lists_the_choices_and_the_closest():
    with pytest.raises(ConfigError) as info:
        get_task("text-clasification")
    message = str(info.value)
    assert "unknown task 'text-clasification'" in message
    assert "did you mean 'text-classification'?" in message
    assert "tabular-classification" in message


def test_a_registered_task_is_found_by_name(monkeypatch):
    from entrena.tasks import registry

    monkeypatch.setattr(registry.TASKS, "registered", {})
    monkeypatch.setattr(registry, "_INSTANCES", {})

    class Fake:
        name = "fake-task"
        input_names = ("x",)

    register_task("fake-task", Fake)
    assert "fake-task" in task_names()
    assert isinstance(get_task("fake-task"), Fake)


def test_a_saved_model_naming_an_unknown_task_says_where_and_how_to_fix_it(tmp_path):
    # Before: "task: unknown task 'tabular-clasification'; choose one of ...", as for a config:
    # neither the file that names it nor what to do about a saved model.
    import json

    from typer.testing import CliRunner

    from entrena.cli import app

    meta = tmp_path / "runs" / "x" / "model" / "entrena_model.json"
    meta.parent.mkdir(parents=True)
    meta.write_text(json.dumps({"task": "tabular-clasification"}))
    (tmp_path / "in.csv").write_text("a\n1\n")
    installed = ", ".join(task_names())
    result = CliRunner().invoke(app, ["predict", "runs/x", "-i", "in.csv", "-o", "out.csv"])
    assert result.exit_code == 2, result.output
    assert result.output == (
        "error: runs/x/model/entrena_model.json: the model's task 'tabular-clasification' is "
        f"not an installed task (installed: {installed}; did you mean 'tabular-classification'?)"
        "; install the package that provides it, or correct \"task\" in that file\n")
    assert not (tmp_path / "out.csv").exists()
    meta.write_text(json.dumps({"task": 7}))
    chat = CliRunner().invoke(app, ["chat", "runs/x"], input="")
    assert chat.exit_code == 2, chat.output
    assert chat.output.startswith("error: runs/x/model/entrena_model.json: the model's task 7 "
                                  "is not an installed task (installed: ")


def test_task_keys_get_their_defaults_only_for_their_task():
    text = load_config({"name": "x", "data": {"train": "t.csv"}}).config
    assert (text.task, text.data.text_column) == ("text-classification", "text")
    assert not hasattr(text.data, "drop_columns") and not hasattr(text.model, "hidden_sizes")
    table = load_config({"name": "x", "task": "tabular-classification",
                         "data": {"train": "t.csv"}}).config
    assert (table.data.drop_columns, table.model.hidden_sizes) == ([], [256, 128])
    assert not hasattr(table.data, "text_column")
    assert load_config(table).config == table  # a resolved config loads again


def test_an_unknown_task_in_a_config_names_its_line_and_the_choices(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("name: x\ntask: tabular-clasification\ndata:\n  train: t.csv\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(f"{path}:2: task: unknown task 'tabular-clasification'; "
                                      "choose from ")
    assert "did you mean 'tabular-classification'?" in str(info.value)


def test_a_key_of_another_task_given_with_set_names_the_task():
    with pytest.raises(ConfigError) as info:
        load_config({"name": "x", "data": {"train": "t.csv"}}, ["model.hidden_sizes=[8]"])
    assert str(info.value) == (
        "--set model.hidden_sizes: only used by task tabular-classification or "
        "tabular-regression, and this config's task is text-classification; remove "
        "model.hidden_sizes (or change task)")


def test_a_key_of_another_task_is_refused_with_its_line(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("name: x\ntask: tabular-classification\ndata:\n  train: t.csv\n"
                    "  text_column: review\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == (
        f"{path}:5: data.text_column: only used by task text-classification or "
        "text-regression, and this config's task is tabular-classification; remove "
        "data.text_column (or change task)")


def test_drop_columns_is_refused_for_text():
    with pytest.raises(ConfigError, match="data.drop_columns: only used by task "
                                          "tabular-classification"):
        load_config({"name": "x", "data": {"train": "t.csv", "drop_columns": ["id"]}})


# --- attention dropout (model.attention_dropout) ----------------------------------------------

def _text_config(**model: object) -> object:
    from entrena.tasks.text.config import TextClassificationConfig

    return TextClassificationConfig.model_validate(
        {"name": "t", "data": {"train": "t.csv", "text_column": "text",
                               "label_column": "label"}, "model": model})


def test_attention_dropout_auto_is_zero_on_a_cpu_and_the_checkpoints_elsewhere(monkeypatch):
    import entrena.hardware.detection as detection
    from entrena.tasks.text.config import resolve_attention_dropout

    cfg = _text_config()
    assert cfg.model.attention_dropout == "auto"
    monkeypatch.setattr(detection, "resolve_accelerator", lambda accelerator: "cpu")
    assert resolve_attention_dropout(cfg) == 0.0
    monkeypatch.setattr(detection, "resolve_accelerator", lambda accelerator: "cuda")
    assert resolve_attention_dropout(cfg) is None  # the checkpoint's own value
    assert resolve_attention_dropout(_text_config(attention_dropout=0.1)) == 0.1
    with pytest.raises(ValueError, match="attention_dropout"):
        _text_config(attention_dropout=1.5)


def test_attention_dropout_reaches_the_encoders_attention_layers():
    from transformers import DistilBertConfig

    from entrena.tasks.text.model import (
        attention_dropout_of,
        build_classifier,
        set_attention_dropout,
    )

    architecture = {"num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 2,
                    "intermediate_size": 64}

    def attention_ps(model: object) -> set[float]:
        return {m.dropout.p for name, m in model.named_modules()  # type: ignore[attr-defined]
                if name.endswith("attention.self")}

    kept = build_classifier(num_labels=2, pretrained=None, architecture=architecture,
                            vocab_size=100, pad_token_id=0, pooling="mean", dropout=0.1)
    assert attention_ps(kept) == {0.1} and attention_dropout_of(kept.encoder.config) == 0.1
    off = build_classifier(num_labels=2, pretrained=None, architecture=architecture,
                           vocab_size=100, pad_token_id=0, pooling="mean", dropout=0.1,
                           attention_dropout=0.0)
    assert attention_ps(off) == {0.0} and attention_dropout_of(off.encoder.config) == 0.0
    assert off.dropout.p == 0.1  # the head's dropout is model.dropout's, untouched
    assert kept.checkpoint_attention_dropout is None and off.checkpoint_attention_dropout == 0.1
    # DistilBERT names it attention_dropout.
    distil = DistilBertConfig()
    set_attention_dropout(distil, 0.0)
    assert distil.attention_dropout == 0.0 and attention_dropout_of(distil) == 0.0


def test_a_saved_model_carries_the_checkpoints_attention_dropout(tmp_path):
    """A run at attention dropout 0 (auto on a CPU) saves the checkpoint's 0.1 into
    config.json, so a later fine-tune from the folder on a GPU starts from it; the trained
    model in memory keeps the value it trained with."""
    from transformers import AutoConfig, AutoTokenizer

    from entrena.config.models import resolve_model_name
    from entrena.tasks.text.model import (
        attention_dropout_of,
        build_classifier,
        save_classifier,
    )

    architecture = {"num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 2,
                    "intermediate_size": 64, "attention_probs_dropout_prob": 0.2}
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_name("minilm-l6"))
    model = build_classifier(num_labels=2, pretrained=None, architecture=architecture,
                             vocab_size=tokenizer.vocab_size,
                             pad_token_id=tokenizer.pad_token_id, pooling="mean",
                             dropout=0.1, attention_dropout=0.0)
    save_classifier(model, tokenizer, tmp_path / "model", labels=["a", "b"], max_length=16)
    saved = AutoConfig.from_pretrained(tmp_path / "model")
    assert attention_dropout_of(saved) == 0.2
    assert attention_dropout_of(model.encoder.config) == 0.0


def _members_read_optionally() -> dict[str, set[str]]:
    """Names read with ``getattr(<task>, "name", …)`` / ``hasattr(<task>, "name")`` in src/,
    and with ``getattr(self.train, "name", …)`` in the loop (a batch source's)."""
    import re
    from pathlib import Path

    import entrena

    task_pattern = re.compile(r"(?:getattr|hasattr)\((?:task|get_task\([^()]*\)),\s*\"(\w+)\"")
    source_pattern = re.compile(r"getattr\(self\.train,\s*\"(\w+)\"")
    found: dict[str, set[str]] = {"task": set(), "batch_source": set()}
    for path in Path(entrena.__file__).parent.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        found["task"].update(task_pattern.findall(text))
        found["batch_source"].update(source_pattern.findall(text))
    return found


def test_every_optional_member_read_is_declared_and_documented():
    """The protocol says the whole truth: each task member the verbs read with a default is a
    declared member of Task or listed in OPTIONAL_HOOKS, each optional batch-source member in
    OPTIONAL_BATCH_SOURCE_HOOKS, and docs/adding-a-task.md names every optional one."""
    from pathlib import Path

    from entrena.tasks.base import OPTIONAL_BATCH_SOURCE_HOOKS, OPTIONAL_HOOKS

    read = _members_read_optionally()
    declared = set(Task.__annotations__) | {n for n in vars(Task) if not n.startswith("_")}
    assert read["task"], "the pattern found no optional member: it no longer matches the code"
    assert sorted(read["task"] - declared - set(OPTIONAL_HOOKS)) == []
    assert sorted(read["batch_source"] - set(OPTIONAL_BATCH_SOURCE_HOOKS)) == []
    assert sorted(set(OPTIONAL_HOOKS) - read["task"]) == []  # no stale entry either
    guide = (Path(__file__).resolve().parents[1] / "docs" / "adding-a-task.md").read_text()
    missing = [name for name in (*OPTIONAL_HOOKS, *OPTIONAL_BATCH_SOURCE_HOOKS)
               if f"`{name}" not in guide]
    assert missing == []
