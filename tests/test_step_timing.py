"""The plan's time model fitted to a fit's own first optimizer steps (no wasted probe)."""

from __future__ import annotations

import pytest

from entrena.callbacks.step_timing import StepTiming
from entrena.core.state import TrainState
from entrena.planning.timing import calibration_from_steps


def _step(state: TrainState, samples: int, tokens: int, seconds: float) -> None:
    state.step += 1
    state.samples_seen += samples
    state.padded_tokens_seen += samples * tokens
    state.train_time_s += seconds


def test_steps_after_the_first_are_timed_and_handed_over_once():
    timed: list[list[list[float]]] = []
    timing = StepTiming(3, timed.append)
    state = TrainState()
    timing.on_fit_start(state)
    for samples, tokens, seconds in [(8, 100, 9.0), (8, 50, 1.0), (8, 200, 3.0),
                                     (4, 100, 1.5), (8, 100, 2.0)]:
        _step(state, samples, tokens, seconds)
        timing.on_batch_end(state)
        if state.step == 2:  # an evaluation between steps is not a step's time
            state.train_time_s += 0.0
            timing.on_eval_end(state)
    timing.on_fit_end(state)
    assert timed == [[[8.0, 50.0, 1.0], [8.0, 200.0, 3.0], [4.0, 100.0, 1.5]]]


def test_a_short_fit_hands_over_what_it_timed_at_its_end():
    timed: list[list[list[float]]] = []
    timing = StepTiming(5, timed.append)
    state = TrainState()
    timing.on_fit_start(state)
    for _ in range(2):
        _step(state, 8, 64, 0.5)
        timing.on_batch_end(state)
    timing.on_fit_end(state)
    assert timed == [[[8.0, 64.0, 0.5]]]


def test_a_failing_replan_never_costs_the_run(caplog):
    def broken(shapes):
        raise ValueError("boom")

    timing = StepTiming(1, broken)
    state = TrainState()
    timing.on_fit_start(state)
    for _ in range(2):
        _step(state, 8, 64, 0.5)
        timing.on_batch_end(state)
    assert timing.done and "could not time the plan" in caplog.text


def test_overhead_and_rate_are_recovered_from_steps_of_two_sizes():
    alpha, rate = 0.25, 2e9
    flops = [1e9, 4e9, 2e9, 8e9]
    shapes = [[8, 10 * i, alpha + f / rate] for i, f in enumerate(flops, 1)]
    calibration = calibration_from_steps(shapes, flops, device="cpu", precision="32-true",
                                         peak_flops=1e10)
    assert calibration.step_overhead_s == pytest.approx(alpha)
    assert calibration.flops_per_s == pytest.approx(rate)
    assert calibration.efficiency == pytest.approx(0.2)
    assert calibration.source == "training steps" and calibration.steps == 4
    with pytest.raises(ValueError, match="one FLOP count per timed step"):
        calibration_from_steps(shapes, flops[:2], device="cpu", precision="32-true")
