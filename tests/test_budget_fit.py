"""``train.budget``: what a budget buys, the schedule laid over it, re-plans under a fake clock."""

from __future__ import annotations

import math
import random

import pytest
import torch

from entrena.callbacks.lr_schedule import LRSchedule, ScheduleCurve, warmup_decay_factor
from entrena.callbacks.monitor import Monitor
from entrena.core.callback import Callback
from entrena.engine.loop import FitSettings, fit
from entrena.errors import ConfigError
from entrena.planning.budget import (
    MIN_EVALUATIONS,
    BudgetCosts,
    budget_seconds,
    evaluation_cadence,
    minimum_new_steps,
    plan_budget,
    smallest_budget_s,
)
from entrena.recipes.budget import BudgetFit, FinishEstimate, check_budget
from entrena.tasks.metrics import cross_entropy_loss
from fakes import FakeBackend, FakeSource, ScriptedEvaluate, TinyModel

# --- the schedule curve ----------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["linear", "cosine", "wsd"])
def test_an_unchanged_curve_is_the_fixed_schedule(kind):
    curve = ScheduleCurve.over(kind, 50, 0.1)
    for step in range(51):
        assert curve.factor(step) == pytest.approx(warmup_decay_factor(step, 50, 5, kind))


@pytest.mark.parametrize("kind", ["linear", "cosine", "wsd"])
def test_refits_keep_the_rate_and_end_at_the_floor(kind):
    generator = random.Random(7)
    for _ in range(200):
        curve = ScheduleCurve.over(kind, generator.randint(5, 200), generator.choice([0, 0.1]))
        step = 0
        for _ in range(4):  # several re-fits in a row, each from the current step
            step = min(curve.total_steps - 1, step + generator.randint(0, 30))
            before = curve.factor(step)
            total = generator.randint(step + 1, step + 300)
            curve = curve.refit(step, total)
            assert curve.factor(step) == pytest.approx(before, abs=1e-12)  # no jump
            assert curve.factor(curve.total_steps) == pytest.approx(0.0, abs=1e-12)
            after = [curve.factor(t) for t in range(max(step, curve.warmup_steps),
                                                     curve.total_steps + 1)]
            assert all(b <= a + 1e-12 for a, b in zip(after, after[1:], strict=False))


def test_wsd_holds_the_peak_then_decays_over_the_last_fifth():
    curve = ScheduleCurve.over("wsd", 110, 10 / 110)  # warmup 10, then 100 steps
    assert curve.factor(9) == 1.0 and curve.factor(89) == 1.0  # held until 80% of them
    assert curve.factor(100) == pytest.approx(0.5) and curve.factor(110) == 0.0
    shorter = curve.refit(50, 80)  # progress 0.4 -> 1 over 30 steps: the hold ends at 70
    assert shorter.factor(50) == 1.0 and shorter.factor(70) == pytest.approx(1.0)
    assert shorter.factor(75) == pytest.approx(0.5) and shorter.factor(80) == 0.0


def test_a_refit_in_the_warmup_relays_it_or_ends_it_at_the_current_rate():
    curve = ScheduleCurve.over("linear", 100, 0.1)  # warmup 10 steps
    longer = curve.refit(3, 200)  # warmup share 20: goes on from 0.4 to 1 at step 19
    assert longer.factor(3) == pytest.approx(0.4) and longer.factor(19) == pytest.approx(1.0)
    shorter = curve.refit(3, 20)  # share 2 < 4: the decay starts now, from 0.4
    assert shorter.factor(3) == pytest.approx(0.4)
    assert shorter.factor(11) == pytest.approx(0.4 * (1 - 8 / 17))  # linear from 0.4 at 3
    assert shorter.factor(20) == 0.0


def test_the_schedule_state_survives_a_checkpoint():
    curve = ScheduleCurve.over("cosine", 80, 0.1).refit(30, 60)
    assert ScheduleCurve.from_state(curve.state_dict()) == curve


# --- what a budget buys -----------------------------------------------------------------------

COSTS = BudgetCosts(step_s=1.0, eval_s=5.0, finish_s=20.0)


def test_the_plan_fits_the_remaining_time_with_at_least_three_evaluations():
    plan = plan_budget(200.0, costs=COSTS, steps_per_epoch=100, cap_steps=300)
    assert plan.binding
    evaluations, every = evaluation_cadence(plan.total_steps, 100)
    assert evaluations == plan.evaluations >= MIN_EVALUATIONS and every == plan.eval_every_steps
    spent = 20.0 + plan.total_steps * 1.0 + plan.evaluations * 5.0
    assert spent <= 200.0 < spent + 1.0 + 5.0  # one more step (and its evaluation) would not fit


def test_evaluations_beyond_the_configs_cadence_take_at_most_their_share():
    slow_eval = BudgetCosts(step_s=1.0, eval_s=20.0, finish_s=20.0)
    plan = plan_budget(200.0, costs=slow_eval, steps_per_epoch=1000, cap_steps=3000)
    assert plan.evaluations == 1  # 3 passes would take 60 of 180 s; the share is 18 s
    assert plan.total_steps == 200 - 20 - 20  # every other second buys steps
    asked = plan_budget(200.0, costs=slow_eval, steps_per_epoch=50, cap_steps=3000,
                        evals_per_epoch=1)
    # the config's own cadence (1 an epoch) is kept, whatever it costs
    assert asked.evaluations == math.ceil(asked.total_steps / 50) >= 2


