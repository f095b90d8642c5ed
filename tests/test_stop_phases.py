"""A stop signal outside the fit (preparing the data, planning, testing and saving) ends
`train` at once with one line saying what was saved and what the same command will do, and
the same command then does it. Tiny BERT on 96 generated rows, on CPU."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

import entrena
from conftest import build_config, clean_env, review_rows, write_config, write_csv
from entrena.api import training
from entrena.core.callback import Callback
from entrena.errors import Interrupted
from entrena.recipes import training as fitting


def quiet() -> Console:
    return Console(file=io.StringIO(), width=200)


@pytest.fixture
def config(tmp_path) -> dict:
    write_csv(tmp_path / "data" / "train.csv", review_rows(96, seed=1))
    write_csv(tmp_path / "data" / "test.csv", review_rows(32, seed=2))
    return build_config({"train.max_epochs": 1})


def signalling(function, name: str = "SIGTERM"):
    """``function`` that sends this process ``name`` first."""
    def wrapped(*args, **kwargs):
        os.kill(os.getpid(), getattr(signal, name))
        return function(*args, **kwargs)

    return wrapped


def status(run_dir: Path) -> dict:
    return json.loads((run_dir / "status.json").read_text())


def test_sigterm_while_preparing_the_data(config, tmp_path, monkeypatch):
    original = training.prepare_data
    monkeypatch.setattr(training, "prepare_data", signalling(original))
    with pytest.raises(Interrupted) as raised:
        entrena.train(config, console=quiet())
    assert str(raised.value) == (
        "stopped by SIGTERM while preparing the data; nothing of the run was written "
        "(prepared data is cached only once complete); run the same command to start it")
    assert raised.value.exit_code == 143 and not (tmp_path / "runs").exists()
    monkeypatch.setattr(training, "prepare_data", original)
    assert entrena.train(config, console=quiet()).metrics["fit"]["steps"] == 10


def test_sigint_while_planning(config, tmp_path, monkeypatch):
    original = fitting.plan_run
    monkeypatch.setattr(fitting, "plan_run", signalling(original, "SIGINT"))
    run_dir = tmp_path / "runs" / "tiny"
    with pytest.raises(Interrupted) as raised:
        entrena.train(config, console=quiet())
    assert str(raised.value) == (
        f"stopped by SIGINT while planning, before the first training step; nothing to resume "
        f"yet in {Path('runs') / 'tiny'}; run the same command to start the run over (the "
        f"prepared data is cached)")
    assert raised.value.exit_code == 130
    assert status(run_dir)["status"] == "interrupted" and status(run_dir)["phase"] == "planning"
    monkeypatch.setattr(fitting, "plan_run", original)
    result = entrena.train(config, console=quiet())
    assert result.resumed_from_step is None and result.metrics["fit"]["steps"] == 10


def test_sigterm_while_testing_keeps_the_training(config, tmp_path):
    class AtFitEnd(Callback):
        def on_fit_end(self, state) -> None:
            os.kill(os.getpid(), signal.SIGTERM)  # the loop is over: no step to stop at

    run_dir = tmp_path / "runs" / "tiny"
    with pytest.raises(Interrupted) as raised:
        entrena.train(config, callbacks=[AtFitEnd()], console=quiet())
    checkpoint = Path("runs") / "tiny" / "checkpoints" / "step-000010.pt"
    assert str(raised.value) == (
        f"stopped by SIGTERM after training, while testing or saving the model; the trained "
        f"state is in {checkpoint} (step 10); run the same command to test and save the model "
        f"without training again")
    assert not (run_dir / "model").exists() and status(run_dir)["status"] == "interrupted"
    result = entrena.train(config, console=quiet())
    assert result.resumed_from_step == 10 and result.metrics["fit"]["steps"] == 10
    steps = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    # the first fit's step 1 and step 10, and no step trained again by the second
    assert [e["step"] for e in steps if e["type"] == "step"] == [1, 10]
    assert (run_dir / "model" / "model.safetensors").is_file()


def cli_stopped_in_prepare_data(config: dict, tmp_path: Path, module: str,
                                verb: str) -> subprocess.CompletedProcess[str]:
    """``entrena VERB config.yaml`` in a fresh interpreter whose ``entrena.api.MODULE``
    sends itself SIGTERM as it starts preparing the data (the platform's notice)."""
    config["data"]["train"] = str(tmp_path / "data" / "train.csv")
    path = write_config(config, tmp_path / "config.yaml")
    script = ("import os, signal, sys\n"
              f"from entrena.api import {module} as verb\n"
              "real = verb.prepare_data\n"
              "def stopped(*a, **k):\n"
              "    os.kill(os.getpid(), signal.SIGTERM)\n"
              "    return real(*a, **k)\n"
              "verb.prepare_data = stopped\n"
              "from entrena.cli import main\n"
              f"sys.argv = ['entrena', {verb!r}, {str(path)!r}]\n"
              "main()\n")
    return subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=clean_env(),
                          capture_output=True, text=True, timeout=300, check=False)


def test_the_cli_prints_the_line_and_exits_143(config, tmp_path):
    result = cli_stopped_in_prepare_data(config, tmp_path, "training", "train")
    assert result.returncode == 143, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "stopped by SIGTERM while preparing the data; nothing of the run was written "
        "(prepared data is cached only once complete); run the same command to start it")


def test_prepare_stopped_by_sigterm_says_so_and_leaves_nothing(config, tmp_path):
    result = cli_stopped_in_prepare_data(config, tmp_path, "preparing", "prepare")
    assert result.returncode == 143, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "stopped by SIGTERM; nothing half-written is left (an unfinished output is removed); "
        "run the same command again")
    assert not (tmp_path / "runs").exists()
