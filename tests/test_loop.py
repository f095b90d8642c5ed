"""The training loop (``entrena.engine.loop``) driven with a tiny torch model and fake data."""

from __future__ import annotations

import pytest
import torch

from entrena.core.events import Event
from entrena.engine.loop import FitSettings, evaluation_points, fit, predict
from entrena.tasks.metrics import cross_entropy_loss
from fakes import FakeBackend, FakeSource, Recorder, ScriptedEvaluate, TinyModel, weights


def run(settings: FitSettings, *, source: FakeSource | None = None, callbacks=(),
        losses=(1.0,), lr: float = 0.1, model: TinyModel | None = None):
    model = model or TinyModel()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    evaluate = ScriptedEvaluate(losses)
    state = fit(backend=FakeBackend(), model=model, loss=cross_entropy_loss,
                optimizer=optimizer,
                train=source or FakeSource(), evaluate=evaluate, settings=settings,
                callbacks=list(callbacks))
    return state, model, optimizer, evaluate


def count_steps(optimizer: torch.optim.Optimizer) -> list[int]:
    """Wrap ``optimizer.step`` so that calls are counted in the returned list."""
    calls: list[int] = []
    original = optimizer.step

    def step(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    optimizer.step = step  # type: ignore[method-assign]
    return calls


def test_events_fire_in_loop_order():
    recorder = Recorder()
    run(FitSettings(max_epochs=1), source=FakeSource(n=8, batch_size=4), callbacks=[recorder])
    batch = [Event.BATCH_START, Event.AFTER_BACKWARD, Event.BATCH_END]
    assert recorder.events == [Event.FIT_START, Event.EPOCH_START, *batch, *batch,
                               Event.EVAL_START, Event.EVAL_END, Event.EPOCH_END, Event.FIT_END]


def test_fit_runs_max_epochs_and_counts():
    state, *_ , evaluate = run(FitSettings(max_epochs=3), source=FakeSource(n=40, batch_size=4))
    assert state.stop_reason == "max_epochs"
    assert state.epoch == 3 and state.batch_in_epoch == 0
    assert state.step == 30 and state.steps_per_epoch == 10 and state.max_steps == 30
    assert state.samples_seen == 120
    assert state.tokens_seen == state.padded_tokens_seen == 120 * 6
    assert state.padding_fraction == 0.0
    assert evaluate.calls == 3
    assert [h["step"] for h in state.history] == [10, 20, 30]
    assert [h["epoch"] for h in state.history] == [0, 1, 2]
    assert state.train_time_s > 0


def test_training_changes_the_weights():
    model = TinyModel()
    before = weights(model)
    run(FitSettings(max_epochs=1), model=model)
    assert not torch.equal(before["head.weight"], model.state_dict()["head.weight"])


@pytest.mark.parametrize(("batches", "accumulation", "steps_per_epoch"), [(10, 1, 10), (10, 2, 5),
                                                                           (10, 4, 3), (10, 20, 1)])
def test_gradient_accumulation_counts_optimizer_steps(batches, accumulation, steps_per_epoch):
    model = TinyModel()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    calls = count_steps(optimizer)
    state = fit(backend=FakeBackend(), model=model, loss=cross_entropy_loss,
                optimizer=optimizer,
                train=FakeSource(n=batches * 4, batch_size=4), evaluate=ScriptedEvaluate([1.0]),
                settings=FitSettings(max_epochs=2, gradient_accumulation_steps=accumulation),
                callbacks=[])
    assert state.steps_per_epoch == steps_per_epoch
    assert len(calls) == state.step == 2 * steps_per_epoch
    assert state.samples_seen == 2 * batches * 4


def test_accumulated_micro_batches_equal_one_large_batch():
    small = TinyModel(seed=1)
    large = TinyModel(seed=1)
    no_clip = dict(max_epochs=1, gradient_clip_norm=None)
    run(FitSettings(**no_clip, gradient_accumulation_steps=2), model=small,
        source=FakeSource(n=8, batch_size=4))
    run(FitSettings(**no_clip), model=large, source=FakeSource(n=8, batch_size=8))
    for name, value in small.state_dict().items():
        torch.testing.assert_close(value, large.state_dict()[name])


def test_max_steps_stops_mid_epoch_and_evaluates():
    state, *_ , evaluate = run(FitSettings(max_epochs=10, max_steps=13),
                               source=FakeSource(n=40, batch_size=4))
    assert state.stop_reason == "max_steps"
    assert state.step == 13 and state.max_steps == 13
    assert state.epoch == 1 and state.batch_in_epoch == 3  # stopped inside the second epoch
    assert evaluate.calls == 2  # end of epoch 1, then at the stop
    assert state.history[-1]["step"] == 13


def test_max_steps_counts_optimizer_steps_not_micro_batches():
    state, *_ = run(FitSettings(max_epochs=10, max_steps=3, gradient_accumulation_steps=2),
                    source=FakeSource(n=40, batch_size=4))
    assert state.step == 3 and state.samples_seen == 3 * 2 * 4


def test_max_epochs_wins_when_reached_first():
    state, *_ = run(FitSettings(max_epochs=1, max_steps=1000))
    assert state.stop_reason == "max_epochs" and state.max_steps == 10


def test_evaluation_points():
    assert evaluation_points(10, 1) == {10}
    assert evaluation_points(10, 2) == {5, 10}
    assert evaluation_points(10, 3) == {4, 7, 10}
    assert evaluation_points(3, 10) == {1, 2, 3}


def test_evals_per_epoch_runs_validation_inside_the_epoch():
    state, *_ , evaluate = run(FitSettings(max_epochs=2, evals_per_epoch=2))
    assert evaluate.calls == 4
    assert [h["step"] for h in state.history] == [5, 10, 15, 20]


def test_gradient_clipping_bounds_the_update():
    model = TinyModel()
    before = weights(model)
    run(FitSettings(max_epochs=1, max_steps=1, gradient_clip_norm=1e-3), model=model, lr=1.0)
    change = torch.sqrt(sum(((model.state_dict()[k] - v) ** 2).sum() for k, v in before.items()))
    assert 0 < float(change) <= 1e-3 + 1e-7


def test_predict_returns_logits_in_example_order():
    model = TinyModel()
    source = FakeSource(n=10, batch_size=4)

    class Shuffled(FakeSource):
        def plan(self, epoch):
            return [[9, 2, 5], [0, 1, 3, 4], [6, 7, 8]]

    shuffled = Shuffled(n=10, batch_size=4)
    logits, labels, loss = predict(FakeBackend(), model, shuffled, cross_entropy_loss)
    with torch.no_grad():
        expected = model(source.ids, torch.ones_like(source.ids))
    torch.testing.assert_close(torch.from_numpy(logits), expected)
    assert labels.tolist() == source.labels.tolist()
    assert loss == pytest.approx(float(torch.nn.functional.cross_entropy(expected, source.labels)))
    assert model.training  # predict restores the mode it found
