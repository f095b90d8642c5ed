"""``entrena train --budget`` end to end: the bad input of the issue (one ``error:`` line that
names the value and the fix, exit 2, no run directory) and budgeted runs of the tiny config.

Errors found while reading the config run the real console script (they come before torch is
imported: half a second each). Those found after the data are read (a money budget on an
unpriced machine, a budget below the fixed costs) and the runs invoke the CLI in this process,
where the imports are already paid; the budget's clock then starts at the command, as it
would in a fresh process. The binding run is the real process and is marked slow.
"""

from __future__ import annotations

import json
import logging
import math
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

import entrena
from conftest import build_config, run_cli
from entrena.cli import app
from entrena.units import parse_duration_s


@pytest.fixture(autouse=True)
def _unpriced(monkeypatch):
    """No price for this machine: no ``ENTRENA_INSTANCE``, no catalog file, and a DMI product
    name that names no catalog offer (a cloud VM running the tests must not price itself)."""
    monkeypatch.delenv("ENTRENA_INSTANCE", raising=False)
    monkeypatch.delenv("ENTRENA_CATALOG", raising=False)
    monkeypatch.setattr("entrena.hardware.cost._dmi_product", lambda: None)


def only_error_line(stderr: str) -> str:
    """The ``error: ...`` line, which must be all of stderr."""
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: "), stderr
    return lines[0]


def last_error_line(stderr: str) -> str:
    """The ``error: ...`` line after a run's progress (the data table, INFO lines): the one
    error line, and the last line."""
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("error")]
    assert len(errors) == 1 and lines[-1] == errors[0], stderr
    return errors[0]


def invoke(*args: str | Path):
    """``entrena ARGS`` in this process (stdout and stderr apart), its budget clock started
    now; the log handler the command adds is taken off again."""
    logger = logging.getLogger("entrena")
    handlers, level, propagate = list(logger.handlers), logger.level, logger.propagate
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("entrena.tracking.events.since_process_start_s", lambda: 0.0)
            return CliRunner().invoke(app, [str(a) for a in args])
    finally:
        logger.handlers[:] = handlers
        logger.setLevel(level)
        logger.propagate = propagate


# --- refused while reading the config: the real CLI, stderr one line ------------------------

