"""The CLI's side of resume and interruption: options passed through, exit codes, messages.
(The real process under SIGTERM and SIGKILL is exercised by tests/test_chaos.py, slow.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import entrena.api
from entrena.api.training import TrainResult
from entrena.cli import app
from entrena.errors import Interrupted, NonFiniteError


@pytest.fixture
def calls(monkeypatch):
    """Replaces ``entrena.api.train`` with a stub that records its arguments and runs
    ``calls.effect()``."""

    class Calls(list):
        effect = staticmethod(lambda: None)

    recorded = Calls()

    def fake_train(config, **kwargs):
        recorded.append(kwargs)
        recorded.effect()
        return TrainResult(Path("runs/tiny"), {}, resumed_from_step=3)

    monkeypatch.setattr(entrena.api, "train", fake_train)
    return recorded


def invoke(*args: str):
    return CliRunner().invoke(app, ["train", "config.yaml", *args])


@pytest.mark.parametrize(("name", "code"), [("SIGTERM", 143), ("SIGUSR1", 143), ("SIGINT", 130)])
def test_an_interruption_with_a_checkpoint_exits_with_its_code_and_says_where(calls, name, code):
    message = f"saved checkpoint at step 7 ({name}), 0.21s after the signal: x.pt; run the same"

    def interrupted():
        raise Interrupted(message, signal_name=name, step=7, signal_to_saved_s=0.21)

    calls.effect = interrupted
    result = invoke()
    assert result.exit_code == code
    assert result.output.strip() == message  # not an "error:" line


def test_nonfinite_stop_exits_1_with_its_message(calls):
    def diverged():
        raise NonFiniteError("non-finite loss (nan) at step 3 (epoch 1); lower it")

    calls.effect = diverged
    result = invoke()
    assert result.exit_code == 1
    assert result.output.strip() == "error: non-finite loss (nan) at step 3 (epoch 1); lower it"


def test_resume_with_changes_and_restart_reach_the_api(calls):
    assert invoke("--resume-with-changes").exit_code == 0
    assert invoke("--restart").exit_code == 0
    assert [(c["resume_with_changes"], c["restart"]) for c in calls] == [(True, False),
                                                                          (False, True)]