def test_a_budget_longer_than_the_run_is_not_binding():
    plan = plan_budget(10_000.0, costs=COSTS, steps_per_epoch=100, cap_steps=200)
    assert not plan.binding and plan.total_steps == 200


def test_a_re_plan_counts_the_steps_already_taken():
    plan = plan_budget(50.0, costs=COSTS, steps_per_epoch=100, cap_steps=300, done_steps=120)
    assert plan.done_steps == 120 and 120 < plan.total_steps < 150


def test_the_smallest_budget_buys_the_minimum_of_training():
    least = minimum_new_steps(100, 300)
    assert least == 10
    smallest = smallest_budget_s(30.0, costs=COSTS, steps_per_epoch=100, cap_steps=300)
    plan = plan_budget(smallest - 30.0, costs=COSTS, steps_per_epoch=100, cap_steps=300)
    assert plan.total_steps >= least
    too_little = plan_budget(smallest - 31.5, costs=COSTS, steps_per_epoch=100, cap_steps=300)
    assert too_little.total_steps < least


def test_a_budget_too_small_is_refused_naming_the_smallest_that_works():
    with pytest.raises(ConfigError, match=r"train.budget 1m 00s is too small: 50s were spent "
                                          r"before the first step.*give a budget of 110s or more"):
        check_budget(60.0, 50.0, costs=COSTS, steps_per_epoch=100, cap_steps=300,
                     evals_per_epoch=1, what="train.budget")


def test_a_money_budget_needs_a_price():
    assert budget_seconds("$2", 4.0, "catalog") == pytest.approx(1800.0)
    assert budget_seconds("1h30m", 0.0, "unpriced") == 5400.0
    with pytest.raises(ConfigError, match=r"'\$2' is money, but this machine has no price "
                                          r"\(no price known\).*ENTRENA_INSTANCE"
                                          r".*local_usd_per_hour"):
        budget_seconds("$2", 0.0, "no price known")


# --- the fit under a fake clock ---------------------------------------------------------------

class Clock(Callback):
    """A fake wall clock that a step moves by ``step_s`` (then ``slow_s`` from
    ``slow_from``) and an evaluation by ``eval_s``; placed before :class:`BudgetFit`."""

    def __init__(self, step_s: float, eval_s: float, slow_from: int | None = None,
                 slow_s: float | None = None, start: float = 0.0):
        self.now, self.step_s, self.eval_s = start, step_s, eval_s
        self.slow_from, self.slow_s = slow_from, slow_s
        self.rates: list[float] = []

    def __call__(self) -> float:
        return self.now

    def on_batch_end(self, state):
        slow = self.slow_from is not None and state.step > self.slow_from
        self.now += self.slow_s if slow else self.step_s
        self.rates.append(state.optimizer.param_groups[0]["lr"])

    def on_eval_end(self, state):  # before BudgetFit's, which times the pass
        self.now += self.eval_s


def budgeted_fit(budget_s, clock, *, planned_step_s=1.0, batches=50, max_epochs=4,
                 warmup=0.1, state=None, budget_state=None, max_steps=None):
    model = TinyModel()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    schedule = LRSchedule("linear", warmup, Monitor("validation.loss"))
    budget = BudgetFit(budget_s, 0.0, schedule, step_s=planned_step_s, eval_s=clock.eval_s,
                       finish=FinishEstimate(eval_passes=1.0, tail_s=10.0), clock=clock)
    if budget_state is not None:
        budget.load_state_dict(budget_state)
    evaluate = ScriptedEvaluate([1.0, 0.9, 0.8, 0.7, 0.6, 0.5])
    state = fit(backend=FakeBackend(), model=model, optimizer=optimizer,
                train=FakeSource(n=batches * 2, batch_size=2), loss=cross_entropy_loss,
                evaluate=evaluate,
                settings=FitSettings(max_epochs=max_epochs, max_steps=max_steps),
                callbacks=[schedule, clock, budget], state=state)
    return state, budget, schedule


def test_the_fit_stops_at_the_planned_step_with_the_rate_at_its_floor():
    clock = Clock(step_s=1.0, eval_s=4.0)
    state, budget, schedule = budgeted_fit(100.0, clock)
    assert state.stop_reason == "budget"
    assert state.step == budget.plan.total_steps
    assert schedule.curve.factor(state.step) == 0.0  # the floor, at the planned last step
    assert len(state.history) >= budget.plan.evaluations >= 2  # 3 would pass the share
    spent = clock.now + budget.plan.costs.finish_s
    assert 100.0 - 2 * 1.0 - 4.0 <= spent <= 100.0  # the finish estimate fills the rest
    jumps = [abs(b - a) for a, b in zip(clock.rates, clock.rates[1:], strict=False)]
    first_warmup = round(0.1 * budget.first_plan["planned_steps"])
    assert max(jumps) <= 0.1 / first_warmup + 1e-9  # no change bigger than a warmup step


