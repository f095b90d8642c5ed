"""report.html: every section present, every plot with data, no network references."""

from __future__ import annotations

import json
import re

import pytest

from entrena.api.reporting import report
from entrena.errors import ConfigError
from entrena.reporting import OPTIONAL_SECTIONS, SECTIONS
from entrena.reporting.formatting import human_name, human_value


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
        "plan_vs_actual": {"epoch_time_s": {"predicted": 1.0, "actual": 1.5},
                           "peak_memory_bytes": {"predicted": 8538411008,
                                                 "actual": 7 * 2**30}},
        "cost": {"usd": 0.0, "usd_per_hour": 0.0, "wall_time_s": 397.0,
                 "source": "free: not a known cloud instance"},
    }
    metrics["fit"].update({"epochs": 2, "threads": 2, "device": "cpu", "world_size": 1,
                           "throughput_tokens_per_s": 12345.6, "peak_memory_bytes": 8538411008})
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
        assert (f"<h2>{title}</h2>" in page) is (title not in OPTIONAL_SECTIONS)
    # 3 curves, 3 efficiency, confusion, plan vs actual
    assert page.count("data:image/png;base64,") == 8
    assert "no data recorded" not in page
    assert "does not beat" in page and "group_by_length" in page
    assert not re.search(r"(src|href)=['\"]https?:", page)  # renders without a network


def test_report_of_a_folder_that_is_not_a_run(tmp_path):
    with pytest.raises(ConfigError, match="not a run directory"):
        report(tmp_path)


def test_the_page_opens_with_a_headline_in_human_units(tmp_path):
    run_dir = tmp_path / "runs" / "r"
    write_run(run_dir)
    page = report(run_dir).read_text()
    headline = re.search(r"<p class='headline bad'>(.*?)</p>", page).group(1)
    assert re.sub(r"<[^>]+>", "", headline) == (
        "test accuracy 75.0% vs 80.0% for the TF-IDF + logistic regression baseline (the "
        "model does not beat it); 2 epochs in 6m 37s on 2 CPU cores; cost $0")
    assert page.index("class='headline") < page.index("<h2>")
    assert "title='free: not a known cloud instance'" in headline  # the price's source
    # no raw bytes, no internal keys, fractions as percentages, tooltips from METRIC_KEYS
    assert "8538411008" not in page and "throughput_tokens_per_s" not in page
    assert "8.0 GiB" in page and "12,346 tokens/s" in page and "40.0%" in page
    assert "title='real (unpadded) tokens per second [tokens/s]'" in page
    assert "1.5s" in page and "1.50x" in page  # plan vs actual: epoch time and its ratio


def test_the_headline_gives_the_interval_of_a_tie_within_the_noise():
    from entrena.reporting.headline import outcome_sentence

    verdict = {"split": "test", "metric": "accuracy", "model": 0.813, "best": "tfidf_logreg",
               "best_score": 0.8, "outcome": "ties", "difference": 0.013,
               "difference_ci": [-0.012, 0.037], "level": 0.95, "within_noise": True}
    text, style = outcome_sentence({"baseline": {"comparison": verdict}})
    assert style == "warn"
    assert text.endswith("(the model ties with it: within the noise, 95% interval of the "
                         "difference −1.2% to +3.7%)")
    verdict.update(outcome="beats", difference_ci=[0.01, 0.05], within_noise=False)
    assert outcome_sentence({"baseline": {"comparison": verdict}})[0].endswith(
        "(the model beats it: 95% interval of the difference +1.0% to +5.0%)")


@pytest.mark.parametrize(("key", "value", "shown"), [
    ("test.accuracy", 0.8634, "86.3%"), ("efficiency.mfu", 0.00021, "0.021%"),
    ("fit.peak_memory_bytes", 8538411008, "8.0 GiB"), ("fit.wall_time_s", 397.2, "6m 37s"),
    ("fit.throughput_samples_per_s", 1234.5, "1,234 samples/s"), ("cost.usd", 0.0421, "$0.042"),
    ("efficiency.peak_flops_per_s", 6.08e10, "60.8 GFLOP/s"), ("data.train_rows", 40000,
                                                                "40,000"),
    ("test.rmse", 12.3456, "12.35"), ("fit.restored_best_weights", True, "yes"),
])
def test_figures_are_shown_in_human_units(key, value, shown):
    assert human_value(key, value) == shown


