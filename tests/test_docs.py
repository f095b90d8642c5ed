"""The README's config reference is generated from the schema and kept in step with it."""

from __future__ import annotations

import difflib
import subprocess
import sys
from pathlib import Path

import pytest

from entrena.config import schema
from entrena.config.reference import (
    END_MARKER,
    REGENERATE,
    START_MARKER,
    config_reference_markdown,
    config_reference_sections,
    main,
    replace_reference,
)

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def test_readme_holds_the_generated_config_reference():
    text = README.read_text(encoding="utf-8")
    assert text.count(START_MARKER) == 1 and text.count(END_MARKER) == 1, (
        f"README.md must contain {START_MARKER} and {END_MARKER} once each")
    expected = replace_reference(text, config_reference_markdown())
    if text != expected:
        diff = "".join(list(difflib.unified_diff(
            text.splitlines(keepends=True), expected.splitlines(keepends=True),
            "README.md", "generated", n=1))[:60])
        pytest.fail(f"the config reference in README.md is out of date with "
                    f"src/entrena/config/schema.py; regenerate it with:\n    {REGENERATE}\n{diff}")


def test_every_documented_key_has_a_description():
    rows = [row for section in config_reference_sections() for row in section.rows]
    missing = [row.key for row in rows if not row.description.strip()]
    assert not missing, f"config keys without a docstring in schema.py: {', '.join(missing)}"


def test_reference_covers_every_schema_field_and_section():
    sections = config_reference_sections()
    assert [s.key for s in sections] == [
        "", "data", "data.checks", "data.augmentation", "model", "model.architecture",
        "train", "train.early_stopping", "train.checkpoint", "tracking", "tune"]
    keys = {row.key for s in sections for row in s.rows}
    expected = {name for name in schema.Config.model_fields}
    for prefix, model in (("data", schema.DataConfig), ("data.checks", schema.DataChecksConfig),
                          ("data.augmentation", schema.AugmentationConfig),
                          ("model", schema.ModelConfig),
                          ("model.architecture", schema.ArchitectureConfig),
                          ("train", schema.TrainConfig),
                          ("train.early_stopping", schema.EarlyStoppingConfig),
                          ("train.checkpoint", schema.CheckpointConfig),
                          ("tracking", schema.TrackingConfig), ("tune", schema.TuneConfig)):
        expected |= {f"{prefix}.{name}" for name in model.model_fields}
    assert keys == expected


def test_reference_renders_types_defaults_and_descriptions():
    text = config_reference_markdown()
    assert text == config_reference_markdown()  # deterministic
    assert ("| `train.learning_rate` | number > 0 | `0.0001` | Peak learning rate of AdamW. |"
            in text)
    assert "| `data.train` | string | required |" in text
    assert "| `data.on_bad_rows` | `skip` or `error` | `skip` |" in text
    assert "| `model.max_length` | `auto` or integer ≥ 8 | `auto` |" in text
    assert "| `train.max_steps` | integer ≥ 1 or `null` | `null` |" in text
    assert "| `data.validation_fraction` | number, 0 < x < 1 | `0.1` |" in text
    assert "### `train.early_stopping`" in text
    for line in text.splitlines():
        if line.startswith("| `"):
            assert "\n" not in line and line.count(" | ") == 3, line


def test_write_replaces_only_the_text_between_the_markers(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text(f"# title\n\nbefore\n{START_MARKER}\nstale\n{END_MARKER}\nafter\n")
    assert main(["--write", str(readme)]) == 0
    text = readme.read_text()
    assert text.startswith(f"# title\n\nbefore\n{START_MARKER}\n\n_Generated")
    assert text.endswith(f"\n\n{END_MARKER}\nafter\n")
    assert "stale" not in text and config_reference_markdown() in text
    assert main(["--write", str(readme)]) == 0 and readme.read_text() == text  # idempotent


def test_write_refuses_a_file_without_markers(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text("# no markers here\n")
    assert main(["--write", str(readme)]) == 2
    assert "expected the markers" in capsys.readouterr().err
    assert readme.read_text() == "# no markers here\n"


def test_module_prints_the_reference_without_importing_torch():
    check = ("import sys, entrena.config.reference; "
             "assert 'torch' not in sys.modules, 'entrena.config.reference imported torch'")
    printed = subprocess.run([sys.executable, "-m", "entrena.config.reference"],
                             capture_output=True, text=True, check=True)
    assert printed.stdout == config_reference_markdown()
    subprocess.run([sys.executable, "-c", check], check=True)
