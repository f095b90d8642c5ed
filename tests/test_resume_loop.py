"""Exact resume at the loop level (no transformers): interrupt anywhere, restore, compare
weights bitwise and the order of examples; signals; time limit; the non-finite guard."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from torch import nn

from entrena.callbacks.checkpoint import ModelCheckpoint, PeriodicCheckpoint
from entrena.callbacks.early_stopping import EarlyStopping
from entrena.callbacks.lr_schedule import LRSchedule
from entrena.callbacks.monitor import Monitor
from entrena.callbacks.preemption import Preemption, TimeLimit
from entrena.core.callback import Callback
from entrena.core.state import TrainState
from entrena.engine.checkpointing import (
    CheckpointStore,
    restore_rng,
    restore_training,
    training_payload,
)
from entrena.engine.loop import FitSettings, fit, predict
from entrena.tasks.metrics import cross_entropy_loss
from fakes import FakeBackend, FakeSource, same_weights, weights

LOSS = Monitor("validation.loss")


class DropoutModel(nn.Module):
    """Embedding mean -> dropout -> linear: dropout makes the torch RNG state matter."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(16, 8)
        self.drop = nn.Dropout(0.3)
        self.head = nn.Linear(8, 2)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        mask = attention_mask.unsqueeze(-1).float()
        pooled = (self.embed(input_ids) * mask).sum(1) / mask.sum(1)
        return self.head(self.drop(pooled))


