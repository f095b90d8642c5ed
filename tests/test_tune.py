"""`entrena tune`: the search space validated like the config, a study under a budget that a
second invocation extends, pruning through the real loop, nested tracked trials."""

from __future__ import annotations

import json
import threading

import optuna
import pytest
import yaml

import entrena
from conftest import run_cli
from entrena.errors import ConfigError
from entrena.tasks.registry import load_config
from entrena.tuning import run_study
from entrena.tuning.space import DEFAULT_SPACE

SPACE = {"train.learning_rate": {"low": 1e-4, "high": 1e-2, "log": True},
         "train.batch_size": {"choices": [8, 16]}}


def _config(**tune):
    return {"name": "x", "data": {"train": "a.csv"}, "tune": tune}


@pytest.mark.parametrize("space, message", [
    ({"train.learning_rat": {"low": 1e-5, "high": 1e-3}},
     "'train.learning_rat' is not a config key to search; did you mean 'train.learning_rate'?"),
    ({"train.learning_rate": {"low": 1e-3, "high": 1e-5}},
     "tune.space.train.learning_rate = {'low': 0.001, 'high': 1e-05} is invalid: `low <= high` "
     "must hold, but got low=0.001 and high=1e-05"),
    ({"train.learning_rate": {"low": 0, "high": 1e-3, "log": True}},
     "`low > 0` must hold for log: true, but got low=0"),
    ({"train.batch_size": {"choices": []}}, "choices must not be empty"),
    ({"train.batch_size": {"low": 8}}, "give low and high (a range) or choices (a list)"),
])
def test_a_bad_search_space_is_a_config_error(space, message):
    with pytest.raises(ConfigError) as info:
        load_config(_config(space=space))
    assert message in str(info.value)


def test_the_default_space_and_the_tiny_example_are_valid(reviews_data):
    from conftest import EXAMPLES

    loaded = load_config(EXAMPLES / "tiny" / "config.yaml")
    assert set(loaded.config.tune.space) == {"train.learning_rate", "train.batch_size"}
    assert load_config(_config(space={k: v.model_dump() for k, v in DEFAULT_SPACE.items()}))


def _fake_trial(number, params, report, max_time_s):
    """A trial without training: the value falls with steps; a large rate is bad early."""
    lr = params["train.learning_rate"]
    value = 0.0
    for step in range(1, 4):
        value = abs(lr - 1e-3) * 100 + 1.0 / step
        if report(value, step):
            raise optuna.TrialPruned()
    return value