@pytest.mark.parametrize(("key", "name"), [
    ("fit.throughput_tokens_per_s", "throughput, tokens"), ("test.macro_f1", "test macro-F1"),
    ("efficiency.peak_memory_bytes", "peak memory"), ("efficiency.data_wait_s",
                                                      "data wait time"),
    ("cost.usd", "cost"), ("validation.r2", "validation R²"),
])
def test_keys_are_named_in_words(key, name):
    assert human_name(key) == name


def test_an_llm_run_lists_its_samples_and_a_regressor_its_errors(tmp_path):
    run_dir = tmp_path / "runs" / "llm"
    write_run(run_dir)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    metrics["test"]["samples"] = [{"prompt": "Is <this> great?", "reference": "great",
                                   "generation": "other"}]
    (run_dir / "metrics.json").write_text(json.dumps(metrics))
    page = report(run_dir).read_text()
    samples = page.split("<h2>Samples</h2>")[1].split("</section>")[0]
    assert "Is &lt;this&gt; great?" in samples and "generation" in samples
    regressor = tmp_path / "runs" / "reg"
    write_run(regressor)
    metrics = json.loads((regressor / "metrics.json").read_text())
    metrics["validation"] = metrics["test"] = {"rmse": 2.0, "mae": 1.5, "r2": 0.8}
    metrics["baseline"] = {"mean": {"test": {"rmse": 5.0, "r2": 0.0}},
                           "comparison": {"split": "test", "metric": "rmse", "model": 2.0,
                                          "best": "mean", "best_score": 5.0,
                                          "outcome": "beats"}}
    (regressor / "metrics.json").write_text(json.dumps(metrics))
    (regressor / "predictions").mkdir()
    (regressor / "predictions" / "test.csv").write_text(
        "target,predicted_value\n1,1.5\n2,2.5\n3,2.0\n")
    page = report(regressor).read_text()
    assert "test RMSE 2 vs 5 for the training-mean baseline (the model beats it)" in page
    errors = page.split("<h2>Errors</h2>")[1].split("</section>")[0]
    assert errors.count("data:image/png;base64,") == 2  # predicted vs actual, residuals


def test_report_compare_writes_one_page_of_the_runs_side_by_side(tmp_path):
    from typer.testing import CliRunner

    from entrena.cli import app

    for name, learning_rate, accuracy, usd in (("a", 1e-3, 0.75, 0.0), ("b", 3e-4, 0.81, 0.5)):
        write_run(tmp_path / "runs" / name)
        (tmp_path / "runs" / name / "config.yaml").write_text(
            f"name: {name}\ntrain:\n  learning_rate: {learning_rate}\n  batch_size: 16\n")
        metrics = json.loads((tmp_path / "runs" / name / "metrics.json").read_text())
        metrics["test"]["accuracy"] = accuracy
        metrics["cost"]["usd"] = usd
        (tmp_path / "runs" / name / "metrics.json").write_text(json.dumps(metrics))
    result = CliRunner().invoke(app, ["report", "--compare", "runs/a", "runs/b"])
    assert result.exit_code == 0, result.output
    page = (tmp_path / "runs" / "compare.html").read_text()
    differences = page.split("<h2>Config differences</h2>")[1].split("</section>")[0]
    assert "train.learning_rate" in differences and "batch_size" not in differences
    assert "75.0%" in page and "81.0%" in page and "$0.500" in page
    curves = page.split("<h2>Curves</h2>")[1]
    assert curves.count("data:image/png;base64,") == 4  # training loss + 3 validation metrics
    assert not re.search(r"(src|href)=['\"]https?:", page)
    one = CliRunner().invoke(app, ["report", "--compare", "runs/a"])
    assert one.exit_code == 2 and "give two or more run directories" in one.output
    two = CliRunner().invoke(app, ["report", "runs/a", "runs/b"])
    assert two.exit_code == 2 and "add --compare to compare several" in two.output
    absent = CliRunner().invoke(app, ["report", "--compare", "runs/a", "nowhere"])
    assert absent.exit_code == 2 and "not a run directory" in absent.output
    assert "nowhere" in absent.output