class Ids(Callback):
    """Records (epoch, position in epoch, example ids, learning rate) of every micro-batch."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, int, tuple[int, ...], float]] = []

    def on_batch_end(self, state: TrainState) -> None:
        self.seen.append((state.epoch, state.batch_in_epoch, tuple(state.batch_indices),
                          state.optimizer.param_groups[0]["lr"]))


class At(Callback):
    """Calls ``action(state)`` once, at the end of the micro-batch that completes ``step``."""

    def __init__(self, step: int, action):
        self.step, self.action, self.done = step, action, False

    def on_batch_end(self, state: TrainState) -> None:
        if state.step == self.step and state.extras.get("last_micro") and not self.done:
            self.done = True
            self.action(state)


@dataclass
class Harness:
    """A fit of DropoutModel on FakeSource with the built-in callbacks and real checkpoints."""

    directory: Path
    extra: list[Callback] = field(default_factory=list)
    every_steps: int | None = None
    accumulation: int = 1
    max_epochs: int = 3
    on_nonfinite: str = "stop"
    clip: float | None = 1.0

    def __post_init__(self) -> None:
        torch.manual_seed(0)
        self.model = DropoutModel()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=0.05)
        self.backend = FakeBackend()
        self.ids = Ids()
        self.preemption = Preemption()
        self.best = ModelCheckpoint(self.directory, LOSS)
        self.callbacks = [LRSchedule("linear", 0.2, LOSS), EarlyStopping(LOSS, patience=10),
                          self.best, PeriodicCheckpoint(self.every_steps, None),
                          self.preemption, self.ids, *self.extra]
        self.store = CheckpointStore(self.directory)
        self.saves: list[tuple[int, str]] = []
        self.validation = FakeSource(n=12, batch_size=6, seed=1)

    def evaluate(self, model) -> dict[str, float]:
        return {"loss": predict(self.backend, model, self.validation, cross_entropy_loss)[2]}

    def save(self, state: TrainState, reason: str) -> dict:
        payload = training_payload(state, model=self.model, optimizer=self.optimizer,
                                   backend=self.backend, callbacks=self.callbacks,
                                   config_hash="h")
        info = self.store.save(payload, {"step": state.step, "epoch": state.epoch,
                                         "batch_in_epoch": state.batch_in_epoch,
                                         "reason": reason}, keep_last=3,
                               protect_steps=[state.best_step])
        self.saves.append((state.step, reason))
        return {"path": str(info.path), "step": info.step}

    def fit(self, resume: bool = False) -> TrainState:
        state, rng = TrainState(), None
        if resume:
            payload = self.store.load(self.store.latest_readable())
            restore_training(payload, state, model=self.model, optimizer=self.optimizer,
                             backend=self.backend, callbacks=self.callbacks)
            rng = payload["rng"]
        settings = FitSettings(max_epochs=self.max_epochs, gradient_clip_norm=self.clip,
                               gradient_accumulation_steps=self.accumulation,
                               on_nonfinite=self.on_nonfinite)
        with self.preemption.installed():
            if rng is not None:
                restore_rng(rng)
            return fit(backend=self.backend, model=self.model, loss=cross_entropy_loss,
                       optimizer=self.optimizer,
                       train=FakeSource(n=40, batch_size=4), evaluate=self.evaluate,
                       settings=settings, callbacks=self.callbacks, state=state,
                       save_checkpoint=self.save)


def sigterm(state: TrainState) -> None:
    os.kill(os.getpid(), signal.SIGTERM)


def crash(state: TrainState) -> None:
    raise RuntimeError("killed")


def reference(tmp_path: Path, **kwargs) -> Harness:
    """An uninterrupted fit; its final state is ``run.final``."""
    run = Harness(tmp_path / "reference", **kwargs)
    run.final = run.fit()
    assert run.final.stop_reason == "max_epochs" and not run.final.interrupted
    return run


@pytest.mark.parametrize(("step", "accumulation"), [(13, 1), (10, 1), (1, 1), (7, 2), (5, 2)])
def test_signal_mid_epoch_then_resume_is_bitwise_identical(tmp_path, step, accumulation):
    expected = reference(tmp_path, accumulation=accumulation)
    first = Harness(tmp_path / "run", extra=[At(step, sigterm)], accumulation=accumulation)
    state = first.fit()
    assert state.interrupted == "SIGTERM" and state.step == step  # the current step finished
    assert first.saves[-1] == (step, "SIGTERM")
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handlers put back
    second = Harness(tmp_path / "run", accumulation=accumulation)
    final = second.fit(resume=True)
    assert final.stop_reason == "max_epochs" and final.step == expected.final.step
    assert final.resumes == 1
    assert same_weights(weights(second.model), weights(expected.model))
    assert first.ids.seen + second.ids.seen == expected.ids.seen  # same examples, order, LRs
    assert final.history == expected.final.history
    assert second.best.best_step == expected.best.best_step


def test_crash_resumes_from_the_last_periodic_checkpoint(tmp_path):
    expected = reference(tmp_path)
    first = Harness(tmp_path / "run", extra=[At(15, crash)], every_steps=4)
    with pytest.raises(RuntimeError, match="killed"):
        first.fit()
    assert [s for s, _ in first.saves] == [4, 8, 10, 12]  # 10: the end of epoch 1
    second = Harness(tmp_path / "run", every_steps=4)
    second.fit(resume=True)
    assert same_weights(weights(second.model), weights(expected.model))
    redone = [seen for seen in first.ids.seen if (seen[0], seen[1]) <= (1, 2)]  # up to step 12
    assert redone + second.ids.seen == expected.ids.seen


def test_history_early_stopping_and_best_weights_survive_a_resume(tmp_path):
    expected = reference(tmp_path)
    first = Harness(tmp_path / "run", extra=[At(25, sigterm)])
    first.fit()
    second = Harness(tmp_path / "run")
    final = second.fit(resume=True)
    assert final.history == expected.final.history
    assert [h["step"] for h in final.history] == [10, 20, 30]
    stopper = second.callbacks[1]
    assert (stopper.best, stopper.wait) == (expected.callbacks[1].best, expected.callbacks[1].wait)
    assert (second.best.best_step, second.best.best_score) == (expected.best.best_step,
                                                               expected.best.best_score)
    assert same_weights(second.best.best_weights, expected.best.best_weights)


def test_learning_rate_does_not_reset_on_resume(tmp_path):
    expected = reference(tmp_path)
    first = Harness(tmp_path / "run", extra=[At(13, sigterm)])
    first.fit()
    second = Harness(tmp_path / "run")
    second.fit(resume=True)
    resumed_lrs = [lr for *_, lr in second.ids.seen]
    assert resumed_lrs == [lr for *_, lr in expected.ids.seen[13:]]
    assert resumed_lrs[0] != 0.05 * (1 / 6)  # not the first warmup step's rate again


def test_sigint_saves_and_a_second_sigint_quits_at_once(tmp_path):
    run = Harness(tmp_path / "run", extra=[At(3, lambda s: os.kill(os.getpid(), signal.SIGINT))])
    state = run.fit()
    assert state.interrupted == "SIGINT" and run.saves == [(3, "SIGINT")]
    preemption = Preemption()
    with preemption.installed():
        os.kill(os.getpid(), signal.SIGINT)
        assert preemption.signal_name == "SIGINT"
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)


def test_sigusr1_is_a_preemption_notice_too(tmp_path):
    run = Harness(tmp_path / "run", extra=[At(4, lambda s: os.kill(os.getpid(), signal.SIGUSR1))])
    state = run.fit()
    assert state.interrupted == "SIGUSR1" and run.saves == [(4, "SIGUSR1")]
    assert run.preemption.received_at is not None


def test_a_signal_during_evaluation_does_not_add_an_evaluation(tmp_path):
    class SignalInEval(Callback):
        def on_eval_start(self, state):
            if state.step == 10:
                os.kill(os.getpid(), signal.SIGTERM)

    run = Harness(tmp_path / "run", extra=[SignalInEval()])
    state = run.fit()
    # The planned evaluation at the end of epoch 1 ran; the checkpoint comes after it, at the
    # epoch boundary (epoch 1, batch 0), and no EPOCH_END is repeated on resume.
    assert state.interrupted == "SIGTERM" and [h["step"] for h in state.history] == [10]
    assert run.saves == [(10, "SIGTERM")]
    assert (state.epoch, state.batch_in_epoch) == (1, 0)


# --- periodic checkpoints and the time limit ---------------------------------------------

class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Tick(Callback):
    def __init__(self, clock: FakeClock, seconds: float):
        self.clock, self.seconds = clock, seconds

    def on_batch_end(self, state: TrainState) -> None:
        self.clock.now += self.seconds


def test_checkpoints_at_epoch_ends_every_steps_and_stop_with_no_duplicates(tmp_path):
    run = Harness(tmp_path / "run", every_steps=5)
    run.fit()
    assert run.saves == [(5, "steps"), (10, "epoch"), (15, "steps"), (20, "epoch"),
                         (25, "steps"), (30, "epoch")]
    assert [i.step for i in run.store.complete()][:3] == [30, 25, 20]


def test_every_minutes_uses_the_time_since_the_last_checkpoint(tmp_path):
    clock = FakeClock()
    periodic = PeriodicCheckpoint(None, every_minutes=1.0, clock=clock)
    run = Harness(tmp_path / "run", extra=[Tick(clock, 25.0), periodic])
    run.fit()
    # 25 s per step: due after 3 steps (75 s), then the epoch end at step 10 resets the count
    assert [s for s, r in run.saves if r == "minutes"] == [3, 6, 9, 13, 16, 19, 23, 26, 29]


def test_time_limit_stops_for_good_with_evaluation_checkpoint_and_best_weights(tmp_path):
    clock = FakeClock()
    limit = TimeLimit(60.0, clock=clock)
    run = Harness(tmp_path / "run", extra=[Tick(clock, 10.0), limit])
    state = run.fit()
    assert state.stop_reason == "max_time" and state.step == 6
    assert [h["step"] for h in state.history] == [6]  # evaluated at the stop
    assert run.saves == [(6, "max_time")]
    assert run.best.restored and state.best_step == 6
    assert limit.state_dict()["elapsed_s"] == 60.0
    # Summed across sessions: a resumed run with 60 s already used stops at once.
    again = TimeLimit(60.0, clock=clock)
    again.load_state_dict(limit.state_dict())
    again.on_fit_start(state)
    assert again.elapsed_s() == 60.0


def test_a_finished_checkpoint_resumes_to_the_end_without_training(tmp_path):
    run = Harness(tmp_path / "run", extra=[EarlyStopping(LOSS, patience=0)])
    state = run.fit()
    assert state.stop_reason == "early_stopping"
    again = Harness(tmp_path / "run", extra=[EarlyStopping(LOSS, patience=0)])
    final = again.fit(resume=True)
    assert again.ids.seen == [] and final.stop_reason == "early_stopping"
    assert final.step == state.step and again.saves == []


# --- the non-finite guard ----------------------------------------------------------------

class PoisonGradient(Callback):
    """Puts a NaN into one gradient at the micro-batch that would complete ``step``."""

    def __init__(self, step: int, value: float = float("nan")):
        self.step, self.value, self.done = step, value, False

    def on_after_backward(self, state: TrainState) -> None:
        # the second micro-batch of that step (batch_in_epoch counts those before this one)
        if state.step + 1 == self.step and state.batch_in_epoch % 2 == 1 and not self.done:
            self.done = True
            next(state.model.parameters()).grad[0, 0] = self.value


class Snapshot(Callback):
    def __init__(self) -> None:
        self.at: dict[int, dict[str, torch.Tensor]] = {}

    def on_step_end(self, state: TrainState) -> None:
        self.at.setdefault(state.step, weights(state.model))


def test_nonfinite_gradient_stops_before_the_weights_change(tmp_path):
    snapshot = Snapshot()
    run = Harness(tmp_path / "run", extra=[snapshot, PoisonGradient(4)], accumulation=2)
    state = run.fit()
    assert state.interrupted == "nonfinite" and state.step == 3
    assert (state.epoch, state.batch_in_epoch) == (0, 6)  # rewound to the step-3 boundary
    assert same_weights(weights(run.model), snapshot.at[3])  # untouched by the bad step
    bad = state.extras["nonfinite"]
    plan = FakeSource(n=40, batch_size=4).plan(0)
    assert bad["example_indices"] == plan[6] + plan[7]  # both micro-batches of step 4
    assert bad["step"] == 4 and bad["action"] == "stop" and bad["grad_norm"] != bad["grad_norm"]
    assert run.saves == [(3, "nonfinite")]
    payload = run.store.load(run.store.latest_readable())
    assert payload["counters"]["batch_in_epoch"] == 6 and payload["counters"]["step"] == 3
    assert all(torch.isfinite(v).all() for v in payload["model"].values())


def test_nonfinite_loss_is_caught_too(tmp_path):
    class PoisonLoss(Callback):
        def on_batch_start(self, state):
            if state.step == 2:
                with torch.no_grad():
                    state.model.head.bias.fill_(float("inf"))

    run = Harness(tmp_path / "run", extra=[PoisonLoss()], clip=None)
    state = run.fit()
    assert state.interrupted == "nonfinite" and state.step == 2
    assert state.extras["nonfinite"]["grad_norm"] is None  # the loss alone decided


def test_skip_batch_drops_the_bad_step_and_goes_on(tmp_path, caplog):
    snapshot = Snapshot()
    run = Harness(tmp_path / "run", extra=[snapshot, PoisonGradient(4, float("inf"))],
                  accumulation=2, on_nonfinite="skip_batch")
    state = run.fit()
    assert state.stop_reason == "max_epochs" and state.skipped_steps == 1
    assert state.step == 15 - 1  # 5 steps per epoch, 3 epochs, one skipped
    assert all(torch.isfinite(v).all() for v in weights(run.model).values())
    assert "skipped step 4 (epoch 1): loss 1.01" in caplog.text
    assert "gradient norm inf; example indices [24, 25, 26, 27, 28, 29, 30, 31]" in caplog.text


def test_nonfinite_guard_changes_nothing_when_values_are_finite(tmp_path):
    guarded = reference(tmp_path)
    unguarded = Harness(tmp_path / "other", on_nonfinite="skip_batch")
    unguarded.fit()
    assert same_weights(weights(guarded.model), weights(unguarded.model))
