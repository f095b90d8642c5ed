"""The task registry (``entrena.tasks.base``) and the task-specific config keys."""

from __future__ import annotations

import pytest

from entrena.config import load_config
from entrena.errors import ConfigError
from entrena.tasks.base import Task, get_task, register_task, task_names


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


def test_a_registered_task_is_found_by_name():
    class Fake:
        name = "fake-task"
        input_names = ("x",)

    register_task("fake-task", Fake)
    assert "fake-task" in task_names()
    assert isinstance(get_task("fake-task"), Fake)


def test_task_keys_get_their_defaults_only_for_their_task():
    text = load_config({"name": "x", "data": {"train": "t.csv"}}).config
    assert (text.data.text_column, text.data.drop_columns, text.model.hidden_sizes) == \
        ("text", None, None)
    table = load_config({"name": "x", "task": "tabular-classification",
                         "data": {"train": "t.csv"}}).config
    assert (table.data.text_column, table.data.drop_columns, table.model.hidden_sizes) == \
        (None, [], [256, 128])
    assert load_config(table).config == table  # a resolved config loads again


def test_a_key_of_another_task_is_refused_with_its_line(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("name: x\ntask: tabular-classification\ndata:\n  train: t.csv\n"
                    "  text_column: review\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == (
        f"{path}:5: data.text_column: only used by task text-classification, and this "
        "config's task is tabular-classification; remove data.text_column (or change task)")


def test_drop_columns_is_refused_for_text():
    with pytest.raises(ConfigError, match="data.drop_columns: only used by task "
                                          "tabular-classification"):
        load_config({"name": "x", "data": {"train": "t.csv", "drop_columns": ["id"]}})
