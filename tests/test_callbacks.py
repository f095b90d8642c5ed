"""Callbacks in the loop: early stopping, best-weights restore, checkpoints, LR schedules."""

from __future__ import annotations

import json
import math

import pytest
import torch

from entrena.callbacks.checkpoint import ModelCheckpoint
from entrena.callbacks.early_stopping import EarlyStopping
from entrena.callbacks.lr_schedule import LRSchedule, warmup_decay_factor
from entrena.callbacks.monitor import Monitor
from entrena.core.state import TrainState
from entrena.engine.loop import FitSettings, fit
from entrena.tasks.metrics import cross_entropy_loss
from entrena.tracking.events import EventLog
from fakes import FakeBackend, FakeSource, Recorder, ScriptedEvaluate, TinyModel, same_weights

LOSS = Monitor("validation.loss")


def run(callbacks, losses, *, max_epochs=10, lr=0.1, batches=3, **settings):
    """Fit TinyModel on ``batches`` batches per epoch, one evaluation per epoch, SGD."""
    model = TinyModel()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    recorder = Recorder()
    state = fit(backend=FakeBackend(), model=model, loss=cross_entropy_loss,
                optimizer=optimizer,
                train=FakeSource(n=batches * 4, batch_size=4), evaluate=ScriptedEvaluate(losses),
                settings=FitSettings(max_epochs=max_epochs, **settings),
                callbacks=[*callbacks, recorder])
    return state, model, recorder


# --- early stopping and best weights -------------------------------------------------------

def test_early_stopping_fires_when_validation_loss_gets_worse():
    stopper = EarlyStopping(LOSS, patience=1)
    state, _, recorder = run([stopper], [1.0, 0.8, 0.9, 0.95, 1.1, 1.2])
    assert state.stop_reason == "early_stopping"
    assert [h["loss"] for h in state.history] == [1.0, 0.8, 0.9, 0.95]  # 2 worse evals > 1
    assert state.step == stopper.stopped_at_step == 12
    assert state.epoch == 4  # the stopping epoch had finished
    assert stopper.best == 0.8


def test_patience_zero_stops_at_the_first_evaluation_without_improvement():
    state, *_ = run([EarlyStopping(LOSS, patience=0)], [1.0, 0.9, 0.9, 0.5])
    assert state.stop_reason == "early_stopping" and len(state.history) == 3


def test_min_delta_and_maximised_metric():
    monitor = Monitor("validation.accuracy", min_delta=0.05)
    assert monitor.maximize
    # accuracy = 1 - loss: 0.5, 0.53 (+0.03 < min_delta), 0.54 -> stop with patience 1
    state, *_ = run([EarlyStopping(monitor, patience=1)], [0.5, 0.47, 0.46, 0.1])
    assert state.stop_reason == "early_stopping" and len(state.history) == 3


def test_no_early_stop_while_improving():
    state, *_ = run([EarlyStopping(LOSS, patience=0)], [1.0, 0.9, 0.8, 0.7], max_epochs=4)
    assert state.stop_reason == "max_epochs"


def test_best_weights_come_back_after_early_stopping():
    checkpoint = ModelCheckpoint(None, LOSS)
    state, model, recorder = run([EarlyStopping(LOSS, patience=1), checkpoint],
                                 [1.0, 0.7, 0.9, 0.95, 1.1])
    assert state.stop_reason == "early_stopping"
    assert state.best_step == checkpoint.best_step == 6 and state.best_score == 0.7
    assert checkpoint.restored
    final = model.state_dict()
    assert same_weights(final, recorder.weights_at_eval[6])
    assert not same_weights(final, recorder.weights_at_eval[state.step])


def test_restore_off_keeps_the_final_weights_and_still_reports_the_best_step():
    checkpoint = ModelCheckpoint(None, LOSS, restore=False)
    state, model, recorder = run([checkpoint], [0.9, 0.5, 0.6, 0.7], max_epochs=4)
    assert not checkpoint.restored
    assert state.best_step == 6 and state.best_score == 0.5
    final = model.state_dict()
    assert same_weights(final, recorder.weights_at_eval[state.step])
    assert not same_weights(final, recorder.weights_at_eval[6])


