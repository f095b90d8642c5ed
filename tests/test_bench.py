"""The pure parts of `make bench` (benchmarks/_stats.py, tta.analyse, the section text), where
write_section puts a section, and the layout of benchmarks/: no timing, no model, seconds."""

from __future__ import annotations

import ast
import re
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))

import _report  # noqa: E402
import _sections  # noqa: E402
import tta  # noqa: E402
from _stats import ab_order, first_reaching, goal_text, ratios, summary  # noqa: E402


def test_summary_is_median_with_min_and_max():
    assert summary([3.0, 1.0, 2.0]) == "2.00 (1.00–3.00)"
    assert summary([10.0, 30.0, 20.0, 40.0], "{:.0f}", " s") == "25 s (10–40 s)"
    assert summary([0.8412], "{:.3f}") == "0.841 (1 run)"


def test_summary_of_nothing_says_so():
    with pytest.raises(ValueError, match="at least one value"):
        summary([])


def test_ab_order_alternates_a_b_a_b():
    assert ab_order(3, "hf", "entrena") == ["hf", "entrena", "hf", "entrena", "hf", "entrena"]
    assert ab_order(1) == ["A", "B"]
    with pytest.raises(ValueError, match="at least 1, got 0"):
        ab_order(0)


def test_ratios_are_per_pair():
    assert ratios([2.0, 3.0], [1.0, 4.0]) == [2.0, 0.75]
    with pytest.raises(ValueError, match="as many numerators as denominators, got 2 and 1"):
        ratios([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="must be positive"):
        ratios([1.0], [0.0])


def _points(*pairs):
    return [{"time_s": t, "accuracy": a, "epoch": 0.5 * (i + 1)} for i, (t, a) in enumerate(pairs)]


def test_first_reaching_takes_the_first_point_at_or_above_the_target():
    points = _points((10.0, 0.80), (20.0, 0.841), (30.0, 0.85))
    assert first_reaching(points, 0.841)["time_s"] == 20.0  # equal counts as reached
    assert first_reaching(points, 0.845)["time_s"] == 30.0
    assert first_reaching(points, 0.90) is None
    assert first_reaching(_points((5.0, 0.9), (9.0, 0.7)), 0.85)["time_s"] == 5.0


def test_first_reaching_refuses_points_out_of_time_order():
    with pytest.raises(ValueError, match="time order"):
        first_reaching(_points((20.0, 0.8), (10.0, 0.9)), 0.85)


def test_goal_text_says_by_how_much_a_goal_is_missed():
    assert goal_text(3.0, 2.5, "×").startswith("met")
    assert goal_text(2.0, 2.5, "×") == "missed by 20% (2.00× < 2.5×)"
    assert goal_text(0.97, 0.97).startswith("met")


def _run(role, pair, points, **extra):
    return {"role": role, "pair": pair, "points": points, "fit_start_s": 5.0, "steps": 10,
            "final_accuracy": points[-1]["accuracy"], "process_wall_s": 100.0,
            **({"versions": {"transformers": "x", "accelerate": "y"}} if role == "hf" else {}),
            **extra}


def _result(runs):
    return {"mode": "quick", "pairs": 2, "threads": 2, "load": (0.1, 0.2),
            "hf": {**tta.HF, "max_length": 128, "epochs": 1},
            "split": {"rows": {"train": 1000, "validation": 399, "test": 1000},
                      "entrena_max_length": 128},
            "runs": runs, "best": {}}


def test_analyse_targets_the_trainers_first_epoch_and_pairs_the_runs():
    hf = [{"time_s": 100.0, "accuracy": 0.84, "epoch": 1.0}]
    hf2 = [{"time_s": 120.0, "accuracy": 0.82, "epoch": 1.0}]
    ours = _points((20.0, 0.80), (40.0, 0.83), (60.0, 0.86))
    runs = [_run("hf", 0, hf), _run("entrena", 0, ours), _run("hf", 1, hf2),
            _run("entrena", 1, ours)]
    analysis = tta.analyse(_result(runs))
    assert analysis["target"] == pytest.approx(0.83)  # median of 0.84 and 0.82
    assert [p["time_s"] for p in analysis["entrena_reached"]] == [40.0, 40.0]
    assert analysis["speedups"] == [2.5, 3.0]
    assert analysis["all_reached"]
    text = _sections.tta_section({"date": "d", "machine": "m", "command": "c", "mode": "quick"},
                                 _result(runs), analysis)
    assert "**2.75× (2.50–3.00×)**" in text and "met (2.75× ≥ 2.5×)" in text


def test_the_trainer_at_its_best_is_timed_at_its_first_point_at_the_target():
    # Target 0.83 (median of 0.82, 0.83, 0.84 at one epoch). The first Trainer run never
    # reaches it: timed at its last point, marked censored (its ratio is a lower bound).
    hf = [_points((50.0, 0.81), (100.0, 0.82)), _points((50.0, 0.80), (100.0, 0.83)),
          _points((50.0, 0.84), (100.0, 0.84))]
    ours = _points((40.0, 0.85), (80.0, 0.86))
    runs = [r for pair in range(3) for r in (_run("hf", pair, hf[pair]),
                                             _run("entrena", pair, ours))]
    analysis = tta.analyse({**_result(runs), "trainer": "best"})
    assert analysis["target"] == pytest.approx(0.83)
    assert analysis["hf_times"] == [100.0, 100.0, 50.0]
    assert analysis["hf_censored"] == [True, False, False]
    assert analysis["speedups"] == [2.5, 2.5, 1.25]
    assert "first evaluation point at or above" in analysis["timing_rule"]
    ctx = {"date": "d", "machine": "m", "command": "c", "mode": "full", "all_items": True}
    result = {**_result(runs), "trainer": "best"}
    text = _sections.tta_best_section(ctx, result, analysis)
    assert "**Speed-up (Trainer time / entrena time, per pair): 2.50× (1.25–2.50×)**" in text
    assert "| 1 | 100 (censored: never reached; its last point) | 40 (epoch 0.50) | " \
        "2.50× (lower bound) |" in text
    assert "Timing rule: both sides at their first evaluation point" in text
    summary = _sections.summary_section(ctx, {"tta-best": analysis}, 60.0)
    assert "| 1b. Trainer at its best" in summary
    assert "| ≥ 1.5× | met (2.50× ≥ 1.5×) |" in summary


def test_the_summary_keeps_the_rows_of_items_a_run_leaves_out():
    ctx = {"date": "2026-12-01", "machine": "m", "command": "c", "mode": "full",
           "all_items": True}
    startup = {"seconds": {"entrena --help": [0.1]}, "torch_imported": False}
    first = _sections.summary_section(ctx, {"startup": startup,
                                            "plan": "memory 6 of 6"}, 60.0)
    doc = f"<!-- bench:bench-summary:start -->\n{first}<!-- bench:bench-summary:end -->"
    earlier = _sections.earlier_rows(doc)
    assert set(earlier) == {"3.", "5.", "6."}
    again = _sections.summary_section({**ctx, "date": "2026-12-02", "all_items": False},
                                      {"startup": startup}, 60.0, earlier)
    lines = [line for line in again.splitlines()
             if line.startswith("| ") and not line.startswith("| item")]
    assert [line.split(" ")[1] for line in lines] == ["3.", "5.", "6."]
    assert lines[0].endswith("see the section (earlier: the summary of 2026-12-01; "
                             "not re-measured) |")
    assert "earlier" not in lines[1]  # measured now
    kept = _sections.earlier_rows(
        f"<!-- bench:bench-summary:start -->\n{again}<!-- bench:bench-summary:end -->")
    assert kept["3."] == lines[0]  # marked once, with the date it was measured


def test_a_target_never_reached_is_reported_as_missed():
    runs = [_run("hf", 0, [{"time_s": 50.0, "accuracy": 0.9, "epoch": 1.0}]),
            _run("entrena", 0, _points((20.0, 0.80), (40.0, 0.85)))]
    analysis = tta.analyse(_result(runs))
    assert analysis["entrena_reached"] == [None] and not analysis["all_reached"]
    text = _sections.tta_section({"date": "d", "machine": "m", "command": "c", "mode": "quick"},
                                 _result(runs), analysis)
    assert "did not reach the target in 1 of 1 runs (best test accuracy 0.850)" in text


def test_a_target_at_the_majority_class_rate_is_flagged():
    runs = [_run("hf", 0, [{"time_s": 50.0, "accuracy": 0.658, "epoch": 1.0}]),
            _run("entrena", 0, _points((20.0, 0.78), (40.0, 0.82)))]
    result = _result(runs)
    result["split"]["majority_share"] = 0.658
    text = _sections.tta_section({"date": "d", "machine": "m", "command": "c", "mode": "quick"},
                                 result, tta.analyse(result))
    assert "no better than always answering the most frequent class (0.658" in text


def test_write_section_updates_the_page_that_holds_the_markers(tmp_path, monkeypatch):
    journal, headline = tmp_path / "benchmarks-journal.md", tmp_path / "benchmarks.md"
    journal.write_text("# Journal\n\n<!-- bench:a:start -->\nold a\n<!-- bench:a:end -->\n")
    headline.write_text("# Headline\n\n<!-- bench:b:start -->\nold b\n<!-- bench:b:end -->\n")
    monkeypatch.setattr(_report, "BENCHMARKS_MD", journal)
    monkeypatch.setattr(_report, "HEADLINE_MD", headline)
    assert _report.write_section("a", "new a") == journal
    assert _report.write_section("b", "new b") == headline
    assert _report.write_section("c", "new c") == journal  # a new section: the journal's end
    assert journal.read_text() == ("# Journal\n\n<!-- bench:a:start -->\nnew a\n"
                                   "<!-- bench:a:end -->\n\n<!-- bench:c:start -->\nnew c\n"
                                   "<!-- bench:c:end -->\n")
    assert "new b" in headline.read_text() and "old b" not in headline.read_text()
    monkeypatch.setattr(_report, "HEADLINE_MD", None)  # ENTRENA_BENCH_DOC: one file only
    assert _report.write_section("b", "again b") == journal


def test_every_section_a_script_names_is_in_the_journal():
    journal = (ROOT / "docs" / "benchmarks-journal.md").read_text()
    headline = (ROOT / "docs" / "benchmarks.md").read_text()
    assert "<!-- bench:" not in headline  # its figures are copied by hand, with a link
    for name in ("bench-summary", "bench-tta", "chaos", "demo", "verdicts", "serving",
                 "budget", "llm-plan-accuracy", "predict-startup", "lora-layers"):
        assert f"<!-- bench:{name}:start -->" in journal and f"<!-- bench:{name}:end -->" in journal


def _imports(path):
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found


def test_maintained_scripts_import_no_experiment():
    folder = ROOT / "benchmarks"
    experiments = {p.stem for p in (folder / "experiments").glob("*.py")}
    maintained = {p.stem for p in folder.glob("*.py")}
    assert experiments and not experiments & maintained  # one name, one script
    wrong = {p.name: sorted(_imports(p) & experiments) for p in folder.glob("*.py")}
    assert {name: found for name, found in wrong.items() if found} == {}


def test_the_readme_lists_every_maintained_script():
    folder = ROOT / "benchmarks"
    readme = (folder / "README.md").read_text()
    listed = set(re.findall(r"^\| `([\w.]+\.(?:py|sh))` \|", readme, flags=re.MULTILINE))
    present = {p.name for p in folder.iterdir() if p.suffix in (".py", ".sh")}
    assert listed == present
