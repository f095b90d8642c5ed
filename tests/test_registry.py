"""The one hint function (``errors.closest_choice(s)``) and the one registry by name
(``core.registry.Registry``) behind tasks, callbacks and trackers."""

from __future__ import annotations

import importlib.metadata
from types import SimpleNamespace

import pytest

from entrena.core.registry import Registry
from entrena.errors import ConfigError, closest_choice, closest_choices


def test_one_cutoff_and_a_parameter_for_names_typed_in_part():
    assert closest_choice("trian", ["train", "data"]) == "train"
    assert closest_choice("qwen", ["qwen2.5-7b", "mistral-7b"]) is None
    # fragments: a choice that contains the name (or is contained) comes first, the nearest
    # in length; the cutoff stays the same, so that noise stays out
    assert closest_choice("qwen", ["qwen2.5-7b", "mistral-7b"], fragments=True) == "qwen2.5-7b"
    assert closest_choices("p4d", ["aws-p4de.24xlarge", "aws-p4d.24xlarge", "gcp-t4"], n=2,
                           fragments=True) == ["aws-p4d.24xlarge", "aws-p4de.24xlarge"]
    assert closest_choices("t4", ["gcp-t4"], fragments=True) == []  # 2 characters: too short
    assert closest_choice("spot", ["gcp-t4", "aws-p3.2xlarge"], fragments=True) is None
    assert closest_choice("bert", ["minilm-l6"], cutoff=0.75) is None
    assert closest_choices("resnet81", ["resnet18", "resnet101", "vit"], n=5) \
        == ["resnet18", "resnet101"]


def test_a_registry_finds_registered_shipped_and_declared_names(monkeypatch):
    declared = SimpleNamespace(name="plugged", load=lambda: "from a package")
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda group: [declared] if group == "entrena.widgets" else [])
    widgets: Registry[object] = Registry("widget", "train.widgets",
                                         builtin={"shipped": "json:dumps", "plain": 7},
                                      entry_point_group="entrena.widgets")
    widgets.register("mine", "registered")
    assert widgets.names() == ["mine", "plain", "plugged", "shipped"]
    assert widgets.get("mine") == "registered" and widgets.get("plain") == 7
    assert widgets.get("shipped") is __import__("json").dumps  # imported on first use
    assert widgets.get("plugged") == "from a package"
    widgets.register("plain", "replaced")  # a registered name wins over a shipped one
    assert widgets.get("plain") == "replaced" and "plugged" in widgets
    widgets.check(["mine", "plugged"])


def test_an_unknown_name_is_one_line_with_the_choices_and_the_closest():
    widgets: Registry[str] = Registry("widget", "train.widgets", builtin={"spinner": "x"})
    with pytest.raises(ConfigError) as info:
        widgets.check(["spinner", "spiner"])
    assert str(info.value) == ("train.widgets: unknown widget 'spiner'; choose from spinner; "
                               "did you mean 'spinner'?")
    empty: Registry[str] = Registry("widget", "train.widgets", none_known="none is registered")
    assert str(empty.unknown("x")) == "train.widgets: unknown widget 'x'; none is registered"
