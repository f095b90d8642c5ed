"""The real CLI end to end (``examples/tiny`` on the bundled reviews), bad input, MLflow."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

import entrena
from conftest import EXAMPLES, build_config, clean_env, run_cli, write_csv
from entrena.errors import EntrenaError
from entrena.tasks.registry import load_config

TINY = EXAMPLES / "tiny" / "config.yaml"


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    """The CLI's ``error: ...`` line; fails unless stderr is exactly that one line."""
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), result.stderr
    return lines[0]


def flatten(data: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, reviews_data):
    """``entrena train examples/tiny/config.yaml``, tracking to the default store.

    One torch thread: on a machine whose cores are busy, two threads were 8x slower."""
    work = tmp_path_factory.mktemp("cli")
    run_dir = work / "runs" / "tiny"
    result = run_cli("train", TINY, "--run-dir", run_dir, "--set", "train.num_threads=1",
                     cwd=work)
    return result, run_dir


# --- the end-to-end run --------------------------------------------------------------------

def test_train_exits_0_and_writes_the_run_directory(tiny_run):
    result, run_dir = tiny_run
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""  # tables, progress and logs go to stderr
    assert "test.accuracy" in result.stderr and "Traceback" not in result.stderr
    for name in ("config.yaml", "metrics.json", "events.jsonl", "train.log", "data_report.json",
                 "report.html", "plan.json",
                 "model", "checkpoints/best.pt", "checkpoints/latest.json"):
        assert (run_dir / name).exists(), name
    assert json.loads((run_dir / "status.json").read_text())["status"] == "finished"


def test_metrics_json_has_the_keys_scripts_use(tiny_run):
    _, run_dir = tiny_run
    metrics = json.loads((run_dir / "metrics.json").read_text())
    for section in ("validation", "test"):
        for key in ("accuracy", "macro_f1", "loss"):
            assert 0.0 <= metrics[section][key], f"{section}.{key}"
        assert metrics[section]["accuracy"] <= 1.0
    assert set(metrics["test"]["per_class"]) == {"great", "other"}
    assert sum(map(sum, metrics["test"]["confusion_matrix"]["matrix"])) == 200
    assert metrics["fit"]["steps"] == 25 * metrics["fit"]["epochs"]  # 400 rows, batches of 16
    assert metrics["fit"]["threads"] == 1
    assert metrics["data"] == {"train_rows": 400, "validation_rows": 200, "test_rows": 200,
                               "labels": ["great", "other"]}
    assert 0.0 <= metrics["fit"]["padding_fraction"] < 0.5
    efficiency = metrics["efficiency"]
    assert 0.0 < efficiency["mfu"] < 1.0 and "measured" in efficiency["peak_source"]
    assert efficiency["padding_fraction"] == metrics["fit"]["padding_fraction"]
    assert 0.0 < efficiency["data_wait_fraction"] < 1.0
    assert efficiency["throughput_samples_per_s"] > 0
    assert isinstance(metrics["diagnosis"], list)
    for name in ("majority", "tfidf_logreg"):
        assert 0.0 <= metrics["baseline"][name]["test"]["accuracy"] <= 1.0
    assert metrics["baseline"]["majority"]["test"]["accuracy"] == 132 / 200  # 'great' rows
    cost = metrics["cost"]  # the train command's wall time x this machine's price
    assert cost["wall_time_s"] > metrics["fit"]["wall_time_s"] > 0
    assert cost["usd"] == pytest.approx(cost["wall_time_s"] / 3600 * cost["usd_per_hour"])
    assert cost["source"]


def test_metrics_json_uses_only_keys_of_the_metric_table(tiny_run):
    from entrena.core.metrics import METRIC_KEYS

    _, run_dir = tiny_run
    metrics = json.loads((run_dir / "metrics.json").read_text())
    metrics.pop("history")
    unknown = [k for k in flatten(metrics)
               if not any(k == m or k.startswith(m + ".") for m in METRIC_KEYS)]
    assert unknown == []


def test_run_files_are_consistent(tiny_run):
    _, run_dir = tiny_run
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["train"]["num_threads"] == 1  # the --set override
    assert config["train"]["scheduler"] == "linear"  # every default filled in
    records = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert [r["type"] for r in records][0] == "fit_start"
    assert {"step", "eval", "epoch", "fit_end"} <= {r["type"] for r in records}
    report = json.loads((run_dir / "data_report.json").read_text())
    assert report["splits"]["train"]["rows_read"] == 4000
    assert report["rows"]["train"] == 400
    log = (run_dir / "train.log").read_text()
    assert "restored the best weights" in log


