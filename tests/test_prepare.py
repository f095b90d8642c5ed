"""``entrena prepare`` / ``entrena.prepare``: hygiene checks and their policies, the data report
and table, exit code 3, the shared Arrow cache, and ``train`` going through the same path."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import entrena
from conftest import EXAMPLES, build_config, review_rows, run_cli, write_csv
from entrena.api import DataCheckFailed
from entrena.data.hygiene import normalise, repeats, text_keys
from entrena.data.splits import stratified_group_split
from entrena.data.tables import load_splits
from entrena.errors import DataError

TINY = EXAMPLES / "tiny" / "config.yaml"
INTEGER_KEYS = ("rows_read", "rows_kept", "exact_duplicates", "leaked_rows")


def quiet_prepare(config, **kwargs):
    return entrena.prepare(config, quiet=True, **kwargs)


def splits(train, **kwargs):
    args = dict(validation=None, test=None, text_column="text", label_column="label",
                validation_fraction=0.25, max_train_samples=None, max_eval_samples=None,
                on_bad_rows="skip", seed=0)
    args.update(kwargs)
    return load_splits(train=str(train), **args)


def check(report: dict, name: str) -> dict:
    (record,) = [c for c in report["checks"] if c["check"] == name]
    return record


def assert_rows_add_up(report: dict) -> None:
    for role, split in report["splits"].items():
        assert split["rows_read"] == split["rows_kept"] + sum(split["rows_removed"].values()), role


# --- pure functions ------------------------------------------------------------------------

def test_normalised_keys_ignore_case_punctuation_and_spacing():
    import pyarrow as pa

    texts = pa.array(["Great coffee!!", "great   coffee", "GREAT coffee.", "great tea", "!!!",
                      "???", "\tgreat\u00a0\ncoffee "])
    keys = text_keys(normalise(texts))[0]
    assert keys[0] == keys[1] == keys[2] == keys[6] != keys[3]
    assert keys[4] != keys[5]  # texts that normalise to nothing are not copies of each other
    assert repeats(keys).tolist() == [False, True, True, False, False, False, True]


def test_group_split_keeps_groups_together_and_equals_the_row_split_for_single_rows():
    labels = np.array([0, 1] * 50)
    groups = np.repeat(np.arange(25), 4)
    kept, held = stratified_group_split(labels, groups, 0.2, seed=1)
    assert not set(groups[kept]) & set(groups[held])
    from entrena.data.splits import stratified_split

    single_kept, single_held = stratified_group_split(labels, np.arange(100), 0.2, seed=1)
    expected_kept, expected_held = stratified_split(labels, 0.2, seed=1)
    assert single_held.tolist() == expected_held.tolist()


# --- the checks and their policies ---------------------------------------------------------

def dirty_rows() -> list[tuple[str, str]]:
    rows = review_rows(60, seed=3)
    rows[10] = rows[2]                                # exact copy, same label (row 11 of row 3)
    rows[12] = (rows[4][0].upper() + " !!", rows[4][1])  # normalised copy (row 13 of row 5)
    rows[14] = (rows[6][0], "bad" if rows[6][1] == "good" else "good")  # conflicting label
    return rows


def test_duplicates_conflicts_and_leakage_are_counted_and_dropped_by_default(tmp_path):
    rows = dirty_rows()
    train = write_csv(tmp_path / "train.csv", rows)
    test = write_csv(tmp_path / "test.csv", [rows[20], rows[30], ("new text here", "good")])
    result = splits(train, test=str(test))
    report = result.report
    t = report["splits"]["train"]
    assert t["exact_duplicates"] == 2  # the copy, and the conflicting row's text
    assert t["normalised_duplicates"] == 3
    assert t["conflicting_label_rows"] == 2
    assert t["leaked_rows"] == 2 and report["splits"]["test"]["leaked_rows"] == 2
    assert t["rows_removed"]["exact_duplicates"] == 1
    assert t["rows_removed"]["leakage"] == 2
    assert t["rows_removed"]["normalised_duplicates"] == 0  # warn by default
    assert t["examples"]["exact_duplicates"][0] == 11
    assert check(report, "exact_duplicates")["status"] == "dropped"
    # the check names the copy it counts, not row 15 (the conflicting label's text repeat)
    assert check(report, "exact_duplicates")["message"].endswith(
        "text and label (rows 11; exact_duplicates_same_label)")
    assert check(report, "normalised_duplicates")["message"].endswith(
        "with the same label (rows 13; normalised_duplicates_same_label)")
    # one count per name: the checks' counts have names of their own in the report
    assert t["exact_duplicates_same_label"] == check(report, "exact_duplicates")["found"] == 1
    assert t["normalised_duplicates_same_label"] == 1
    assert check(report, "normalised_duplicates")["status"] == "warning"
    assert check(report, "conflicting_labels")["status"] == "warning"
    assert check(report, "leakage")["status"] == "dropped"
    kept = set(result.train.texts) | set(result.validation.texts)
    assert rows[20][0] not in kept and rows[30][0] not in kept
    assert report["splits"]["test"]["rows_kept"] == 3  # test rows are never dropped
    assert_rows_add_up(report)


def test_drop_policies_for_near_copies_and_conflicts(tmp_path):
    from entrena.data.hygiene import CheckPolicy

    result = splits(write_csv(tmp_path / "train.csv", dirty_rows()),
                    checks=CheckPolicy(normalised_duplicates="drop", conflicting_labels="drop"))
    removed = result.report["splits"]["train"]["rows_removed"]
    assert removed["conflicting_labels"] == 2 and removed["normalised_duplicates"] == 1
    assert removed["exact_duplicates"] == 1
    assert_rows_add_up(result.report)


def test_copies_of_a_text_never_straddle_the_validation_split(tmp_path):
    rows = review_rows(80, seed=5)
    rows += [(text.upper(), label) for text, label in rows[:30]]  # 30 normalised copies
    result = splits(write_csv(tmp_path / "train.csv", rows))
    train_keys = {t.lower() for t in result.train.texts}
    assert not train_keys & {t.lower() for t in result.validation.texts}
    assert result.report["splits"]["validation"]["leaked_rows"] == 0


def test_group_column_keeps_groups_on_one_side(tmp_path):
    rows = [(text, label, f"user{i % 12}") for i, (text, label) in enumerate(review_rows(96))]
    train = write_csv(tmp_path / "train.csv", rows, header=("text", "label", "user"))
    result = splits(train, group_column="user")
    by_row = {i + 1: rows[i][2] for i in range(len(rows))}
    train_users = {by_row[int(r)] for r in result.train.row_ids}
    validation_users = {by_row[int(r)] for r in result.validation.row_ids}
    assert train_users and validation_users and not train_users & validation_users
    assert result.report["validation_split"]["grouped_by"] == "user"


def test_unseen_labels_can_be_dropped_and_counted(tiny_data, tmp_path):
    test = write_csv(tmp_path / "odd.csv", [("ok text", "good"), ("meh", "neutral")])
    with pytest.raises(DataError, match="or set data.on_unseen_labels: drop"):
        splits(tiny_data["train"], test=str(test))
    result = splits(tiny_data["train"], test=str(test), on_unseen_labels="drop")
    entry = result.report["splits"]["test"]
    assert entry["unseen_label_rows"] == 1 and entry["unseen_labels"] == ["neutral"]
    assert entry["rows_kept"] == 1 and entry["rows_removed"]["unseen_labels"] == 1


def test_small_classes_and_imbalance_are_reported(tmp_path):
    rows = review_rows(80) + [("a rare one", "rare"), ("another rare", "rare")]
    result = splits(write_csv(tmp_path / "train.csv", rows), validation_fraction=0.1)
    assert result.report["splits"]["train"]["small_classes"] == {"rare": 2}
    assert check(result.report, "small_classes")["status"] == "warning"
    assert check(result.report, "imbalance")["status"] == "warning"
    assert result.report["imbalance_ratio"] > 10


def test_single_class_is_refused(tmp_path):
    path = write_csv(tmp_path / "train.csv", [(f"text {i}", "good") for i in range(10)])
    with pytest.raises(DataError) as info:
        splits(path)
    assert str(info.value) == (f"{path}: 'label' has 1 distinct value(s) (good); a classifier "
                               "needs at least 2 classes")


# --- entrena.prepare: the real reviews, the cache, the report -------------------------------

@pytest.fixture(scope="module")
def reviews_prepared(reviews_data, tmp_path_factory):
    """``entrena prepare examples/tiny/config.yaml --json`` without subsampling: all reviews."""
    work = tmp_path_factory.mktemp("prepare")
    result = run_cli("prepare", TINY, "--json", "--set", "data.max_train_samples=null",
                     "--set", "data.max_eval_samples=null", cwd=work)
    return result, work


def test_prepare_json_is_one_document_with_integer_keys(reviews_prepared):
    result, work = reviews_prepared
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    for role in ("train", "validation", "test"):
        for key in INTEGER_KEYS:
            assert type(report["splits"][role][key]) is int, (role, key)
    assert report == json.loads((work / "runs" / "tiny" / "data_report.json").read_text())
    assert list((work / "runs" / "tiny").iterdir()) == [work / "runs" / "tiny" /
                                                        "data_report.json"]


def test_prepare_finds_the_duplicates_and_leaks_of_the_real_reviews(reviews_prepared):
    result, _ = reviews_prepared
    report = json.loads(result.stdout)
    train, test = report["splits"]["train"], report["splits"]["test"]
    assert train["rows_read"] == 4000 and test["rows_read"] == 1000
    assert train["exact_duplicates"] == 20 and train["rows_removed"]["exact_duplicates"] == 20
    assert test["leaked_rows"] == 7 and train["leaked_rows"] == 7
    assert train["rows_removed"]["leakage"] == 7 and test["rows_kept"] == 1000
    assert report["encoding"]["max_length"] == 128  # examples/tiny sets it
    assert 0 < train["truncated_fraction"] < 1
    assert_rows_add_up(report)


def test_prepare_prints_the_table_on_stderr(reviews_prepared):
    result, _ = reviews_prepared
    assert "exact_duplicates (any label)" in result.stderr and "leaked rows" in result.stderr
    assert "dropped  exact_duplicates: 20 training rows repeat" in result.stderr
    assert "dropped  leakage: 7 training rows also occur" in result.stderr


def test_second_prepare_comes_from_the_cache_a_changed_file_does_not(tiny_config, config_file,
                                                                     tmp_path):
    path = config_file(tiny_config)
    first = quiet_prepare(path)
    assert first.data.from_cache is False
    cache = Path(first.report["cache"])
    assert cache.parent == tmp_path / ".entrena-cache" / "prepared"
    assert sorted(p.name for p in cache.iterdir()) == ["meta.json", "test.arrow", "train.arrow",
                                                      "validation.arrow"]
    second = quiet_prepare(path, run_dir=tmp_path / "elsewhere")
    assert second.data.from_cache is True and second.report["cache"] == str(cache)
    for role in ("train", "validation", "test"):
        a, b = first.data.encoded[role], second.data.encoded[role]
        assert [a.get(i).tolist() for i in range(len(a))] == \
            [b.get(i).tolist() for i in range(len(b))]
        assert list(first.data.splits.report["splits"][role].items()) == \
            list(second.report["splits"][role].items())
    write_csv(tmp_path / "data" / "test.csv", review_rows(32, seed=9))
    third = quiet_prepare(path)
    assert third.data.from_cache is False and third.report["cache"] != str(cache)


def test_a_cached_prepare_builds_no_tokenizer_until_one_is_needed(tiny_config, config_file,
                                                                   tmp_path):
    from entrena.data.encoding import TokenizerFacts

    path = config_file(tiny_config)
    first = quiet_prepare(path).data
    assert first.built_tokenizer is not None  # encoding needed it
    assert list((tmp_path / ".entrena-cache" / "tokenizers").glob("*.json"))
    second = quiet_prepare(path).data
    assert second.from_cache is True and second.built_tokenizer is None
    assert second.facts == first.facts == TokenizerFacts.of(first.tokenizer)
    assert (second.vocab_size, second.pad_token_id) == (len(first.tokenizer), 0)
    assert TokenizerFacts.of(second.tokenizer) == second.facts  # built on first use
    assert second.built_tokenizer is not None


def test_tokenizer_facts_are_rebuilt_when_a_tokenizer_file_changes(tmp_path):
    import shutil

    from entrena.config.models import resolve_model_name
    from entrena.data.encoding import tokenizer_facts
    from entrena.tasks.text.model import build_tokenizer

    folder = tmp_path / "tok"
    shutil.copytree(resolve_model_name("minilm-l6"), folder,
                    ignore=shutil.ignore_patterns("*.safetensors"))
    memo = tmp_path / "memo"
    built: list[str] = []

    def build(source: str):
        built.append(source)
        return build_tokenizer(source)

    facts, tokenizer = tokenizer_facts(str(folder), build, memo)
    assert tokenizer is not None and len(built) == 1
    again, tokenizer = tokenizer_facts(str(folder), build, memo)
    assert again == facts and tokenizer is None and len(built) == 1
    config = folder / "tokenizer_config.json"
    settings = json.loads(config.read_text())
    settings["model_max_length"] = 128
    config.write_text(json.dumps(settings))
    changed, tokenizer = tokenizer_facts(str(folder), build, memo)
    assert tokenizer is not None and len(built) == 2 and changed.model_max_length == 128
    for damaged in memo.glob("*.json"):
        damaged.write_text("{not json")
    rebuilt, tokenizer = tokenizer_facts(str(folder), build, memo)
    assert rebuilt == changed and tokenizer is not None and len(built) == 3
    assert tokenizer_facts(str(folder), build, memo)[1] is None  # rewritten


def test_cache_dir_can_be_set_in_the_config(tiny_config, config_file, tmp_path):
    config = build_config({"data.cache_dir": "shared-cache"})
    result = quiet_prepare(config_file(config))
    assert Path(result.report["cache"]).parent == tmp_path / "shared-cache" / "prepared"


def test_damaged_cache_entry_is_rebuilt(tiny_config, config_file, caplog):
    path = config_file(tiny_config)
    first = quiet_prepare(path)
    (Path(first.report["cache"]) / "train.arrow").write_bytes(b"garbage")
    again = quiet_prepare(path)
    assert again.data.from_cache is False and "is damaged" in caplog.text


def test_failing_check_exits_3_and_still_writes_the_report(tiny_data, config_file, tmp_path):
    write_csv(tmp_path / "data" / "train.csv", review_rows(96, seed=1) + review_rows(4, seed=1))
    path = config_file(build_config())
    result = run_cli("prepare", path, "--json", "--set", "data.checks.exact_duplicates=error",
                     cwd=tmp_path)
    assert result.returncode == 3, result.stderr
    report = json.loads(result.stdout)
    assert check(report, "exact_duplicates")["status"] == "failed"
    written = tmp_path / "runs" / "tiny" / "data_report.json"
    assert json.loads(written.read_text()) == report
    error = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert error == [
        "error: data check failed: exact_duplicates: 4 training rows repeat an earlier row's "
        "text and label (rows 97, 98, 99, 100; exact_duplicates_same_label); the report is in "
        "runs/tiny/data_report.json; "
        "fix the data, or set data.checks.exact_duplicates to warn (or drop)"]


def test_train_with_a_failing_check_exits_3_then_trains_once_relaxed(tiny_data, config_file,
                                                                    tmp_path, caplog):
    path = config_file(build_config({"data.checks.truncation": "error",
                                     "model.max_length": 8, "train.max_epochs": 1}))
    with pytest.raises(DataCheckFailed, match="truncation: .* longer than max_length 8"):
        entrena.train(path, console=_quiet_console())
    run_dir = tmp_path / "runs" / "tiny"
    assert [p.name for p in run_dir.iterdir()] == ["data_report.json"]
    result = entrena.train(path, overrides=["data.checks.truncation=warn"],
                           console=_quiet_console())
    assert result.metrics["data"]["train_rows"] > 0
    assert "without a complete checkpoint" not in caplog.text
    report = json.loads((run_dir / "data_report.json").read_text())
    assert check(report, "truncation")["status"] == "warning"


def test_prepare_leaves_a_trained_runs_report_alone(tiny_config, config_file, tmp_path, caplog):
    run_dir = tmp_path / "runs" / "tiny"
    run_dir.mkdir(parents=True)
    (run_dir / "status.json").write_text('{"status": "finished"}')
    (run_dir / "data_report.json").write_text('{"old": true}')
    result = quiet_prepare(config_file(tiny_config))
    assert result.report_path is None
    assert json.loads((run_dir / "data_report.json").read_text()) == {"old": True}
    assert "holds a training run" in caplog.text


def test_train_uses_the_prepared_cache(tiny_config, config_file, tmp_path):
    path = config_file(build_config({"train.max_epochs": 1}))
    quiet_prepare(path)
    result = entrena.train(path, console=_quiet_console())
    report = json.loads((result.run_dir / "data_report.json").read_text())
    assert report["from_cache"] is True
    assert result.metrics["fit"]["max_length"] == report["encoding"]["max_length"] == 32


def _quiet_console():
    import io

    from rich.console import Console

    return Console(file=io.StringIO(), width=200)


def test_fast_tokenizing_gives_the_ids_of_the_tokenizer_call(reviews_data):
    import pandas as pd

    from entrena.config.models import resolve_model_name
    from entrena.data.encoding import tokenize_block
    from entrena.tasks.text.model import build_tokenizer

    tokenizer = build_tokenizer(resolve_model_name("minilm-l6", Path("."), "model.name"))
    texts = pd.read_csv(reviews_data / "test.csv")["review"].tolist()[:300]
    texts += ["", "é😀 ünïcode", "word " * 1000]
    settings = (tokenizer.backend_tokenizer.padding, tokenizer.backend_tokenizer.truncation)
    flat, offsets = tokenize_block(texts, tokenizer, 129)
    assert (tokenizer.backend_tokenizer.padding,
            tokenizer.backend_tokenizer.truncation) == settings  # left as they were
    expected = tokenizer(texts, truncation=True, max_length=129)["input_ids"]
    assert [flat[offsets[i]:offsets[i + 1]].tolist() for i in range(len(texts))] == expected
    assert len(expected[-1]) == 129


def test_a_test_file_left_empty_by_dropped_labels_is_refused(tiny_data, tmp_path):
    test = write_csv(tmp_path / "odd.csv", [("meh", "neutral"), ("so so", "neutral")])
    with pytest.raises(DataError) as info:
        splits(tiny_data["train"], test=str(test), on_unseen_labels="drop")
    assert str(info.value) == (f"{test}: no test rows are left once the data checks have run "
                               "(rows removed: 2 unseen_labels); keep them (data.checks.*, "
                               "data.on_unseen_labels) or add rows")


def test_resuming_on_changed_data_is_refused_unless_accepted(tiny_data, config_file, tmp_path,
                                                             caplog):
    from entrena.core.callback import Callback

    class CrashAt3(Callback):
        def on_batch_end(self, state) -> None:
            if state.step == 3:
                raise RuntimeError("power cut")

    path = config_file(build_config({"train.checkpoint.every_steps": 1, "train.max_epochs": 1}))
    with pytest.raises(RuntimeError, match="power cut"):
        entrena.train(path, callbacks=[CrashAt3()], console=_quiet_console())
    # Every label flipped: same rows, other bytes. Refused as a changed config is.
    flipped = [(text, {"good": "bad", "bad": "good"}[label])
               for text, label in review_rows(32, seed=2)]
    test = write_csv(tmp_path / "data" / "test.csv", flipped)
    with pytest.raises(DataError) as info:
        entrena.train(path, console=_quiet_console())
    message = str(info.value)
    assert message.startswith("runs/tiny: the data differs from the data "
                              f"this run was trained on:\n  data.test: {test}: SHA-256 ")
    assert message.endswith("\nresuming would go on with other data than the checkpoint saw; "
                            "pass --resume-with-changes to go on with the new data, --restart "
                            "to start over on it, or --run-dir for a new run")
    assert info.value.exit_code == 2 and "rows" not in message.splitlines()[1]  # 32 both
    result = entrena.train(path, resume_with_changes=True, console=_quiet_console())
    assert result.resumed_from_step is not None
    assert "resuming with changed data (--resume-with-changes):\n  data.test: " in caplog.text


def test_data_changes_name_files_hashes_and_rows():
    from entrena.data.changes import data_changes

    def report(fingerprint, sha, rows, images=None):
        train = {"files": [{"file": "d/train.csv", "sha256": sha, "bytes": 10,
                            "rows_read": rows}]}
        return {"fingerprint": fingerprint,
                "splits": {"train": train, "test": {"rows_read": images or 5}}}

    assert data_changes(report("a", "1" * 64, 9), report("a", "2" * 64, 8)) == []  # same print
    assert data_changes(report("a", "1" * 64, 9), report("b", "2" * 64, 8, images=6)) == [
        "data.train: d/train.csv: SHA-256 111111111111… -> 222222222222…, 9 -> 8 rows",
        "data.test: rows read 5 -> 6"]
    assert data_changes(report("a", "1" * 64, 9), report("b", "1" * 64, 9)) == [
        "prepared-data fingerprint a -> b (the same files; the tokenizer or an encoding "
        "setting differs)"]