@pytest.mark.parametrize(("args", "expected"), [
    (["--budget", "0"],
     "error: invalid --budget '0': must be a positive duration, such as '30m' or '2h'"),
    (["--budget", "5 potatoes"],
     "error: invalid --budget '5 potatoes': write an amount such as '20usd' (a bare number is "
     "seconds) or a duration such as '30m', '2h' or '1.5d'"),
    (["--budget", "-3m"],
     "error: invalid --budget '-3m': must be positive; write an amount such as '20usd' (a bare "
     "number is seconds) or a duration such as '30m', '2h' or '1.5d'"),
    (["--set", "train.budget=0"],
     "error: --set train.budget: train.budget = 0 is invalid: must be a positive duration, "
     "such as '30m' or '2h'"),
    (["--set", "train.max_time=10m", "--budget", "5m"],
     "error: --set train.max_time: train.max_time: '10m' and train.budget '5m' are both set; "
     "a budget already ends the run in time, with the learning-rate schedule fitted to it: "
     "remove train.max_time"),
], ids=["zero", "potatoes", "negative", "set-zero", "with-max-time"])
def test_a_bad_budget_is_one_line_exit_2_and_writes_nothing(tmp_path, tiny_data, config_file,
                                                             args, expected):
    result = run_cli("train", config_file(build_config()), *args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert only_error_line(result.stderr) == expected
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("train.budget", "5 potatoes",
     "error: config.yaml:23: train.budget = '5 potatoes' is invalid: write an amount such as "
     "'20usd'"),
    ("train.budget", -180,
     "error: config.yaml:23: train.budget = -180 is invalid: must be positive; write an amount"),
    ("train.budget", "0m",
     "error: config.yaml:23: train.budget = '0m' is invalid: must be a positive duration"),
    ("train.max_time", "10m",  # the file's max_time and --budget: the file's line is named
     "error: config.yaml:23: train.max_time: '10m' and train.budget '5m' are both set;"),
], ids=["budget-potatoes", "budget-negative", "budget-zero", "file-max-time"])
def test_a_bad_budget_in_the_file_names_its_line(tmp_path, tiny_data, config_file, key, value,
                                                 expected):
    path = config_file(build_config({key: value}))
    assert path.read_text().splitlines()[22].startswith(f"  {key.split('.')[1]}: ")
    args = ["--budget", "5m"] if key == "train.max_time" else []
    result = run_cli("train", path.name, *args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert only_error_line(result.stderr).startswith(expected)
    assert not (tmp_path / "runs").exists()


# --- refused after the data are read: nothing of the run is left ----------------------------

def test_a_money_budget_on_a_machine_without_a_price_is_refused(tmp_path, tiny_data,
                                                                config_file):
    result = invoke("train", config_file(build_config()), "--budget", "$2")
    assert result.exit_code == 2, result.output
    assert last_error_line(result.stderr) == (
        "error: train.budget '$2' is money, but this machine has no price (not a known cloud "
        "instance and no local_usd_per_hour); give the budget as a time ('8m', '1h30m'), or "
        "price the machine: set ENTRENA_INSTANCE to its catalog offer, or local_usd_per_hour "
        "in a catalog file named by ENTRENA_CATALOG")
    assert not (tmp_path / "runs").exists()  # refused before the data or a tracker start


def test_a_budget_below_the_fixed_costs_names_the_smallest_that_works(tmp_path, tiny_data,
                                                                      config_file):
    result = invoke("train", config_file(build_config()), "--budget", "5s")
    assert result.exit_code == 2, result.output
    line = last_error_line(result.stderr)
    assert line.startswith("error: train.budget 5.0s is too small: ")
    assert " were spent before the first step, and 10 optimizer steps (~" in line
    named = re.search(r"at least (.+) in all; give a budget of (\S+) or more$", line)
    assert named, line
    least_s, give_s = parse_duration_s(named[1]), parse_duration_s(named[2])
    # a fresh cache: the 20 s assumed for the work after the test pass alone exceed 5 s
    assert 20 < least_s <= give_s <= 1.25 * least_s + 10  # headroom, rounded up to 10 s
    assert not (tmp_path / "runs" / "tiny").exists()
    assert not any((tmp_path / "runs").iterdir())


# --- budgeted runs --------------------------------------------------------------------------

def test_a_generous_budget_changes_nothing(tmp_path, tiny_data, config_file):
    config = config_file(build_config())
    result = invoke("train", config, "--budget", "10m")
    assert result.exit_code == 0, result.output
    metrics = json.loads((tmp_path / "runs" / "tiny" / "metrics.json").read_text())
    budget, fit = metrics["budget"], metrics["fit"]
    assert budget["requested_s"] == 600.0 and budget["binding"] is False
    assert 0 < budget["used_s"] < 600 and budget["overshoot_s"] == 0
    plain = entrena.train(config, run_dir=tmp_path / "runs" / "plain").metrics
    assert "budget" not in plain
    assert fit["steps"] == plain["fit"]["steps"] == math.ceil(76 / 8) * 2  # 2 epochs
    assert fit["stop_reason"] == plain["fit"]["stop_reason"] == "max_epochs"
    assert budget["planned_steps"] == budget["trained_steps"] == fit["steps"]
    assert metrics["validation"]["loss"] == pytest.approx(plain["validation"]["loss"])


@pytest.mark.slow  # 1.5 min: the budget must outlast start-up, the fit and the finish
def test_a_binding_budget_stops_the_real_process_in_time(tmp_path, tiny_data, config_file):
    config = config_file(build_config({"train.max_epochs": 1000,
                                       "train.early_stopping.enabled": False}))
    result = run_cli("train", config, "--budget", "90s", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    metrics = json.loads((tmp_path / "runs" / "tiny" / "metrics.json").read_text())
    budget = metrics["budget"]
    assert metrics["fit"]["stop_reason"] == "budget" and budget["binding"] is True
    assert 10 <= metrics["fit"]["steps"] < 1000 * 10
    assert budget["trained_steps"] == metrics["fit"]["steps"]
    assert budget["requested_s"] / 2 < budget["used_s"] <= budget["requested_s"] + 15