def test_best_weights_come_back_when_max_epochs_ends_training():
    checkpoint = ModelCheckpoint(None, LOSS)
    state, model, recorder = run([checkpoint], [0.9, 0.5, 0.6, 0.7], max_epochs=4)
    assert state.stop_reason == "max_epochs" and state.best_step == 6
    assert same_weights(model.state_dict(), recorder.weights_at_eval[6])


def test_best_weights_come_back_when_max_steps_ends_training():
    checkpoint = ModelCheckpoint(None, LOSS)
    state, model, recorder = run([checkpoint], [0.5, 0.6, 0.7], max_steps=8)
    assert state.stop_reason == "max_steps" and state.best_step == 3
    assert same_weights(model.state_dict(), recorder.weights_at_eval[3])


def test_nan_validation_loss_never_counts_as_best():
    checkpoint = ModelCheckpoint(None, LOSS)
    state, *_ = run([checkpoint], [float("nan"), 0.5, float("nan")], max_epochs=3)
    assert state.best_step == 6 and state.best_score == 0.5


def test_best_pt_and_state_hold_the_best_weights(tmp_path):
    # Resumable checkpoints are the loop's job now (tests/test_checkpointing.py); ModelCheckpoint
    # writes best.pt and carries the best weights in its state for them.
    checkpoint = ModelCheckpoint(tmp_path / "checkpoints", LOSS)
    state, _, recorder = run([checkpoint], [1.0, 0.5, 0.8], max_epochs=3)
    best = torch.load(tmp_path / "checkpoints" / "best.pt", weights_only=True)
    assert best["step"] == 6 and best["score"] == 0.5 and best["monitor"] == "validation.loss"
    saved = checkpoint.state_dict()
    assert (saved["best_step"], saved["best_score"]) == (6, 0.5)
    assert same_weights(saved["weights"], recorder.weights_at_eval[6])  # best step != step 9
    assert not list((tmp_path / "checkpoints").glob("*.tmp"))  # no leftovers of atomic writes


def test_early_stopping_state_round_trips():
    stopper = EarlyStopping(LOSS, patience=3)
    run([stopper], [1.0, 0.9, 1.2], max_epochs=3)
    restored = EarlyStopping(LOSS, patience=3)
    restored.load_state_dict(json.loads(json.dumps(stopper.state_dict())))
    assert (restored.best, restored.wait) == (0.9, 1)


# --- learning-rate schedules ---------------------------------------------------------------

def test_linear_warmup_then_decay_factors():
    factors = [warmup_decay_factor(s, total_steps=10, warmup_steps=2, kind="linear")
               for s in range(11)]
    assert factors == pytest.approx([0.5, 1.0, 1.0, 7 / 8, 6 / 8, 5 / 8, 4 / 8, 3 / 8, 2 / 8,
                                     1 / 8, 0.0])


def test_cosine_and_constant_factors():
    cosine = [warmup_decay_factor(s, 10, 0, "cosine") for s in (0, 5, 10)]
    assert cosine == pytest.approx([1.0, 0.5, 0.0])
    assert warmup_decay_factor(7, 10, 2, "constant") == 1.0
    assert warmup_decay_factor(0, 10, 2, "constant") == 0.5  # warmup applies to every kind


def test_linear_schedule_in_the_loop():
    schedule = LRSchedule("linear", warmup_fraction=0.2)
    state, _, recorder = run([schedule], [1.0], max_epochs=2, lr=1.0, batches=5)
    assert state.max_steps == 10
    assert recorder.step_lrs == pytest.approx([0.5, 1.0, 1.0, 7 / 8, 6 / 8, 5 / 8, 4 / 8,
                                               3 / 8, 2 / 8, 1 / 8])
    assert state.optimizer.param_groups[0]["lr"] == pytest.approx(0.0)  # decayed to 0 at the end


def test_cosine_schedule_in_the_loop():
    state, _, recorder = run([LRSchedule("cosine", warmup_fraction=0.0)], [1.0], max_epochs=2,
                             lr=2.0, batches=4)
    expected = [2.0 * 0.5 * (1 + math.cos(math.pi * s / 8)) for s in range(8)]
    assert recorder.step_lrs == pytest.approx(expected)