def test_run_config_yaml_points_at_the_data(tiny_run):
    _, run_dir = tiny_run
    loaded = load_config(run_dir / "config.yaml")
    assert Path(loaded.config.data.train).is_absolute()
    assert Path(loaded.resolve_path(loaded.config.data.train)).is_file()


def test_model_folder_loads_and_holds_the_best_weights(tiny_run):
    import torch
    from transformers import AutoModel

    from entrena.tasks.text.model import load_classifier

    _, run_dir = tiny_run
    model, tokenizer, meta = load_classifier(run_dir / "model")
    assert meta["labels"] == ["great", "other"] and meta["max_length"] == 128
    batch = tokenizer(["great coffee", "stale and awful"], padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(batch["input_ids"], batch["attention_mask"])
    assert logits.shape == (2, 2)
    encoder = AutoModel.from_pretrained(run_dir / "model")
    assert encoder.config.num_hidden_layers == 2 and encoder.config.hidden_size == 32
    assert encoder.config.id2label == {0: "great", 1: "other"}
    best = torch.load(run_dir / "checkpoints" / "best.pt", weights_only=True)["model"]
    torch.testing.assert_close(model.head.weight, best["head.weight"])


def test_run_is_tracked_in_the_default_mlflow_store(tiny_run):
    from mlflow.tracking import MlflowClient

    _, run_dir = tiny_run
    store = run_dir.parent / "mlflow.db"
    assert store.is_file()
    client = MlflowClient(tracking_uri=f"sqlite:///{store}")
    experiment = client.get_experiment_by_name("entrena")
    (run,) = client.search_runs([experiment.experiment_id])
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert run.info.run_name == "tiny" and run.info.status == "FINISHED"
    assert run.data.metrics["test.accuracy"] == pytest.approx(metrics["test"]["accuracy"])
    assert "validation.loss" in run.data.metrics
    assert run.data.params["train.num_threads"] == "1"
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"metrics.json", "config.yaml"} <= artifacts


def test_second_run_says_finished_and_exits_0(tiny_run):
    _, run_dir = tiny_run
    before = (run_dir / "metrics.json").stat().st_mtime_ns
    again = run_cli("train", TINY, "--run-dir", run_dir, cwd=run_dir.parent.parent)
    assert again.returncode == 0, again.stderr
    assert "is already finished; use --restart to train again" in again.stderr
    assert (run_dir / "metrics.json").stat().st_mtime_ns == before


@pytest.fixture(scope="module")
def finished_json_run(tiny_run):
    """``entrena train ... --json`` on the finished run."""
    _, run_dir = tiny_run
    return run_cli("train", TINY, "--run-dir", run_dir, "--json", cwd=run_dir.parent.parent)


def test_json_prints_exactly_metrics_json(tiny_run, finished_json_run):
    _, run_dir = tiny_run
    assert finished_json_run.returncode == 0, finished_json_run.stderr
    printed = json.loads(finished_json_run.stdout)  # stdout is exactly one JSON document
    assert printed == json.loads((run_dir / "metrics.json").read_text())


def test_json_on_a_finished_run_still_says_so_on_stderr(finished_json_run):
    assert "is already finished" in finished_json_run.stderr


def test_restart_trains_again(tiny_run, tmp_path):
    # In process (the CLI passes --restart straight to entrena.train): a second CLI start-up
    # would cost ~15 s of imports.
    _, finished = tiny_run
    run_dir = tmp_path / "runs" / "tiny"
    shutil.copytree(finished, run_dir)
    overrides = ["data.max_train_samples=64", "tracking.enabled=false", "train.max_epochs=1",
                 "train.num_threads=1"]
    assert entrena.train(TINY, run_dir=run_dir, overrides=overrides).already_finished
    result = entrena.train(TINY, run_dir=run_dir, overrides=overrides, restart=True)
    assert not result.already_finished
    assert result.metrics == json.loads((run_dir / "metrics.json").read_text())
    assert result.metrics["data"]["train_rows"] == 64 and result.metrics["fit"]["epochs"] == 1


# --- bad input -----------------------------------------------------------------------------

