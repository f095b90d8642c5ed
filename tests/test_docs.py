"""The docs: the README is a short front door, every relative link resolves, and the reference
pages under docs/reference/ are generated from the code and kept in step with it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from entrena.cli.docs_reference import PAGES, expected_page, page_diff
from entrena.cli.docs_reference import main as docs_main
from entrena.config import schema
from entrena.config.reference import (
    END_MARKER,
    REGENERATE,
    START_MARKER,
    config_reference_markdown,
    config_reference_sections,
    main,
)
from entrena.core.metrics import METRIC_KEYS, metrics_reference_markdown

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
README_MAX_LINES = 300


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_reference_page_is_up_to_date_with_the_code(page):
    text = (ROOT / page.path).read_text(encoding="utf-8")
    expected = expected_page(page, text)
    if text != expected:
        pytest.fail(f"{page.path} is out of date with {page.source}; regenerate the reference "
                    f"pages with:\n    {REGENERATE}\n{page_diff(page, text, expected)}")


def test_the_regenerate_command_rewrites_a_stale_page_and_check_reports_it(tmp_path, capsys):
    for page in PAGES:
        (tmp_path / page.path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / page.path).write_text((ROOT / page.path).read_text(encoding="utf-8"))
    metrics_page = tmp_path / "docs/reference/metrics.md"
    metrics_page.write_text(metrics_page.read_text().replace("| `fit.steps` |", "| `fit.stale` |"))
    assert docs_main(["--check", "--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "docs/reference/metrics.md is out of date with METRIC_KEYS" in err
    assert f"regenerate them with: {REGENERATE}" in err
    assert "-| `fit.stale` |" in err and "+| `fit.steps` |" in err
    assert docs_main(["--root", str(tmp_path)]) == 0
    assert metrics_page.read_text() == (ROOT / "docs/reference/metrics.md").read_text()
    assert docs_main(["--check", "--root", str(tmp_path)]) == 0
    metrics_page.write_text("# no markers\n")
    assert docs_main(["--check", "--root", str(tmp_path)]) == 2
    assert "expected the markers" in capsys.readouterr().err


def test_readme_is_a_short_front_door():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines; the project's limit is {README_MAX_LINES}: move "
        "detail to a page under docs/ and link to it")
    text = "\n".join(lines)
    for needed in ("make demo", "make test", "docs/benchmarks.md"):
        assert needed in text


_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _relative_links(path: Path) -> list[str]:
    """The link targets of a Markdown file that are not URLs, anchors or mail addresses
    (fenced code blocks skipped)."""
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.DOTALL)
    return [t for t in _LINK.findall(text)
            if not re.match(r"^([a-z][a-z0-9+.-]*:|#)", t)]


def test_every_relative_link_points_at_a_file_that_exists():
    pages = [README, *sorted((ROOT / "docs").rglob("*.md"))]
    broken = [f"{page.relative_to(ROOT)}: {target}" for page in pages
              for target in _relative_links(page)
              if not (page.parent / target.split("#")[0]).exists()]
    assert broken == []
    assert len(pages) > 10


def test_mkdocs_nav_lists_every_page():
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    listed = set(re.findall(r":\s*([\w./-]+\.md)\s*$", nav, flags=re.MULTILINE))
    pages = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    assert pages == listed


def test_metrics_reference_lists_every_metric_key_once():
    text = metrics_reference_markdown()
    keys = re.findall(r"^\| `([^`]+)` \|", text, flags=re.MULTILINE)
    assert keys == list(METRIC_KEYS)
    assert all(m.description.strip() and m.unit is not None for m in METRIC_KEYS.values())


def test_every_documented_key_has_a_description():
    rows = [row for section in config_reference_sections() for row in section.rows]
    missing = [row.key for row in rows if not row.description.strip()]
    assert not missing, f"config keys without a docstring in schema.py: {', '.join(missing)}"


def test_reference_covers_every_schema_field_and_section():
    sections = config_reference_sections()
    assert [s.key for s in sections] == [
        "", "data", "data.checks", "model",
        "train", "train.early_stopping", "train.checkpoint", "tracking", "tune"]
    keys = {row.key for s in sections for row in s.rows}
    expected = {name for name in schema.Config.model_fields}
    for prefix, model in (("data", schema.DataConfig), ("data.checks", schema.DataChecksConfig),
                          ("model", schema.ModelConfig),
                          ("train", schema.TrainConfig),
                          ("train.early_stopping", schema.EarlyStoppingConfig),
                          ("train.checkpoint", schema.CheckpointConfig),
                          ("tracking", schema.TrackingConfig), ("tune", schema.TuneConfig)):
        expected |= {f"{prefix}.{name}" for name in model.model_fields}
    assert keys == expected


def test_each_task_lists_the_keys_it_adds():
    from entrena.config.reference import task_reference_sections
    from entrena.tasks.registry import builtin_config_schemas

    schemas = builtin_config_schemas()
    # a regression task's target transform and outliers, and early stopping and tuning on its
    # metrics
    regression_keys = {"data.target_transform", "data.target_outliers", "train.early_stopping",
                       "train.early_stopping.monitor", "tune.metric"}
    added = {name: {row.key for s in task_reference_sections(schema) for row in s.rows}
             for name, schema in schemas.items()}
    assert added == {
        "text-classification": {
            "task", "data.text_column", "data.pad_to_multiple_of", "data.multi_label",
            "data.multi_label.separator", "model.name", "model.architecture",
            "model.architecture.num_hidden_layers", "model.architecture.hidden_size",
            "model.architecture.num_attention_heads", "model.architecture.intermediate_size",
            "model.architecture.max_position_embeddings", "model.tokenizer", "model.max_length",
            "model.pooling", "model.attention_dropout", "model.attn_implementation"},
        "image-classification": {
            "task", "model.name", "data.image_column", "data.num_workers", "data.decoded_cache",
            "data.augmentation", "data.augmentation.random_resized_crop",
            "data.augmentation.crop_scale_min", "data.augmentation.horizontal_flip",
            "model.image_size", "model.pretrained", "model.weights_file"},
        "tabular-classification": {"task", "data.drop_columns", "data.number_format",
                                   "model.hidden_sizes"},
        "tabular-regression": {"task", "data.drop_columns", "data.number_format",
                               "model.hidden_sizes", *regression_keys},
        "text-regression": {
            "task", "data.text_column", "data.pad_to_multiple_of", "model.name",
            "model.architecture",
            "model.architecture.num_hidden_layers", "model.architecture.hidden_size",
            "model.architecture.num_attention_heads", "model.architecture.intermediate_size",
            "model.architecture.max_position_embeddings", "model.tokenizer", "model.max_length",
            "model.pooling", "model.attention_dropout", "model.attn_implementation",
            *regression_keys},
        "llm-sft": {
            "task", "data.format", "data.messages_column", "data.prompt_column",
            "data.completion_column", "data.prompt_template", "data.response_column",
            "data.system_prompt", "data.chat_template", "data.packing",
            "data.pad_to_multiple_of", "model.name", "model.architecture",
            "model.architecture.num_hidden_layers", "model.architecture.hidden_size",
            "model.architecture.num_attention_heads", "model.architecture.num_key_value_heads",
            "model.architecture.intermediate_size", "model.architecture.max_position_embeddings",
            "model.tokenizer", "model.dropout", "model.finetuning", "model.lora", "model.lora.r",
            "model.lora.alpha", "model.lora.dropout", "model.lora.target_modules",
            "model.lora.layers", "model.max_length", "model.max_new_tokens",
            "model.gradient_checkpointing",
            "model.shared_prefix", "model.attn_implementation", "model.base_dtype",
            "train.batch_size", "train.learning_rate", "train.max_epochs"}}
    text = config_reference_markdown(schemas)
    assert "### `task: tabular-classification`" in text
    assert "| `model.hidden_sizes` | list of integer ≥ 1 | `[256, 128]` |" in text


def test_reference_renders_types_defaults_and_descriptions():
    from entrena.tasks.registry import builtin_config_schemas

    text = config_reference_markdown(builtin_config_schemas())
    assert text == config_reference_markdown(builtin_config_schemas())  # deterministic
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