def test_schedule_steps_once_per_optimizer_step_with_accumulation():
    schedule = LRSchedule("linear", warmup_fraction=0.0)
    state, _, recorder = run([schedule], [1.0], max_epochs=1, lr=1.0, batches=8,
                             gradient_accumulation_steps=2)
    assert state.max_steps == 4
    assert recorder.step_lrs == pytest.approx([1.0, 0.75, 0.5, 0.25])


def test_plateau_reduces_lr_when_validation_stalls():
    schedule = LRSchedule("plateau", monitor=LOSS, factor=0.5, patience=0)
    state, _, recorder = run([schedule], [1.0, 1.0, 1.0, 0.5], max_epochs=5, lr=1.0, batches=2)
    per_epoch = recorder.step_lrs[::2]
    assert per_epoch == pytest.approx([1.0, 1.0, 0.5, 0.25, 0.25])


def test_constant_schedule_keeps_lr():
    _, _, recorder = run([LRSchedule("constant")], [1.0], max_epochs=2, lr=0.3)
    assert recorder.step_lrs == pytest.approx([0.3] * 6)


# --- events.jsonl --------------------------------------------------------------------------

def test_event_log_writes_one_json_record_per_line(tmp_path):
    path = tmp_path / "events.jsonl"
    state, *_ = run([EventLog(path, every_steps=2)], [1.0, 0.9], max_epochs=2, batches=4)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    types = [r["type"] for r in records]
    assert types[0] == "fit_start" and types[-1] == "fit_end"
    # the first optimizer step, then steps 2, 4, 6, 8
    assert types.count("eval") == 2 and types.count("epoch") == 2 and types.count("step") == 5
    assert all({"type", "time", "step", "epoch"} <= set(r) for r in records)
    steps = [r for r in records if r["type"] == "step"]
    assert [r["step"] for r in steps] == [1, 2, 4, 6, 8]
    assert {"loss", "learning_rate", "throughput_samples_per_s", "padding_fraction"} <= \
        set(steps[0])
    assert steps[0]["since_process_start_s"] > 0  # from the process's start, imports included
    assert all("since_process_start_s" not in r for r in steps[1:])
    assert records[-1]["stop_reason"] == state.stop_reason


def test_monitor_reads_the_metric_after_the_dot():
    assert LOSS.value({"loss": 0.25, "accuracy": 0.5}) == 0.25
    assert not LOSS.maximize and Monitor("validation.macro_f1").maximize
    assert Monitor("validation.loss", mode="max").maximize
    assert TrainState().padding_fraction == 0.0


def test_a_resumed_schedule_takes_the_configured_peak_learning_rate():
    # A resume with a changed train.learning_rate (--resume-with-changes after a divergence)
    # trains at the new peak, not at the one saved in the optimizer and scheduler states.
    def started(lr: float, saved: tuple[dict, dict] | None = None, peak: float | None = None):
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
        schedule = LRSchedule("linear", warmup_fraction=0.0, peak_learning_rate=peak)
        if saved is not None:
            optimizer.load_state_dict(saved[0])
            schedule.load_state_dict(saved[1])
        state = TrainState(max_steps=10)
        state.optimizer = optimizer
        schedule.on_fit_start(state)
        return optimizer, schedule, state

    optimizer, schedule, state = started(1e6, peak=1e6)
    for _ in range(3):
        optimizer.step()
        schedule.on_batch_end(state)
    saved = (optimizer.state_dict(), schedule.state_dict())
    assert optimizer.param_groups[0]["lr"] == pytest.approx(1e6 * 0.7)

    again, _, state = started(1e-3, saved, peak=1e6)  # unchanged: the saved rate, exactly
    assert again.param_groups[0]["lr"] == saved[0]["param_groups"][0]["lr"]
    lowered, schedule, state = started(1e-3, saved, peak=1e-3)
    assert lowered.param_groups[0]["lr"] == pytest.approx(1e-3 * 0.7)
    assert state.learning_rate == pytest.approx(1e-3 * 0.7)
    schedule.on_batch_end(state)
    assert lowered.param_groups[0]["lr"] == pytest.approx(1e-3 * 0.6)