TYPO = textwrap.dedent("""\
    name: tiny
    data:
      train: data/train.csv
    model:
      architecture: {num_hidden_layers: 2, hidden_size: 32, num_attention_heads: 2}
      tokenizer: minilm-l6
    train:
      max_epoch: 2
    """)


@pytest.mark.parametrize(("args", "expected"), [
    (["--set", "train.bach_size=4"],
     "error: --set train.bach_size: no such config key; did you mean 'train.batch_size'?"),
    (["--set", "train.batch_size=0"], "train.batch_size = 0 is invalid: Input should be greater"),
    (["--set", "model.tokenizer=minilm"],
     "model.tokenizer = 'minilm' is not a known model alias"),
    (["--set", "data.train=missing.csv"], "data.train: file not found:"),
    (["--set", "data.text_column=review"],
     "data.text_column = 'review' is not a column of the train data; columns are: 'text', "
     "'label'"),
    (["--set", "data.test=data/odd_test.csv"],
     "label(s) 'neutral' in test rows 2 never occur in the training data"),
    (["--set", "data.train=data/bad_rows.csv", "--set", "data.on_bad_rows=error"],
     "empty 'text' in rows 2"),
], ids=["set-typo", "bad-value", "alias", "missing-file", "missing-column", "unseen-label",
        "bad-rows"])
def test_bad_input_exits_2_with_one_line_and_no_run_directory(tmp_path, tiny_data, config_file,
                                                              args, expected):
    write_csv(tmp_path / "data" / "odd_test.csv", [("fine", "good"), ("meh", "neutral")])
    write_csv(tmp_path / "data" / "bad_rows.csv", [("great", "good"), ("", "bad")])
    path = config_file(build_config())
    result = run_cli("train", path, *args, cwd=tmp_path)
    assert result.returncode == 2
    assert expected in one_line_error(result)
    assert not (tmp_path / "runs").exists()


def test_config_key_typo_through_the_cli(tmp_path):
    (tmp_path / "config.yaml").write_text(TYPO)
    result = run_cli("train", "config.yaml", cwd=tmp_path)
    assert result.returncode == 2
    assert one_line_error(result) == ("error: config.yaml:8: unknown key 'train.max_epoch'; "
                                      "did you mean 'train.max_epochs'?")


def test_missing_config_file_through_the_cli(tmp_path):
    result = run_cli("train", "nope.yaml", cwd=tmp_path)
    assert result.returncode == 2
    assert "error: nope.yaml: config file not found" in one_line_error(result)


def test_error_found_after_the_run_directory_exists_removes_it(tiny_config, tmp_path):
    config = build_config({"train.accelerator": "mps"})
    with pytest.raises(EntrenaError, match="train.accelerator = 'mps' but MPS is not available"):
        entrena.train(config)
    assert not (tmp_path / "runs" / "tiny").exists()


# --- in-process runs: resume of an unfinished directory, tracking failures ----------------

def test_unfinished_run_directory_is_started_over(tiny_config, tmp_path):
    run_dir = tmp_path / "runs" / "tiny"
    run_dir.mkdir(parents=True)
    (run_dir / "status.json").write_text('{"status": "running"}')
    (run_dir / "leftover.txt").write_text("from a crashed run")
    result = entrena.train(build_config({"train.max_epochs": 1}))
    assert not result.already_finished
    assert not (run_dir / "leftover.txt").exists()
    assert json.loads((run_dir / "status.json").read_text())["status"] == "finished"


def test_unreachable_tracking_server_warns_and_training_finishes(tiny_config, tmp_path,
                                                                 monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # see the slow test below
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    config = build_config({"tracking.enabled": True, "tracking.uri": "http://127.0.0.1:9",
                           "train.max_epochs": 1})
    result = entrena.train(config)
    assert 0.0 <= result.metrics["test"]["accuracy"] <= 1.0
    log = (result.run_dir / "train.log").read_text()
    assert "MLflow tracking off: starting the run failed" in log
    assert "training goes on" in log
    assert not (tmp_path / "runs" / "mlflow.db").exists()


def test_mlflow_tracking_uri_environment_variable_wins(tmp_path, monkeypatch):
    from entrena.tracking.mlflow_tracker import default_tracking_uri

    assert default_tracking_uri(tmp_path, None) == f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert default_tracking_uri(tmp_path, "http://example:5000") == "http://example:5000"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "file:///somewhere")
    assert default_tracking_uri(tmp_path, "http://example:5000") == "file:///somewhere"