def test_a_slower_machine_than_planned_shortens_the_run_without_a_jump():
    clock = Clock(step_s=2.0, eval_s=4.0)  # the plan said 1 s a step
    state, budget, _ = budgeted_fit(150.0, clock, planned_step_s=1.0)
    assert budget.first_plan["planned_steps"] > state.step  # re-planned down
    assert budget.refits >= 1 and state.stop_reason == "budget"
    assert clock.now + budget.plan.costs.finish_s <= 150.0 + 2.0


def test_a_slow_down_mid_run_is_re_planned():
    steady = Clock(step_s=1.0, eval_s=4.0)
    steady_state, *_ = budgeted_fit(150.0, steady)
    slowed = Clock(step_s=1.0, eval_s=4.0, slow_from=30, slow_s=3.0)
    state, budget, schedule = budgeted_fit(150.0, slowed)
    assert state.step < steady_state.step
    assert slowed.now + budget.plan.costs.finish_s <= 150.0 + 3.0  # at most a step over
    assert schedule.curve.factor(state.step) == 0.0
    jumps = [b - a for a, b in zip(slowed.rates[10:], slowed.rates[11:], strict=False)]
    assert max(jumps) <= 1e-12  # after the warmup the rate only goes down
    steepest = min(jumps)
    assert steepest > -0.1 / 10  # shortened, never cut


def test_a_budget_that_is_not_binding_changes_nothing():
    clock = Clock(step_s=1.0, eval_s=1.0)
    state, budget, schedule = budgeted_fit(10_000.0, clock, max_epochs=2)
    assert state.stop_reason == "max_epochs" and state.step == 100
    assert not budget.plan.binding and len(state.history) == 2  # the epochs' evaluations
    assert schedule.curve == ScheduleCurve.over("linear", 100, 0.1)


def test_a_budget_just_short_of_the_run_keeps_the_configs_run():
    needed = Clock(step_s=1.0, eval_s=1.0)
    full, *_ = budgeted_fit(10_000.0, needed, max_epochs=2)
    short = Clock(step_s=1.0, eval_s=1.0)
    state, budget, schedule = budgeted_fit(needed.now + 10.0 + 1.0 - 2.0, short, max_epochs=2)
    assert not budget.plan.binding and state.step == full.step == 100  # 2 s short of 111
    assert state.stop_reason == "max_epochs"
    assert schedule.curve == ScheduleCurve.over("linear", 100, 0.1)
    shorter = Clock(step_s=1.0, eval_s=1.0)
    state, budget, _ = budgeted_fit(needed.now + 11.0 - 10.0, shorter, max_epochs=2)
    assert budget.plan.binding and state.step < 100  # 10 s short: it binds


def test_a_resumed_run_counts_the_time_already_spent():
    first = Clock(step_s=1.0, eval_s=4.0)

    class StopAt(Callback):
        def on_step_end(self, state):
            if state.step == 40:
                state.interrupted = "SIGTERM"

    model_state = None
    model = TinyModel()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    schedule = LRSchedule("linear", 0.1, Monitor("validation.loss"))
    budget = BudgetFit(150.0, 0.0, schedule, step_s=1.0, eval_s=4.0,
                       finish=FinishEstimate(1.0, 10.0), clock=first)
    model_state = fit(backend=FakeBackend(), model=model, optimizer=optimizer,
                      train=FakeSource(n=100, batch_size=2), loss=cross_entropy_loss,
                      evaluate=ScriptedEvaluate([1.0]), settings=FitSettings(max_epochs=4),
                      callbacks=[schedule, first, budget, StopAt()])
    assert model_state.interrupted and model_state.step == 40
    saved = budget.state_dict()
    assert saved["spent_s"] == pytest.approx(first.now)
    # The next session starts its own clock at 0, 20 s after launch the fit starts again.
    model_state.interrupted = ""
    second = Clock(step_s=1.0, eval_s=4.0, start=20.0)
    state, resumed, _ = budgeted_fit(150.0, second, state=model_state, budget_state=saved)
    assert resumed.spent_before_s == pytest.approx(first.now)
    total = first.now + second.now + resumed.plan.costs.finish_s
    assert total <= 150.0 + 1.0
    assert state.step < 150 - 10  # it could not start over with a whole budget


def test_the_loop_evaluates_when_asked_and_not_at_its_own_points_then():
    class AskEvery7(Callback):
        def on_fit_start(self, state):
            state.epoch_evaluations = False

        def on_batch_end(self, state):
            if state.step % 7 == 0:
                state.eval_due = True

    model = TinyModel()
    state = fit(backend=FakeBackend(), model=model,
                optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                train=FakeSource(n=40, batch_size=2), loss=cross_entropy_loss,
                evaluate=ScriptedEvaluate([1.0]), settings=FitSettings(max_epochs=1),
                callbacks=[AskEvery7()])
    assert [h["step"] for h in state.history] == [7, 14]
    assert not math.isnan(state.loss)