def test_a_study_prunes_continues_and_is_shared_without_duplicates(tmp_path):
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    space = load_config(_config(space=SPACE)).config.tune.space
    common = dict(space=space, study_name="s", storage=storage, direction="minimize",
                  startup_trials=2, importances=False)
    first = run_study(_fake_trial, n_trials=4, **common)
    assert first.trials == 4 and first.ran == 4
    assert first.best is not None and set(first.best) == {"trial", "value", "params"}
    second = run_study(_fake_trial, n_trials=2, **common)  # a re-run extends the study
    assert second.trials == 6 and second.ran == 2
    threads = [threading.Thread(target=run_study, args=(_fake_trial,),
                                kwargs=dict(n_trials=2, seed=i, **common)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    final = run_study(_fake_trial, n_trials=1, **common)
    numbers = [row["number"] for row in final.table]
    assert len(numbers) == 11 and len(set(numbers)) == 11  # two workers, no duplicates
    assert final.pruned >= 1
    assert final.completed + final.pruned == 11


def _learning_rates(storage: str) -> list[float]:
    from entrena.tuning.study import open_storage

    study = optuna.load_study(study_name="s", storage=open_storage(storage))
    return [t.params["train.learning_rate"]
            for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)]


def test_workers_with_one_seed_draw_different_points(tmp_path):
    """Workers started together from one config (one seed) share a fresh study: each trial
    is seeded by its number, so their startup trials differ (before, both seeded the
    sampler with seed + 0 trials and drew the same points)."""
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    space = load_config(_config(space=SPACE)).config.tune.space
    together = threading.Barrier(2)

    def overlapping(number, params, report, max_time_s):
        together.wait(timeout=60)  # both workers hold a trial at once
        return _fake_trial(number, params, report, max_time_s)

    common = dict(space=space, study_name="s", storage=storage, direction="minimize",
                  startup_trials=4, importances=False, n_trials=2, seed=7, pruner="none")
    optuna.create_study(study_name="s", storage=f"sqlite:///{tmp_path / 'study.db'}")
    workers = [threading.Thread(target=run_study, args=(overlapping,), kwargs=common)
               for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    rates = _learning_rates(storage)
    assert len(rates) == 4 and len(set(rates)) == 4, rates


def test_a_study_run_alone_draws_the_same_points_again(tmp_path):
    space = load_config(_config(space=SPACE)).config.tune.space
    rates = []
    for name in ("a", "b"):
        storage = f"sqlite:///{tmp_path / name}.db"
        run_study(_fake_trial, space=space, study_name="s", storage=storage,
                  direction="minimize", startup_trials=2, importances=False, n_trials=4,
                  seed=3, pruner="none")
        rates.append(_learning_rates(storage))
    assert rates[0] == rates[1] and len(set(rates[0])) == 4


def test_a_time_budget_stops_the_study_and_caps_the_running_trial(tmp_path):
    limits = []

    def trial(number, params, report, max_time_s):
        limits.append(max_time_s)
        return 1.0

    clock = iter(range(0, 1000, 40)).__next__  # 40 s per call
    space = load_config(_config(space=SPACE)).config.tune.space
    result = run_study(trial, space=space, study_name="t", storage=f"sqlite:///{tmp_path}/t.db",
                       direction="minimize", timeout_s=100, trial_max_time_s=600,
                       clock=clock)
    assert limits and all(limit <= 100 for limit in limits)
    assert result.stop_reason == "budget"


@pytest.mark.parametrize("kwargs, message", [
    ({"budget": "5 parsecs"}, "invalid --budget '5 parsecs'"),
    ({"trials": 1, "storage": "nosuchdb://host/x"}, "--storage 'nosuchdb://host/x': cannot "
     "open the study storage"),
])
def test_bad_tune_options_are_config_errors(tiny_config, kwargs, message):
    with pytest.raises(ConfigError) as info:
        entrena.tune(tiny_config, **kwargs)
    assert message in str(info.value)


def test_tune_runs_a_tracked_trial_and_writes_the_best_config(tiny_config, tmp_path,
                                                              monkeypatch):
    """In process, one trial (untracked: the slow CLI test checks the nested MLflow runs); its
    config has a `tune` section, which `train` ignores. The study's cost is its trials'."""
    (tmp_path / "price.yaml").write_text("local_usd_per_hour: 3600\n")  # 1 USD a second
    monkeypatch.setenv("ENTRENA_CATALOG", str(tmp_path / "price.yaml"))
    monkeypatch.delenv("ENTRENA_INSTANCE", raising=False)
    tiny_config["tune"] = {"space": {"train.learning_rate": {"low": 1e-4, "high": 1e-2,
                                                             "log": True}}}
    tiny_config["train"]["max_epochs"] = 1
    result = entrena.tune(tiny_config, trials=1)
    summary = result.summary
    assert (summary["trials"], summary["pruned"], summary["best"]["trial"]) == (1, 0, 0)
    best = yaml.safe_load(result.best_config.read_text())
    assert "tune" not in best
    assert best["train"]["learning_rate"] == summary["best"]["params"]["train.learning_rate"]
    assert json.loads((result.study_dir / "trial-0000" / "status.json").read_text())[
        "status"] == "finished"
    assert not (result.study_dir / "mlflow_parent_run_id").exists()  # tracking is off
    trial_cost = json.loads((result.study_dir / "trial-0000" / "metrics.json").read_text())[
        "cost"]
    assert trial_cost["usd_per_hour"] == 3600 and "price.yaml" in trial_cost["source"]
    assert trial_cost["usd"] == pytest.approx(trial_cost["wall_time_s"]) and trial_cost["usd"] > 0
    assert summary["cost"]["usd"] == pytest.approx(trial_cost["usd"])
    assert summary["cost"]["trials"] == 1


@pytest.mark.slow
def test_tune_runs_tracked_trials_and_writes_the_best_config(tiny_config, config_file, tmp_path):
    tiny_config["tune"] = {"space": {"train.learning_rate": {"low": 1e-4, "high": 1e-2,
                                                             "log": True}},
                           "startup_trials": 1}
    tiny_config["tracking"] = {"enabled": True}
    tiny_config["train"]["max_epochs"] = 1
    tiny_config["train"]["evals_per_epoch"] = 2
    path = config_file(tiny_config)
    result = run_cli("tune", path, "--trials", "2", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["trials"] == 2 and summary["pruned"] + summary["completed"] == 2
    assert set(summary["best"]) == {"trial", "value", "params"}
    study_dir = tmp_path / "runs" / "tiny-tune"
    best = yaml.safe_load((study_dir / "best_config.yaml").read_text())
    assert "tune" not in best
    assert best["train"]["learning_rate"] == summary["best"]["params"]["train.learning_rate"]
    assert load_config(study_dir / "best_config.yaml").config.name == "tiny"
    for number in (0, 1):
        assert (study_dir / f"trial-{number:04d}" / "status.json").is_file()
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{study_dir / 'mlflow.db'}")
    parent = (study_dir / "mlflow_parent_run_id").read_text()
    experiment = client.get_experiment_by_name("entrena")
    runs = client.search_runs([experiment.experiment_id],
                              filter_string=f"tags.mlflow.parentRunId = '{parent}'")
    assert len(runs) == 2
    study_run = client.get_run(parent)  # ended with the study, its outcome logged
    assert study_run.info.status == "FINISHED"
    assert study_run.data.metrics["study.trials"] == 2
    assert study_run.data.metrics[f"best.{summary['metric']}"] == summary["best"]["value"]
    assert study_run.data.tags["entrena.best_trial"] == str(summary["best"]["trial"])


def test_the_studys_parent_run_ends_with_its_last_worker(tiny_config, tmp_path, monkeypatch):
    """Workers share a study: one that ends, by an error or done, while another worker's trial
    is RUNNING in the shared storage leaves the MLflow parent run RUNNING; the last worker to
    end finishes it, with the whole study's summary. (Trials without training: the slow CLI
    test trains tracked ones.)"""
    from types import SimpleNamespace

    from mlflow.tracking import MlflowClient

    import entrena.api.training

    tiny_config["tune"] = {"space": {"train.learning_rate": {"low": 1e-4, "high": 1e-2,
                                                             "log": True}},
                           "direction": "minimize"}
    tiny_config["tracking"] = {"enabled": True}
    study_dir = tmp_path / "study"
    study_dir.mkdir()
    other = optuna.create_study(study_name="tiny", direction="minimize",
                                storage=f"sqlite:///{study_dir / 'study.db'}")
    elsewhere = other.ask()  # another worker's trial, under way

    def broken(*args, **kwargs):
        raise RuntimeError("this worker's trial fails")

    monkeypatch.setattr(entrena.api.training, "train", broken)
    with pytest.raises(RuntimeError, match="this worker's trial fails"):
        entrena.tune(tiny_config, trials=1, run_dir=study_dir)
    client = MlflowClient(tracking_uri=f"sqlite:///{study_dir / 'mlflow.db'}")
    parent = (study_dir / "mlflow_parent_run_id").read_text()
    assert client.get_run(parent).info.status == "RUNNING"  # not FAILED: the other goes on
    monkeypatch.setattr(entrena.api.training, "train", lambda *args, **kwargs: SimpleNamespace(
        metrics={"validation": {"loss": 0.25}}))
    done = entrena.tune(tiny_config, trials=1, run_dir=study_dir).summary
    assert (done["trials"], done["completed"], done["failed"]) == (3, 1, 1)
    study_run = client.get_run(parent)
    assert study_run.info.status == "RUNNING"  # not FINISHED: the other worker is still on
    assert "study.trials" not in study_run.data.metrics
    other.tell(elsewhere, 0.5)  # the other worker's trial ends, then that worker
    last = entrena.tune(tiny_config, trials=1, run_dir=study_dir).summary
    study_run = client.get_run(parent)
    assert study_run.info.status == "FINISHED"
    assert study_run.data.metrics["study.trials"] == last["trials"] == 4
    assert study_run.data.metrics["best.validation.loss"] == 0.25
    assert study_run.data.tags["entrena.best_trial"] == str(last["best"]["trial"])


def test_a_worker_stopped_by_a_base_exception_leaves_no_trial_running(tmp_path):
    """A stop signal (a BaseException Optuna does not catch) ends the worker's trial FAIL;
    only another worker's trial counts as running."""
    from entrena.tuning import running_trials

    class Stop(BaseException):
        pass

    def stopped(number, params, report, max_time_s):
        raise Stop()

    storage = f"sqlite:///{tmp_path / 'study.db'}"
    space = load_config(_config(space=SPACE)).config.tune.space
    with pytest.raises(Stop):
        run_study(stopped, space=space, study_name="s", storage=storage,
                  direction="minimize", n_trials=2, importances=False)
    study = optuna.load_study(study_name="s", storage=storage)
    assert [t.state for t in study.get_trials()] == [optuna.trial.TrialState.FAIL]
    assert running_trials("s", storage) == 0
    study.ask()
    assert running_trials("s", storage) == 1


def test_the_tune_section_does_not_change_a_runs_config_hash():
    from entrena.config.fingerprint import config_hash

    plain = load_config(_config()).config.model_dump(mode="json")
    searched = load_config(_config(space=SPACE)).config.model_dump(mode="json")
    assert config_hash(plain) == config_hash(searched)


@pytest.mark.slow  # plans the run first (seconds to tens of seconds)
def test_a_money_budget_needs_a_price_for_this_machine(tiny_config):
    with pytest.raises(ConfigError) as info:
        entrena.tune(tiny_config, budget="5usd")
    assert "the planner has no price for this machine" in str(info.value)


def test_tune_help_gives_the_study_directory_it_uses():
    from typer.testing import CliRunner

    from entrena.cli import app

    result = CliRunner().invoke(app, ["tune", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "(default: runs/<name>-tune)" in result.output  # it said runs/<name>


_WORKER = """
import sys, time
sys.path.insert(0, {tests!r})
import optuna
from entrena.config import load_config
from entrena.tuning import run_study
import test_tune

space = load_config(test_tune._config(space=test_tune.SPACE)).config.tune.space

def slow_trial(number, params, report, max_time_s):
    time.sleep(0.05)  # trials overlap between the workers
    return test_tune._fake_trial(number, params, report, max_time_s)

result = run_study(slow_trial, space=space, study_name="s", storage={storage!r},
                   direction="minimize", startup_trials=2, importances=False, n_trials=6,
                   seed=int(sys.argv[1]), pruner="none")
print(result.ran)
"""


@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_two_worker_processes_share_a_study_without_losing_a_trial(tmp_path, kind):
    import subprocess
    import sys
    from pathlib import Path

    storage = (f"sqlite:///{tmp_path / 'study.db'}" if kind == "sqlite"
               else f"journal:{tmp_path / 'study.log'}")
    script = _WORKER.format(tests=str(Path(__file__).parent), storage=storage)
    workers = [subprocess.Popen([sys.executable, "-c", script, str(i)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for i in range(2)]
    outputs = [worker.communicate(timeout=240) for worker in workers]
    for worker, (out, err) in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, err
        assert out.strip() == "6"
    from entrena.tuning.study import open_storage

    study = optuna.load_study(study_name="s", storage=open_storage(storage))
    trials = study.get_trials(deepcopy=False)
    assert sorted(t.number for t in trials) == list(range(12))  # none lost, none twice
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    assert all(set(t.params) == set(SPACE) for t in trials)


def test_a_journal_storage_that_cannot_be_written_is_a_config_error(tmp_path):
    from entrena.tuning.study import open_storage

    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match=r"--storage 'journal:.*': cannot open the journal "
                                          r"file .*; give a writable path"):
        open_storage(f"journal:{tmp_path / 'file' / 'study.log'}")


@pytest.mark.parametrize("space, message", [
    ({"train.batch_size": {"choices": [0, 8]}},
     "tune.space.train.batch_size: the choice 0 is not a valid train.batch_size (Input should "
     "be greater than or equal to 1); change tune.space.train.batch_size"),
    ({"train.max_epochs": {"low": 1.0, "high": 3.0}},
     "tune.space.train.max_epochs: the range value 1.0000000000000002 is not a valid "
     "train.max_epochs (Input should be a valid integer, got a number with a fractional part)"),
    ({"train.learning_rate": {"low": -1, "high": 1}},
     "tune.space.train.learning_rate: the range value -1 is not a valid train.learning_rate"),
])
def test_a_space_that_draws_values_the_config_refuses_fails_before_the_study(
        tiny_config, tmp_path, space, message):
    # Before: the study opened (study.db written) and failed at the first trial that drew
    # such a value, Optuna's traceback in the log, blaming "--set train.batch_size".
    tiny_config["tune"] = {"space": space}
    with pytest.raises(ConfigError) as info:
        entrena.tune(tiny_config, trials=1, run_dir=tmp_path / "study")
    assert str(info.value).startswith(message)
    assert not (tmp_path / "study").exists()


def test_a_failed_trial_logs_no_traceback_of_an_entrena_error(tiny_config, config_file,
                                                              tmp_path):
    # A choice only the data can refuse fails in its trial: before, Optuna's warning carried
    # the whole traceback to stderr; now the error's own line says it.
    tiny_config["tune"] = {"space": {"data.text_column": {"choices": ["nope"]}}}
    result = run_cli("tune", config_file(tiny_config), "--trials", "1", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error: ")
    assert "data.text_column = 'nope' is not a column" in result.stderr.splitlines()[-1]
