"""`entrena.train` on an unfinished run directory: exact resume after a signal, a crash or a
full disk; refusing a changed config; the non-finite guard and the time limit end to end;
byte-identical model folders. Tiny BERT on 96 generated rows, deterministic, on CPU."""

from __future__ import annotations

import errno
import io
import json
import os
import signal
from pathlib import Path

import pytest
from rich.console import Console

import entrena
from conftest import build_config, review_rows, write_csv
from entrena.core.callback import Callback
from entrena.engine import checkpointing
from entrena.engine.checkpointing import CheckpointStore
from entrena.errors import ConfigError, Interrupted, NonFiniteError, ResourceError


class Ids(Callback):
    """(epoch, position, example ids) of every training batch."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, int, tuple[int, ...]]] = []

    def on_batch_end(self, state) -> None:
        self.seen.append((state.epoch, state.batch_in_epoch, tuple(state.batch_indices)))


class At(Callback):
    """Runs ``action`` once, right after optimizer step ``step``."""

    def __init__(self, step: int, action):
        self.step, self.action, self.done = step, action, False

    def on_batch_end(self, state) -> None:
        if state.step == self.step and not self.done:
            self.done = True
            self.action()


class PoisonGradient(Callback):
    def __init__(self, step: int):
        self.step, self.done = step, False

    def on_after_backward(self, state) -> None:
        if state.step + 1 == self.step and not self.done:
            self.done = True
            next(state.model.parameters()).grad.view(-1)[0] = float("nan")


def send(name: str):
    return lambda: os.kill(os.getpid(), getattr(signal, name))


def crash():
    raise RuntimeError("power cut")


def quiet() -> Console:
    return Console(file=io.StringIO(), width=200)


def model_files(run_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((run_dir / "model").iterdir())}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("resume-data")
    write_csv(directory / "train.csv", review_rows(96, seed=1))
    write_csv(directory / "test.csv", review_rows(32, seed=2))
    return directory


@pytest.fixture(scope="module")
def make_config(data_dir):
    def make(**overrides) -> dict:
        settings = {"train.deterministic": True, "train.checkpoint.every_steps": 3,
                    "train.checkpoint.every_minutes": None, **overrides}
        return build_config(settings, train=str(data_dir / "train.csv"),
                            test=str(data_dir / "test.csv"))
    return make


@pytest.fixture(scope="module")
def reference(make_config, tmp_path_factory):
    """An uninterrupted run: its model files, the batches it saw, its metrics."""
    ids = Ids()
    run_dir = tmp_path_factory.mktemp("reference") / "run"
    result = entrena.train(make_config(), run_dir=run_dir, callbacks=[ids], console=quiet())
    assert result.metrics["fit"]["steps"] == 20 and result.metrics["fit"]["resumes"] == 0
    return {"run_dir": run_dir, "model": model_files(run_dir), "ids": ids.seen,
            "metrics": result.metrics}


def interrupt(config: dict, run_dir: Path, step: int, signal_name: str = "SIGTERM"):
    ids = Ids()
    with pytest.raises(Interrupted) as raised:
        entrena.train(config, run_dir=run_dir, callbacks=[ids, At(step, send(signal_name))],
                      console=quiet())
    return raised.value, ids


def resume(config: dict, run_dir: Path, **kwargs):
    ids, console = Ids(), quiet()
    result = entrena.train(config, run_dir=run_dir, callbacks=[ids], console=console, **kwargs)
    return result, ids, console.file.getvalue()


def test_sigterm_mid_epoch_then_resume_equals_an_uninterrupted_run(make_config, reference,
                                                                   tmp_path):
    run_dir = tmp_path / "run"
    error, first = interrupt(make_config(), run_dir, step=5)
    assert error.exit_code == 143 and error.step == 5 and error.signal_name == "SIGTERM"
    assert str(error).startswith("saved checkpoint at step 5 (SIGTERM), ")
    assert 0 <= error.signal_to_saved_s < 30
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "interrupted" and status["step"] == 5
    latest = json.loads((run_dir / "checkpoints" / "latest.json").read_text())
    assert (latest["step"], latest["epoch"], latest["batch_in_epoch"]) == (5, 0, 5)
    assert latest["reason"] == "SIGTERM"

    result, second, said = resume(make_config(), run_dir)
    assert said.splitlines()[0].startswith("resuming from step 5, epoch 1; ")
    assert said.splitlines()[0].endswith(" of training lost")
    assert result.resumed_from_step == 5 and result.metrics["fit"]["resumes"] == 1
    assert model_files(run_dir) == reference["model"]  # bit for bit
    assert first.seen + second.seen == reference["ids"]  # same examples, same order
    assert result.metrics["history"] == reference["metrics"]["history"]
    assert result.metrics["test"] == reference["metrics"]["test"]
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    saved = [e for e in events if e["type"] == "checkpoint"]
    assert [(e["step"], e["reason"]) for e in saved] == [
        (3, "steps"), (5, "SIGTERM"), (6, "steps"), (9, "steps"), (10, "epoch"), (12, "steps"),
        (15, "steps"), (18, "steps"), (20, "epoch")]
    assert [e["resumes"] for e in events if e["type"] == "fit_start"] == [0, 1]
    assert json.loads((run_dir / "status.json").read_text())["status"] == "finished"


def test_crash_resumes_from_the_last_checkpoint_and_redoes_the_lost_steps(make_config,
                                                                         reference, tmp_path):
    run_dir = tmp_path / "run"
    first = Ids()
    with pytest.raises(RuntimeError, match="power cut"):
        entrena.train(make_config(), run_dir=run_dir, callbacks=[first, At(8, crash)],
                      console=quiet())
    assert json.loads((run_dir / "status.json").read_text())["status"] == "failed"
    result, second, said = resume(make_config(), run_dir)
    assert said.startswith("resuming from step 6, epoch 1; ")
    assert model_files(run_dir) == reference["model"]
    assert first.seen[:6] + second.seen == reference["ids"]


def test_sigint_exits_130_and_neutral_config_changes_resume_silently(make_config, reference,
                                                                    tmp_path):
    run_dir = tmp_path / "run"
    error, _ = interrupt(make_config(), run_dir, step=12, signal_name="SIGINT")
    assert error.exit_code == 130 and str(error).startswith("saved checkpoint at step 12 (SIGINT)")
    neutral = make_config(**{"train.log_every_steps": 1, "train.checkpoint.keep_last": 5,
                             "train.max_time": "2h", "name": "renamed"})
    result, _, said = resume(neutral, run_dir)
    assert said.startswith("resuming from step 12, epoch 2; ")
    assert model_files(run_dir) == reference["model"]


def test_changed_config_is_refused_with_the_difference_unless_accepted(make_config, tmp_path):
    run_dir = tmp_path / "run"
    interrupt(make_config(), run_dir, step=5)
    changed = make_config(**{"train.learning_rate": 5e-4, "train.batch_size": 4})
    with pytest.raises(ConfigError) as raised:
        entrena.train(changed, run_dir=run_dir, console=quiet())
    message = str(raised.value)
    assert "the config differs from the one checkpoint step-000005.pt (step 5)" in message
    assert "  train.batch_size: 8 -> 4\n  train.learning_rate: 0.001 -> 0.0005" in message
    assert "--resume-with-changes" in message and "--restart" in message
    assert raised.value.exit_code == 2
    assert CheckpointStore(run_dir / "checkpoints").latest_readable().step == 5  # untouched

    result, _, said = resume(changed, run_dir, resume_with_changes=True)
    assert said.startswith("resuming from step 5, epoch 1; ") and result.resumed_from_step == 5
    assert "learning_rate: 0.0005" in (run_dir / "config.yaml").read_text()


def test_a_finished_run_says_so_and_restart_starts_over(make_config, reference):
    again = entrena.train(make_config(), run_dir=reference["run_dir"], console=quiet())
    assert again.already_finished and again.metrics["fit"]["steps"] == 20


def test_model_files_are_byte_identical_across_runs_and_directories(make_config, reference,
                                                                   tmp_path):
    run_dir = tmp_path / "elsewhere" / "other-name"
    entrena.train(make_config(name="other-name"), run_dir=run_dir, console=quiet())
    files = model_files(run_dir)
    assert files == reference["model"]
    for name, data in files.items():  # no paths, run names or times in the metadata
        for needle in (str(run_dir), str(reference["run_dir"]), "other-name", str(tmp_path)):
            assert needle.encode() not in data, (name, needle)


def test_nonfinite_gradient_stops_with_the_batch_and_a_fix(make_config, tmp_path):
    run_dir = tmp_path / "run"
    with pytest.raises(NonFiniteError) as raised:
        entrena.train(make_config(), run_dir=run_dir, callbacks=[PoisonGradient(5)],
                      console=quiet())
    message = str(raised.value)
    assert raised.value.exit_code == 1
    assert message.startswith("non-finite gradient norm (nan) at step 5 (epoch 1), caught "
                              "before the weights changed; the last good state (step 4) is in ")
    for fix in ("lower train.learning_rate (now 0.001)", "train.gradient_clip_norm",
                "train.on_nonfinite: skip_batch", "--resume-with-changes"):
        assert fix in message
    report = json.loads((run_dir / "nonfinite_batch.json").read_text())
    assert report["step"] == 5 and report["resume_step"] == 4 and len(report["rows"]) == 8
    assert all(1 <= row <= 96 for row in report["rows"]) and len(report["texts"]) == 8
    assert report["checkpoint"].endswith("step-000004.pt")
    assert json.loads((run_dir / "status.json").read_text())["status"] == "failed"
    latest = CheckpointStore(run_dir / "checkpoints").latest_readable()
    assert (latest.step, latest.reason) == (4, "nonfinite")

    # The usual way out: skip such batches, accepting the config change. The same batch
    # (poisoned again) comes at step 5 and is skipped this time.
    skipping = make_config(**{"train.on_nonfinite": "skip_batch"})
    result = entrena.train(skipping, run_dir=run_dir, callbacks=[PoisonGradient(5)],
                           resume_with_changes=True, console=quiet())
    assert result.resumed_from_step == 4 and result.metrics["fit"]["skipped_steps"] == 1
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert [e["action"] for e in events if e["type"] == "nonfinite"] == ["stop", "skip_batch"]


def test_skip_batch_counts_the_skipped_steps(make_config, tmp_path):
    result = entrena.train(make_config(**{"train.on_nonfinite": "skip_batch"}),
                           run_dir=tmp_path / "run", callbacks=[PoisonGradient(4)],
                           console=quiet())
    assert result.metrics["fit"]["skipped_steps"] == 1 and result.metrics["fit"]["steps"] == 19


def test_max_time_stops_with_a_checkpoint_and_the_best_weights(make_config, tmp_path):
    result = entrena.train(make_config(**{"train.max_time": "0.001s"}), run_dir=tmp_path / "run",
                           console=quiet())
    fit = result.metrics["fit"]
    assert fit["stop_reason"] == "max_time" and fit["steps"] == 1 and fit["best_step"] == 1
    latest = CheckpointStore(tmp_path / "run" / "checkpoints").latest_readable()
    assert (latest.step, latest.reason) == (1, "max_time")
    assert (tmp_path / "run" / "model" / "model.safetensors").is_file()
    assert json.loads((tmp_path / "run" / "status.json").read_text())["status"] == "finished"


def test_disk_full_keeps_the_previous_checkpoint_and_the_run_resumes(make_config, reference,
                                                                    tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    real = checkpointing._write_payload
    calls = []

    def full_on_second(payload, handle):
        calls.append(1)
        if len(calls) == 2:
            handle.write(b"x" * 1000)
            raise OSError(errno.ENOSPC, "No space left on device")
        real(payload, handle)

    monkeypatch.setattr(checkpointing, "_write_payload", full_on_second)
    with pytest.raises(ResourceError) as raised:
        entrena.train(make_config(), run_dir=run_dir, console=quiet())
    assert "disk full while writing checkpoint" in str(raised.value)
    assert "step-000006.pt: it needs about 11.6 MiB" in str(raised.value)
    assert "step-000003.pt (step 3), is intact" in str(raised.value)
    assert json.loads((run_dir / "status.json").read_text())["status"] == "failed"
    monkeypatch.setattr(checkpointing, "_write_payload", real)
    result, _, said = resume(make_config(), run_dir)
    assert said.startswith("resuming from step 3, epoch 1; ")
    assert model_files(run_dir) == reference["model"]


def test_corrupt_newest_checkpoint_falls_back_to_the_previous(make_config, reference, tmp_path,
                                                               caplog):
    run_dir = tmp_path / "run"
    interrupt(make_config(), run_dir, step=5)
    newest = run_dir / "checkpoints" / "step-000005.pt"
    data = bytearray(newest.read_bytes())
    data[-100] ^= 0x01
    newest.write_bytes(bytes(data))
    result, _, said = resume(make_config(), run_dir)
    assert "step-000005.pt is unreadable" in caplog.text
    assert said.startswith("resuming from step 3, epoch 1; ")
    assert model_files(run_dir) == reference["model"]


def test_unfinished_run_without_a_checkpoint_starts_over(make_config, tmp_path, caplog):
    run_dir = tmp_path / "run"
    with pytest.raises(RuntimeError):
        entrena.train(make_config(), run_dir=run_dir, callbacks=[At(2, crash)], console=quiet())
    assert not CheckpointStore(run_dir / "checkpoints").complete()
    result, _, said = resume(make_config(), run_dir)
    assert "without a complete checkpoint; starting it over" in caplog.text
    assert "resuming from" not in said and result.resumed_from_step is None
    assert result.metrics["fit"]["steps"] == 20


@pytest.mark.slow  # MLflow's SQLite store takes about 10 s to create
def test_a_resumed_run_continues_the_same_mlflow_run(make_config, tmp_path):
    from mlflow.tracking import MlflowClient

    config = make_config(**{"tracking.enabled": True})
    run_dir = tmp_path / "runs" / "tiny"
    interrupt(config, run_dir, step=5)
    resume(config, run_dir)
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("entrena")
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    assert runs[0].data.metrics["fit.resumes"] == 1


def test_tracking_server_down_training_goes_on_and_events_keep_the_numbers(make_config,
                                                                           tmp_path, caplog):
    import socket
    import time

    with socket.socket() as probe:  # a port nothing listens on: connections are refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = make_config(**{"tracking.enabled": True, "tracking.uri": f"http://127.0.0.1:{port}"})
    started = time.perf_counter()
    result = entrena.train(config, run_dir=tmp_path / "run", console=quiet())
    assert time.perf_counter() - started < 60  # MLflow's default retries took 255 s
    assert result.metrics["fit"]["steps"] == 20
    assert caplog.text.count("MLflow tracking off") == 1 and "training goes on" in caplog.text
    events = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").read_text()
              .splitlines()]
    assert [e["step"] for e in events if e["type"] == "eval"] == [10, 20]
    assert [e["step"] for e in events if e["type"] == "step"] == [1, 10, 20]


def test_draws_between_building_the_model_and_the_loop_do_not_change_results(make_config,
                                                                           reference,
                                                                           tmp_path,
                                                                           monkeypatch):
    # A planner probe or a hardware measurement that draws from the global generator on a
    # cache miss only must not make two runs of one config differ: the loop is seeded again.
    import torch

    from entrena.engine.backend import Backend

    setup = Backend.setup

    def drawing_setup(self, model, optimizer):
        torch.rand(7)
        return setup(self, model, optimizer)

    monkeypatch.setattr(Backend, "setup", drawing_setup)
    entrena.train(make_config(), run_dir=tmp_path / "run", console=quiet())
    assert model_files(tmp_path / "run") == reference["model"]
