"""report.html: every section present, every plot with data, no network references."""

from __future__ import annotations

import json
import re

import pytest

from entrena.api.reporting import report
from entrena.errors import ConfigError
from entrena.reporting import SECTIONS


def write_run(run_dir):
    run_dir.mkdir(parents=True)
    metrics = {
        "validation": {"loss": 0.5, "accuracy": 0.8, "macro_f1": 0.7},
        "test": {"loss": 0.6, "accuracy": 0.75, "macro_f1": 0.7,
                 "per_class": {"a": {"precision": 0.8, "recall": 0.7, "f1": 0.75, "support": 10},
                               "b": {"precision": 0.7, "recall": 0.8, "f1": 0.75, "support": 10}},
                 "confusion_matrix": {"labels": ["a", "b"], "matrix": [[7, 3], [2, 8]]}},
        "fit": {"steps": 20, "train_time_s": 3.0},
        "baseline": {"majority": {"test": {"accuracy": 0.5, "macro_f1": 0.33}, "time_s": 0.01},
                     "tfidf_logreg": {"test": {"accuracy": 0.8, "macro_f1": 0.8}, "time_s": 1.0},
                     "comparison": {"split": "test", "metric": "accuracy", "model": 0.75,
                                    "best": "tfidf_logreg", "best_score": 0.8,
                                    "model_beats_baseline": False}},
        "efficiency": {"mfu": 0.1, "padding_fraction": 0.4},
        "diagnosis": [{"code": "padding_waste", "figure": "padding 40% of token slots",
                       "message": "padding waste", "change": "group_by_length"}],
        "plan_vs_actual": {"epoch_time_s": {"predicted": 1.0, "actual": 1.5}},
    }
    (run_dir / "metrics.json").write_text(json.dumps(metrics))
    events = []
    for step in range(10, 30, 10):
        events.append({"type": "step", "step": step, "loss": 1.0 / step, "learning_rate": 1e-3})
        events.append({"type": "efficiency", "step": step, "throughput_samples_per_s": 100.0,
                       "data_wait_fraction": 0.1, "padding_fraction": 0.4, "mfu": 0.1,
                       "peak_memory_bytes": 2**30})
        events.append({"type": "eval", "step": step,
                       "validation": {"loss": 0.5, "accuracy": 0.8, "macro_f1": 0.7}})
    (run_dir / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (run_dir / "data_report.json").write_text(json.dumps(
        {"rows": {"train": 40}, "splits": {"train": {"rows_read": 50, "exact_duplicates": 2}}}))


def test_report_has_every_section_and_every_plot_has_data(tmp_path):
    run_dir = tmp_path / "runs" / "r"
    write_run(run_dir)
    page = report(run_dir).read_text()
    for title in SECTIONS:
        assert f"<h2>{title}</h2>" in page
    assert page.count("data:image/png;base64,") == 7  # 3 curves, 3 efficiency, confusion
    assert "no data recorded" not in page
    assert "DOES NOT BEAT" in page and "group_by_length" in page
    assert not re.search(r"(src|href)=['\"]https?:", page)  # renders without a network


def test_report_of_a_folder_that_is_not_a_run(tmp_path):
    with pytest.raises(ConfigError, match="not a run directory"):
        report(tmp_path)