def test_report_bad_files_and_output_folder_end_in_one_line(tmp_path, monkeypatch):
    # Before: an events.jsonl that is not UTF-8 and `--compare -o FOLDER` both ended in a
    # Python traceback (exit 1); any internal error of `report` did too.
    from typer.testing import CliRunner

    from entrena.cli import app

    for name in ("a", "b"):
        write_run(tmp_path / "runs" / name)
    with (tmp_path / "runs" / "b" / "events.jsonl").open("ab") as handle:
        handle.write(b"\xf2\x00garbage\xff\n")
    broken = CliRunner().invoke(app, ["report", "runs/b"])
    assert broken.exit_code == 0, broken.output
    assert (tmp_path / "runs" / "b" / "report.html").is_file()
    folder = CliRunner().invoke(app, ["report", "--compare", "runs/a", "runs/b", "-o", "runs"])
    assert folder.exit_code == 2, folder.output
    assert ("error: report --compare --output runs is a folder; give a file name such as "
            "runs/compare.html") in folder.output
    assert not (tmp_path / "runs" / "compare.html").exists()

    def crash(run_dir):
        raise RuntimeError("boom")

    monkeypatch.setattr("entrena.api.reporting.write_report", crash)
    internal = CliRunner().invoke(app, ["report", "runs/a"])
    assert internal.exit_code == 1, internal.output
    assert "error: internal error: RuntimeError: boom; rerun with --verbose" in internal.output
    assert "Traceback" not in internal.output


def test_report_compare_refuses_a_run_named_twice_and_a_file_it_did_not_write(tmp_path):
    # Before: `--compare runs/a runs/a` wrote a page comparing a run with itself, and
    # `-o notes.txt` replaced whatever notes.txt held; both exited 0.
    from typer.testing import CliRunner

    from entrena.cli import app

    for name in ("a", "b"):
        write_run(tmp_path / "runs" / name)
    twice = CliRunner().invoke(app, ["report", "--compare", "runs/a", "runs/a", "-o", "c.html"])
    assert twice.exit_code == 2, twice.output
    assert twice.output == ("error: report --compare: runs/a is named twice; give two or more "
                            "different run directories, e.g. entrena report --compare runs/a "
                            "runs/b\n")
    same = CliRunner().invoke(app, ["report", "--compare", "runs/a", "runs/b",
                                    str(tmp_path / "runs" / "a")])
    assert same.exit_code == 2, same.output
    assert f"runs/a and {tmp_path}/runs/a are the same run directory" in same.output
    assert not (tmp_path / "c.html").exists() and not (tmp_path / "runs" / "compare.html").exists()

    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    refused = CliRunner().invoke(app, ["report", "--compare", "runs/a", "runs/b", "-o",
                                       "notes.txt"])
    assert refused.exit_code == 2, refused.output
    assert refused.output == ("error: report --compare: notes.txt exists and is not a report "
                              "entrena wrote; choose another path with --output, or delete it "
                              "(an earlier report or comparison is replaced)\n")
    assert notes.read_text() == "my notes\n"
    (tmp_path / "runs" / "compare.html").write_text("<html>someone else's page</html>\n")
    default = CliRunner().invoke(app, ["report", "--compare", "runs/a", "runs/b"])
    assert default.exit_code == 2 and "runs/compare.html exists" in default.output

    first = CliRunner().invoke(app, ["report", "--compare", "runs/a", "runs/b", "-o", "c.html"])
    assert first.exit_code == 0, first.output
    again = CliRunner().invoke(app, ["report", "--compare", "runs/b", "runs/a", "-o", "c.html"])
    assert again.exit_code == 0, again.output  # an earlier comparison is replaced
    assert "2 runs: b, a" in (tmp_path / "c.html").read_text()
    report(tmp_path / "runs" / "a")
    over_report = CliRunner().invoke(app, ["report", "--compare", "runs/a", "runs/b", "-o",
                                           "runs/a/report.html"])
    assert over_report.exit_code == 0, over_report.output
