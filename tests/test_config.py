"""Config errors from the issue's "Bad input" list, ``--set`` parsing, and the shipped examples."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import entrena
from conftest import EXAMPLES, build_config, run_cli, write_config
from entrena.api.training import _check_model_source
from entrena.config import Config, parse_overrides
from entrena.config.models import aliases_of, resolve_model_name
from entrena.errors import ConfigError, EntrenaError
from entrena.tasks.registry import load_config

TYPO_YAML = textwrap.dedent("""\
    name: typo
    data:
      train: data/train.csv
      text_column: text
    model:
      architecture: {num_hidden_layers: 2, hidden_size: 32, num_attention_heads: 2}
      tokenizer: minilm-l6
    train:
      max_epoch: 2
      batch_size: 8
    tracking:
      enabled: false
    """)


def _error(source, overrides=None) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(source, overrides)
    return str(info.value)


# --- typos in keys -------------------------------------------------------------------------

def test_key_typo_names_key_file_line_and_closest_key(tmp_path: Path):
    path = tmp_path / "config.yaml"
    path.write_text(TYPO_YAML)
    message = _error(path)
    assert f"{path}:9:" in message  # `max_epoch:` is on line 9
    assert "unknown key 'train.max_epoch'" in message
    assert "did you mean 'train.max_epochs'?" in message


def test_top_level_section_typo_suggests_section(tmp_path: Path):
    path = tmp_path / "config.yaml"
    path.write_text(TYPO_YAML.replace("tracking:", "trackin:"))
    message = _error(path)
    assert f"{path}:11: unknown key 'trackin'; did you mean 'tracking'?" in message


def test_unknown_key_without_close_match_lists_valid_keys(tmp_path: Path):
    path = tmp_path / "config.yaml"
    path.write_text(TYPO_YAML.replace("max_epoch:", "zzzzzz:"))
    message = _error(path)
    assert "unknown key 'train.zzzzzz'" in message
    assert "valid keys here: train.max_epochs, train.max_steps" in message


def test_all_errors_of_one_file_are_reported_together(tmp_path: Path):
    path = tmp_path / "config.yaml"
    path.write_text(TYPO_YAML.replace("batch_size: 8", "batch_size: -1"))
    lines = _error(path).splitlines()
    assert any(line.startswith(f"{path}:9: unknown key 'train.max_epoch'") for line in lines)
    assert any(line.startswith(f"{path}:10: train.batch_size = -1 is invalid") for line in lines)


# --- wrong types and out-of-range values ---------------------------------------------------

@pytest.mark.parametrize(("key", "value", "expected"), [
    ("train.batch_size", 0, "train.batch_size = 0 is invalid: Input should be greater than or "
                            "equal to 1"),
    ("train.batch_size", "eight", "train.batch_size = 'eight' is invalid: Input should be a "
                                  "valid integer"),
    ("train.learning_rate", -0.1, "train.learning_rate = -0.1 is invalid: Input should be "
                                  "greater than 0"),
    ("data.validation_fraction", 1.5, "data.validation_fraction = 1.5 is invalid: Input should "
                                      "be less than 1"),
    ("train.scheduler", "cosin", "train.scheduler = 'cosin' is invalid: Input should be "
                                 "'linear', 'cosine', 'wsd', 'plateau' or 'constant'"),
    ("train.early_stopping.monitor", "val_loss", "train.early_stopping.monitor = 'val_loss' is "
                                                 "invalid: must be one of validation.loss"),
    ("data.on_bad_rows", "drop", "data.on_bad_rows = 'drop' is invalid: Input should be 'skip' "
                                 "or 'error'"),
    ("model.architecture.hidden_size", 33, "hidden_size (33) must be a multiple of "
                                           "num_attention_heads (2)"),
    ("name", "my run", "name = 'my run' is invalid: String should match pattern"),
])
def test_invalid_value_message_names_key_value_and_rule(tmp_path, key, value, expected):
    path = write_config(build_config({key: value}), tmp_path / "config.yaml")
    message = _error(path)
    assert expected in message
    assert message.startswith(f"{path}:")  # the file and the line of the key


def test_missing_required_key_is_named():
    assert "missing required key 'data'; add it to the config" in _error({"name": "x"})


def test_wrong_type_for_union_field_names_the_real_key(tmp_path):
    path = write_config(build_config({"model.max_length": "abc"}), tmp_path / "config.yaml")
    message = _error(path)
    assert "model.max_length = 'abc' is invalid" in message
    assert "literal[" not in message and "constrained-int" not in message


def test_config_errors_are_value_errors_with_exit_code_2():
    with pytest.raises(ValueError) as info:
        load_config({"name": "x", "data": {"train": "t.csv"}, "train": {"batch_size": 0}})
    assert isinstance(info.value, EntrenaError) and info.value.exit_code == 2


def test_missing_config_file_and_invalid_yaml(tmp_path: Path):
    assert "nope.yaml: config file not found; check the path" in _error(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: tiny\ndata: [\n")
    assert f"{bad}:3: invalid YAML" in _error(bad)
    listing = tmp_path / "list.yaml"
    listing.write_text("- a\n- b\n")
    assert "the config must be a mapping of keys" in _error(listing)


# --- --set overrides -----------------------------------------------------------------------

def test_set_unknown_key_suggests_closest():
    message = _error(build_config(), ["train.max_epoch=3"])
    assert message == "--set train.max_epoch: no such config key; did you mean 'train.max_epochs'?"


def test_set_nested_unknown_key_suggests_closest():
    message = _error(build_config(), ["model.architecture.hidden_sise=64"])
    assert "did you mean 'model.architecture.hidden_size'?" in message


def test_set_typo_in_section_suggests_closest():
    message = _error(build_config(), ["trian.max_epochs=3"])
    assert "did you mean 'train" in message


def test_set_without_equals_sign():
    message = _error(build_config(), ["train.max_epochs"])
    assert "--set 'train.max_epochs': expected dotted.key=value" in message


def test_set_values_are_parsed_as_yaml_scalars():
    parsed = parse_overrides(["a=2", "b=0.5", "c=true", "d=False", "e=null", "f=abc", "g=1.0e-4",
                              "h=x=y", "i="])
    assert parsed == {"a": 2, "b": 0.5, "c": True, "d": False, "e": None, "f": "abc",
                      "g": 1.0e-4, "h": "x=y", "i": ""}
    assert type(parsed["a"]) is int and type(parsed["b"]) is float


def test_set_parses_exponent_numbers():
    assert parse_overrides(["x=1e-4", "y=1e3"]) == {"x": 1e-4, "y": 1000.0}


def test_set_overrides_reach_the_validated_config(tiny_data):
    config = load_config(build_config(), ["train.max_epochs=5", "train.gradient_clip_norm=null",
                                          "train.deterministic=true",
                                          "train.learning_rate=1e-4",
                                          "model.architecture.num_hidden_layers=1"]).config
    assert config.train.max_epochs == 5
    assert config.train.gradient_clip_norm is None
    assert config.train.deterministic is True
    assert config.train.learning_rate == pytest.approx(1e-4)
    assert config.model.architecture.num_hidden_layers == 1


def test_set_value_is_validated():
    assert "train.max_epochs = 0 is invalid" in _error(build_config(), ["train.max_epochs=0"])


# --- model aliases -------------------------------------------------------------------------

def test_unknown_alias_lists_aliases_and_closest():
    with pytest.raises(ConfigError) as info:
        resolve_model_name("minilm-l7")
    message = str(info.value)
    assert "model.name = 'minilm-l7' is not a known model alias" in message
    assert "did you mean 'minilm-l6'?" in message
    assert "aliases: " + ", ".join(aliases_of("encoder")) in message


def test_alias_error_comes_before_any_data_file_is_read(tmp_path):
    config = build_config({"model.tokenizer": "minilm-l7", "data.train": "missing/train.csv"})
    with pytest.raises(ConfigError, match="model.tokenizer = 'minilm-l7' is not a known model "
                                          "alias.*aliases: minilm-l6"):
        entrena.train(config)
    assert not (tmp_path / "runs").exists()


@pytest.fixture
def no_hub(tmp_path, monkeypatch) -> Path:
    """A Hub that refuses connections and an empty Hugging Face cache; returns the cache."""
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    return tmp_path / "hf-cache"


def test_a_canonical_hub_id_without_an_org_is_a_hub_id(no_hub, tmp_path, monkeypatch):
    snapshot = no_hub / "models--distilbert-base-uncased" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    assert resolve_model_name("distilbert-base-uncased") == "distilbert-base-uncased"  # cached
    older = tmp_path / "transformers-cache" / "models--org--tiny" / "snapshots" / "def"
    older.mkdir(parents=True)
    (older / "config.json").write_text("{}")
    monkeypatch.setenv("TRANSFORMERS_CACHE", str(tmp_path / "transformers-cache"))
    assert resolve_model_name("org/tiny") == "org/tiny"  # in the cache transformers reads
    with pytest.raises(ConfigError, match="is not a known model alias"):
        resolve_model_name("minilm-l7")  # a near miss of an alias stays a typo, not a hub id


def test_an_unreachable_hub_is_bad_input_at_once(no_hub, tmp_path):
    import time

    started = time.perf_counter()
    with pytest.raises(ConfigError) as info:
        resolve_model_name("org/nonexistent-model")
    assert time.perf_counter() - started < 5.0
    assert str(info.value).startswith(
        "model.name = 'org/nonexistent-model': cannot download it from http://127.0.0.1:9: no "
        "network (")
    assert str(info.value).endswith("); use a local folder (one with the model's config.json) "
                                    "or an alias (minilm-l6)")
    with pytest.raises(ConfigError, match="model.name = 'distilbert-base-uncased': cannot "
                                          "download it from http://127.0.0.1:9: no network"):
        resolve_model_name("distilbert-base-uncased")


def test_hf_hub_offline_without_the_model_cached_says_so(no_hub, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError) as info:
        resolve_model_name("bert-base-uncased", key="model.tokenizer")
    assert str(info.value) == (
        f"model.tokenizer = 'bert-base-uncased': cannot download it: HF_HUB_OFFLINE is set and "
        f"it is not in the local cache ({no_hub}); use a local folder (one with the model's "
        f"config.json) or an alias (minilm-l6)")


def test_train_with_an_unreachable_hub_model_exits_2_with_one_line(no_hub, tmp_path,
                                                                    config_file):
    config = build_config({"model.architecture": None, "model.tokenizer": None,
                           "model.name": "org/nonexistent-model"})
    result = run_cli("train", config_file(config), cwd=tmp_path, HF_ENDPOINT="http://127.0.0.1:9",
                     HF_HUB_CACHE=str(no_hub))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "error: model.name = 'org/nonexistent-model': cannot download it from "
        "http://127.0.0.1:9: no network ("), result.stderr
    assert not (tmp_path / "runs").exists()


def test_config_error_comes_before_any_data_file_is_read(tmp_path):
    config = build_config({"data.train": "missing/train.csv", "train.max_epoch": 1})
    with pytest.raises(ConfigError, match="unknown key 'train.max_epoch'"):
        entrena.train(config)
    assert not (tmp_path / "runs").exists()


def test_alias_resolves_to_shipped_model_folder():
    folder = Path(resolve_model_name("minilm-l6"))
    assert (folder / "config.json").is_file()


def test_model_directory_without_config_json_is_refused(tmp_path):
    (tmp_path / "empty_model").mkdir()
    with pytest.raises(ConfigError, match="the folder has no config.json"):
        resolve_model_name("empty_model", tmp_path)


# --- shipped examples -------------------------------------------------------------------

EXAMPLE_CONFIGS = sorted(EXAMPLES.glob("*/config.yaml"))


def test_there_are_example_configs():
    assert {p.parent.name for p in EXAMPLE_CONFIGS} >= {"reviews", "tiny"}


@pytest.mark.parametrize("path", EXAMPLE_CONFIGS, ids=lambda p: p.parent.name)
def test_example_config_loads_and_validates(path: Path, reviews_data, digits_data,
                                            credit_data, tickets_data, concrete_data,
                                            tate_data):
    loaded = load_config(path)
    assert isinstance(loaded.config, Config)
    assert loaded.base_dir == path.parent.resolve()
    sources = _check_model_source(loaded)
    if loaded.config.task == "text-classification":
        assert Path(sources["tokenizer"]).is_dir()
    for role in ("train", "validation", "test"):
        file = getattr(loaded.config.data, role)
        if file is not None:  # a file, or an image folder
            assert Path(loaded.resolve_path(file)).exists(), f"{path}: data.{role}"


def test_relative_data_paths_resolve_against_config_folder(tmp_path):
    path = write_config(build_config(), tmp_path / "sub" / "config.yaml")
    loaded = load_config(path)
    assert loaded.resolve_path("data/train.csv") == str(tmp_path / "sub" / "data" / "train.csv")
    assert loaded.resolve_path("/abs/x.csv") == "/abs/x.csv"
    assert loaded.resolve_path("s3://bucket/x.csv") == "s3://bucket/x.csv"


def test_a_bad_set_value_blames_set_not_the_files_line(tmp_path: Path):
    path = tmp_path / "config.yaml"
    path.write_text(TYPO_YAML.replace("max_epoch:", "max_epochs:"))  # max_epochs on line 9
    message = _error(path, ["train.max_epochs=two"])
    assert message.startswith("--set train.max_epochs: train.max_epochs = 'two' is invalid: ")
    assert f"{path}:9" not in message  # the file's value was fine; --set's was not
    assert _error(path, ["train.max_epochs=0"]).startswith("--set train.max_epochs: ")
    path.write_text(path.read_text().replace("batch_size: 8", "batch_size: 0"))
    assert _error(path, ["train.max_epochs=3"]).startswith(f"{path}:10: train.batch_size = 0")


def test_portable_dump_makes_relative_paths_absolute_and_keeps_aliases(tmp_path):
    (tmp_path / "local-model").mkdir()
    config = tmp_path / "config.yaml"
    config.write_text("name: t\ndata:\n  train: data/train.csv\n  test: https://example.com/t.csv\n"
                      "  text_column: review\n  label_column: score\n"
                      "model:\n  name: local-model\n  tokenizer: minilm-l6\n", encoding="utf-8")
    dumped = load_config(config).portable_dump()
    assert dumped["data"]["train"] == str((tmp_path / "data" / "train.csv").resolve())
    assert dumped["data"]["test"] == "https://example.com/t.csv"
    assert dumped["model"]["name"] == str((tmp_path / "local-model").resolve())
    assert dumped["model"]["tokenizer"] == "minilm-l6"


def test_config_file_mistakes_are_named_not_internal_errors(tmp_path: Path):
    path = tmp_path / "config.yaml"
    path.write_bytes("name: café\n".encode("latin-1"))  # was UnicodeDecodeError: exit 1
    assert _error(path) == f"{path}:1: byte 9 (0xe9) is not UTF-8; save the config as UTF-8"
    assert _error(tmp_path) == f"{tmp_path}: is a folder; give the config file (a .yaml file)"
    path.write_text("name: x\ndata:\n  train: a.csv\ntrain:\n  max_epochs: 2\ndata:\n"
                    "  test: b.csv\n")  # the second data: silently replaced the first
    assert _error(path) == (f"{path}:6: key 'data' is written twice (also line 2); YAML would "
                            "keep only this one: merge them")
    path.write_text("name: x\ntrain:\n  max_epochs: 2\n  max_epochs: 3\n")
    assert _error(path).startswith(f"{path}:4: key 'train.max_epochs' is written twice")


def test_a_scalar_where_a_list_belongs_shows_the_list_to_write(tmp_path: Path):
    path = tmp_path / "config.yaml"
    path.write_text("name: t\ntask: tabular-classification\ndata:\n  train: a.csv\n"
                    "  label_column: y\n  drop_columns: id\n")
    assert _error(path) == (f"{path}:6: data.drop_columns = 'id' is invalid: Input should be a "
                            "valid list; write a list, e.g. [id]")
    assert _error(path, ["model.hidden_sizes=64"]).endswith("write a list, e.g. [64]")