def test_a_tracking_store_that_cannot_open_is_one_warning_at_once(tmp_path, caplog):
    # sqlite:////proc/x.db once stalled training 104 s behind MLflow's retries and printed
    # 36 raw warnings.
    import logging
    import time

    from entrena.tracking.mlflow_tracker import MLflowTracker

    tracker = MLflowTracker("sqlite:////proc/entrena-test/x.db", "e", "r", tmp_path / "art")
    started = time.perf_counter()
    with caplog.at_level(logging.WARNING):
        tracker.start({"a": 1})  # on a background thread: the fit goes on meanwhile
        tracker.ready()
    assert time.perf_counter() - started < 5.0 and not tracker.enabled
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and warnings[0].startswith(
        "MLflow tracking off: opening the tracking store sqlite:////proc/entrena-test/x.db "
        "failed (")
    assert warnings[0].endswith("); training goes on")


def test_the_store_probe_is_bounded_in_time(monkeypatch):
    import time

    from entrena.tracking import mlflow_tracker

    monkeypatch.setattr(mlflow_tracker, "_open_store", lambda uri: time.sleep(3))
    started = time.perf_counter()
    with pytest.raises(TimeoutError, match=r"no answer in 0\.2 s"):
        mlflow_tracker.probe_store("postgresql://db.invalid/mlflow", timeout_s=0.2)
    assert time.perf_counter() - started < 1.0
    mlflow_tracker.probe_store(f"sqlite:///{Path.cwd() / 'ok' / 'mlflow.db'}")  # opens: no error


@pytest.mark.slow
def test_unreachable_tracking_server_fails_fast(tmp_path):
    script = ("from pathlib import Path\n"
              "from entrena.tracking.mlflow_tracker import MLflowTracker\n"
              "t = MLflowTracker('http://127.0.0.1:9', 'e', 'r', Path('art'))\n"
              "t.start({'a': 1})\n"
              "t.ready()  # the run starts on a background thread\n"
              "assert not t.enabled\n")
    env = {k: v for k, v in clean_env().items() if not k.startswith("MLFLOW_HTTP")}
    try:
        result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env,
                                capture_output=True, text=True, timeout=30, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail("tracker.start() took more than 30 s against a refused connection")
    assert result.returncode == 0, result.stderr


# --- version, help, start-up ---------------------------------------------------------------

def test_version(tmp_path):
    result = run_cli("--version", cwd=tmp_path)
    assert result.returncode == 0
    assert result.stdout.strip() == f"entrena {entrena.__version__}"


def test_help(tmp_path):
    top = run_cli("--help", cwd=tmp_path)
    assert top.returncode == 0 and "train" in top.stdout and "--version" in top.stdout
    sub = run_cli("train", "--help", cwd=tmp_path)
    assert sub.returncode == 0
    for option in ("CONFIG", "--run-dir", "--set", "--restart", "--json"):
        assert option in sub.stdout


@pytest.mark.parametrize("argv", [None, ["--help"], ["train", "--help"], ["--version"]],
                         ids=["import", "help", "train-help", "version"])
def test_import_and_help_do_not_import_torch(tmp_path, argv):
    script = ("import sys\n"
              "import entrena\n"
              "from entrena.cli import app\n"
              f"argv = {argv!r}\n"
              "if argv is not None:\n"
              "    try:\n"
              "        app(argv)\n"
              "    except SystemExit as exc:\n"
              "        assert exc.code in (0, None), exc.code\n"
              "heavy = [m for m in ('torch', 'transformers', 'lightning_fabric', 'mlflow',"
              " 'pandas') if m in sys.modules]\n"
              "assert not heavy, heavy\n")
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=clean_env(),
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr + result.stdout


def test_tables_piped_to_a_file_are_not_cut_at_80_columns(monkeypatch):
    """A plan or data table in a log file or CI: rich's default 80 columns cut the option
    names; a pipe gets 160 unless COLUMNS says otherwise, a terminal keeps its own width."""
    import io

    from entrena.core.console import PIPE_WIDTH, stderr_console

    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr("sys.stderr", io.StringIO())
    assert stderr_console().width == PIPE_WIDTH
    monkeypatch.setenv("COLUMNS", "100")
    assert stderr_console().width == 100
