"""Train to a deadline: ``train.budget`` fits the whole run, launch to finish, to a time.

Before the fit the budget is checked against the plan (:func:`check_budget`: a budget that
cannot buy a minimum of training and its evaluations is refused, naming the smallest that
works). During the fit :class:`BudgetFit` lays the learning-rate schedule over the steps the
budget buys (:func:`entrena.planning.budget.plan_budget`), asks for evaluations at the
budget's cadence, stops at the planned last step with the rate at its floor, and re-plans
from the fit's own wall times: when the first steps are timed, at every evaluation and every
tenth of the run, so that slower steps (another process, a throttled CPU) shorten the rest
and faster ones lengthen it up to ``max_epochs``. A re-plan never makes the rate jump
(:meth:`entrena.callbacks.lr_schedule.LRSchedule.lay_over`). Time already spent by earlier
sessions of a resumed run counts (up to their last checkpoint).

What the fit cannot time itself (the work after its last step: test pass, baselines, saving,
report, model registration) is estimated from the validation pass it measures and from the
same work measured at the end of earlier runs of the task on this machine
(:func:`remember_tail`, ``<cache>/budget/``), :data:`DEFAULT_TAIL_S` the first time.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from entrena.callbacks.lr_schedule import LRSchedule
from entrena.core.callback import Callback
from entrena.core.state import TrainState
from entrena.errors import ConfigError
from entrena.planning.budget import (
    BudgetCosts,
    BudgetPlan,
    minimum_new_steps,
    plan_budget,
    smallest_budget_s,
)
from entrena.units import format_duration

__all__ = ["BudgetFit", "FinishEstimate", "DEFAULT_TAIL_S", "TIMED_STEPS", "check_budget",
           "remember_tail", "remembered_tail_s", "budget_summary"]

log = logging.getLogger("entrena")

DEFAULT_TAIL_S = 20.0
"""Seconds assumed for the work after the test pass (baselines, saving, metrics, report,
tracking and the model registration) until a run of the task on this machine has measured
it: the demo measured 9-16 s on 2 cores of an AMD EPYC (2026-12-04); rounded up, since an
overshoot costs the user more than a slightly shorter fit."""

TIMED_STEPS = 6
"""The first re-plan comes after this many optimizer steps of a session (the first step,
which pays for kernel selection and allocations, is not timed), as the plan's own timing
window (:class:`entrena.callbacks.step_timing.StepTiming`)."""

WINDOW_STEPS = 30
"""A step's time is the mean wall time of the last this many optimizer steps, or of the last
:data:`RECENT_STEPS` when that is higher (a slow-down shows at once; a speed-up is believed
only once it lasts)."""

RECENT_STEPS = 10
"""See :data:`WINDOW_STEPS`."""

NEAR_MISS = 0.03
"""A budget that has not bound so far keeps the config's whole run when a re-plan would cut
less than this share of its steps: the few seconds over stay well within the issue's 5% of
the budget, and "a budget long enough changes nothing" holds for one that is just long
enough (the demo's 6 minutes on an AMD EPYC re-planned 224 -> 215 -> 224 steps without it)."""

FINAL_SHARE = 0.1
"""In the last tenth of the planned steps the plan is re-fitted after every step, so that
the rate still reaches its floor when the speed changes near the end."""


@dataclass(frozen=True)
class FinishEstimate:
    """The work after the last step, as multiples of a validation pass plus a tail.

    Attributes:
        eval_passes: Validation-pass equivalents after the fit: the test pass (its rows over
            the validation rows) and the final validation when best weights may be restored.
        tail_s: Seconds of the rest (baselines, saving, report, registration).
    """

    eval_passes: float
    tail_s: float

    def seconds(self, eval_s: float) -> float:
        return self.eval_passes * eval_s + self.tail_s


def _tail_path(cache_dir: Path, task: str | None) -> Path:
    return cache_dir / "budget" / f"tail-{task}.json"


def remembered_tail_s(cache_dir: Path | None, task: str | None,
                      key: str = "tail_s") -> float | None:
    """What an earlier run of ``task`` measured on this machine, seconds, or ``None``:
    ``tail_s`` (after the test pass) or ``startup_s`` (launch to the first step)."""
    if cache_dir is None:
        return None
    try:
        value = json.loads(_tail_path(cache_dir, task).read_text(encoding="utf-8"))[key]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return float(value) if isinstance(value, int | float) and value >= 0 else None


def remember_tail(cache_dir: Path | None, task: str | None, tail_s: float,
                  startup_s: float | None = None) -> None:
    """Keep the times this run measured for the next budgeted run (and plan) of ``task``
    here: each the larger of it and the one before decayed by a tenth, so that one quick run
    does not make the next overshoot. A failure to write is ignored."""
    if cache_dir is None:
        return
    values = {}
    for key, value in (("tail_s", tail_s), ("startup_s", startup_s)):
        before = remembered_tail_s(cache_dir, task, key)
        if value is None:
            value = before
        elif before is not None:
            value = max(value, 0.9 * before)
        if value is not None:
            values[key] = round(value, 3)
    path = _tail_path(cache_dir, task)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values) + "\n", encoding="utf-8")
    except OSError:
        log.debug("could not remember the budget's times in %s", path)


def check_budget(budget_s: float, spent_s: float, *, costs: BudgetCosts, steps_per_epoch: int,
                 cap_steps: int, evals_per_epoch: int, what: str) -> BudgetPlan:
    """The budget's plan at the start of a fresh fit, or a refusal.

    Raises:
        ConfigError: The budget cannot buy :func:`minimum_new_steps` and their evaluations
            after what is already spent; the message names the smallest budget that works.
    """
    plan = plan_budget(budget_s - spent_s, costs=costs, steps_per_epoch=steps_per_epoch,
                       cap_steps=cap_steps, evals_per_epoch=evals_per_epoch)
    least = minimum_new_steps(steps_per_epoch, cap_steps)
    if plan.total_steps < least:
        smallest = smallest_budget_s(spent_s, costs=costs, steps_per_epoch=steps_per_epoch,
                                     cap_steps=cap_steps, evals_per_epoch=evals_per_epoch)
        raise ConfigError(
            f"{what} {format_duration(budget_s)} is too small: {format_duration(spent_s)} "
            f"were spent before the first step, and {least} optimizer steps "
            f"(~{format_duration(costs.step_s)} each), their evaluations "
            f"(~{format_duration(costs.eval_s)} each) and the test, baselines and report "
            f"(~{format_duration(costs.finish_s)}) take ~{format_duration(smallest - spent_s)} "
            f"more: at least {format_duration(smallest)} in all; give a budget of "
            f"{_round_up_s(smallest * SUGGESTION_HEADROOM)} or more")
    return plan


SUGGESTION_HEADROOM = 1.25
"""The smallest budget a refusal suggests is this much above the estimate: the time before
the first step and a step's time vary from one launch to the next, and a suggestion that is
itself refused helps nobody."""


def _round_up_s(seconds: float) -> str:
    """A budget a user would write, at or above ``seconds``: ``"95s"``, ``"4m10s"``,
    ``"12m"``, ``"2h"``."""
    if seconds < 120:
        return f"{math.ceil(seconds / 5) * 5}s"
    if seconds < 600:
        minutes, rest = divmod(math.ceil(seconds / 10) * 10, 60)
        return f"{minutes}m" + (f"{rest}s" if rest else "")
    if seconds < 7200:
        return f"{math.ceil(seconds / 60)}m"
    return f"{math.ceil(seconds / 3600)}h"


def budget_summary(plan: BudgetPlan, budget_s: float, spent_s: float) -> str:
    """One line: what the budget buys (for the log and the console)."""
    costs = plan.costs
    if not plan.binding:
        needed = spent_s + plan.fixed_s + (plan.total_steps - plan.done_steps) * costs.step_s
        return (f"budget {format_duration(budget_s)}: not binding, the config's "
                f"{plan.total_steps} steps ({plan.epochs:.2g} epochs) fit in it "
                f"(~{format_duration(needed)})")
    return (f"budget {format_duration(budget_s)}: {plan.total_steps} optimizer steps "
            f"({plan.epochs:.2f} epochs, ~{format_duration(costs.step_s)} each), "
            f"{plan.evaluations} evaluations (every {plan.eval_every_steps} steps, "
            f"~{format_duration(costs.eval_s)} each); fixed costs "
            f"{format_duration(spent_s)} spent before the first step, "
            f"~{format_duration(costs.finish_s)} after the last; the learning rate decays "
            f"to its floor at step {plan.total_steps}")


class BudgetFit(Callback):
    """Fits the fit to ``budget_s`` of wall time counted from ``started_at``.

    Place it after the :class:`LRSchedule` it drives (it re-lays the schedule once that has
    built its scheduler, a restored one included).

    Args:
        budget_s: The budget, seconds, launch to finished run.
        started_at: ``time.time()`` when this session's clock started (the command's launch).
        schedule: The run's learning-rate schedule.
        step_s: The planned seconds of an optimizer step (before any is timed).
        eval_s: The planned seconds of a validation pass (before one is timed).
        finish: The work after the last step (:class:`FinishEstimate`).
        evals_per_epoch: ``train.evals_per_epoch``.
        emit: Writes a record to ``events.jsonl`` (``emit(type, state, **fields)``), or None.
        clock: Unix seconds (tests pass a fake one).
    """

    def __init__(self, budget_s: float, started_at: float, schedule: LRSchedule, *,
                 step_s: float, eval_s: float, finish: FinishEstimate, evals_per_epoch: int = 1,
                 emit: Callable[..., None] | None = None,
                 clock: Callable[[], float] = time.time):
        self.budget_s = budget_s
        self.started_at = started_at
        self.schedule = schedule
        self.planned_step_s = step_s
        self.planned_eval_s = eval_s
        self.finish = finish
        self.evals_per_epoch = evals_per_epoch
        self.emit = emit
        self.clock = clock
        self.spent_before_s = 0.0
        self.plan: BudgetPlan | None = None
        self.refits = 0
        self.first_plan: dict[str, Any] | None = None
        self.fit_started_s: float | None = None  # spent when the fit started
        self._step_times: list[float] = []
        self._eval_times: list[float] = []
        self._mark: float | None = None
        self._eval_started: float | None = None
        self._session_first_step = 0
        self._last_refit_step = 0
        self._last_eval_step = 0
        self.cap_steps = 0

    # -- time ------------------------------------------------------------------------------
    def spent_s(self) -> float:
        """Seconds of the budget spent so far, earlier sessions included."""
        return self.spent_before_s + (self.clock() - self.started_at)

    def _costs(self) -> BudgetCosts:
        window = self._step_times[-WINDOW_STEPS:]
        recent = self._step_times[-RECENT_STEPS:]
        step_s = (max(sum(window) / len(window), sum(recent) / len(recent)) if window
                  else self.planned_step_s)
        if self._eval_times:
            eval_s = self._eval_times[-1]
        else:  # the planned pass, scaled as the steps are against their plan
            eval_s = self.planned_eval_s * (step_s / self.planned_step_s
                                            if self.planned_step_s > 0 else 1.0)
        return BudgetCosts(step_s=max(step_s, 1e-6), eval_s=eval_s,
                           finish_s=self.finish.seconds(eval_s))

    # -- planning --------------------------------------------------------------------------
    def _replan(self, state: TrainState, why: str, quiet: bool = False) -> None:
        spent = self.spent_s()
        plan = plan_budget(self.budget_s - spent, costs=self._costs(),
                           steps_per_epoch=state.steps_per_epoch, cap_steps=self.cap_steps,
                           done_steps=state.step, evals_per_epoch=self.evals_per_epoch)
        before = self.plan
        if (plan.binding and (before is None or not before.binding)
                and plan.total_steps >= (1.0 - NEAR_MISS) * self.cap_steps):
            plan = replace(plan, total_steps=self.cap_steps, binding=False)
        self.plan = plan
        if plan.binding or (before is not None and before.binding):
            self.schedule.lay_over(plan.total_steps, state.step)
        state.epoch_evaluations = not plan.binding
        state.max_steps = plan.total_steps  # the progress bar's and events' planned steps
        if quiet:  # the last tenth's per-step re-plans: no record, no count
            return
        self._last_refit_step = state.step
        if before is not None:
            self.refits += 1
        record = {"why": why, "spent_s": round(spent, 3), "budget_s": self.budget_s,
                  "planned_steps": plan.total_steps, "planned_epochs": round(plan.epochs, 4),
                  "evaluations": plan.evaluations, "eval_every_steps": plan.eval_every_steps,
                  "binding": plan.binding, "step_s": round(plan.costs.step_s, 4),
                  "eval_s": round(plan.costs.eval_s, 3),
                  "finish_s": round(plan.costs.finish_s, 3),
                  "learning_rate": state.optimizer.param_groups[0]["lr"]
                  if state.optimizer is not None else None}
        if self.first_plan is None:
            self.first_plan = record
        if self.emit is not None:
            self.emit("budget", state, **record)
        if before is None:
            log.info(budget_summary(plan, self.budget_s, spent))
        elif before.total_steps != plan.total_steps:
            log.info("budget re-planned (%s): %d -> %d optimizer steps (%.2f epochs), %s spent "
                     "of %s", why, before.total_steps, plan.total_steps, plan.epochs,
                     format_duration(spent), format_duration(self.budget_s))

    # -- events ----------------------------------------------------------------------------
    def on_fit_start(self, state: TrainState) -> None:
        self.fit_started_s = self.spent_s()
        self.cap_steps = state.max_steps  # the config's own length (max_epochs, max_steps)
        self._session_first_step = state.step
        self._last_refit_step = state.step
        self._last_eval_step = state.history[-1]["step"] if state.history else 0
        self._mark = self.clock()
        self._replan(state, "start" if state.step == 0 else "resume")
        if self.plan is not None and state.step >= self.plan.total_steps and state.step > 0:
            state.should_stop, state.stop_reason = True, "budget"
            log.info("budget spent (%s of %s): the resumed run stops at step %d",
                     format_duration(self.spent_s()), format_duration(self.budget_s),
                     state.step)

    def on_batch_end(self, state: TrainState) -> None:
        if not state.extras.get("last_micro"):
            return
        now = self.clock()
        if self._mark is not None and state.step > self._session_first_step + 1:
            self._step_times.append(now - self._mark)  # the session's first step untimed
        self._mark = now
        plan = self.plan
        if plan is None:
            return
        taken = state.step - self._session_first_step
        if (taken == TIMED_STEPS
                or state.step - self._last_refit_step >= max(10, plan.total_steps // 10)):
            self._replan(state, "timed" if taken == TIMED_STEPS else "steps")
        elif plan.binding and state.step >= (1.0 - FINAL_SHARE) * plan.total_steps:
            self._replan(state, "final", quiet=True)
        plan = self.plan
        assert plan is not None
        if plan.binding and state.step >= plan.total_steps and not state.should_stop:
            state.should_stop, state.stop_reason = True, "budget"
        elif plan.binding and state.step - self._last_eval_step >= plan.eval_every_steps:
            state.eval_due = True  # the cadence counts from the last evaluation

    def on_eval_start(self, state: TrainState) -> None:
        self._eval_started = self.clock()

    def on_eval_end(self, state: TrainState) -> None:
        now = self.clock()
        if self._eval_started is not None:
            self._eval_times.append(now - self._eval_started)
        self._eval_started = None
        self._last_eval_step = state.step
        self._mark = now  # an evaluation is not a step's time
        if not state.should_stop:
            self._replan(state, "evaluation")
            plan = self.plan
            if plan is not None and plan.binding and state.step >= plan.total_steps:
                # the time is up at this very step: stop here, evaluated, not a step later
                state.should_stop, state.stop_reason = True, "budget"

    def summary(self, state: TrainState) -> dict[str, Any]:
        """``metrics.json``'s ``budget`` so far (``used_s`` and ``overshoot_s`` are final
        only when the run has finished: :func:`entrena.api.training` completes them)."""
        plan = self.plan
        used = self.spent_s()
        return {"requested_s": self.budget_s, "used_s": used,
                "overshoot_s": max(0.0, used - self.budget_s),
                "binding": bool(plan and plan.binding),
                "planned_steps": self.first_plan["planned_steps"] if self.first_plan else None,
                "planned_epochs": self.first_plan["planned_epochs"] if self.first_plan else None,
                "trained_steps": state.step,
                "trained_epochs": state.step / max(1, state.steps_per_epoch),
                "final_planned_steps": plan.total_steps if plan else None,
                "refits": self.refits,
                "spent_before_fit_s": self.fit_started_s,
                "step_s": plan.costs.step_s if plan else None,
                "eval_s": plan.costs.eval_s if plan else None,
                "finish_estimate_s": plan.costs.finish_s if plan else None}

    def state_dict(self) -> dict[str, Any]:
        return {"spent_s": self.spent_s(), "refits": self.refits,
                "first_plan": self.first_plan}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.spent_before_s = float(state.get("spent_s", 0.0))
        self.refits = int(state.get("refits", 0))
        self.first_plan = state.get("first_plan")


def build_budget(budget_s: float, started_at: float, schedule: LRSchedule, *,
                 plan: dict[str, Any] | None, steps_per_epoch: int, cap_steps: int,
                 batch_size: int, validation_rows: int, test_rows: int,
                 restore_best_weights: bool, evals_per_epoch: int, tail_s: float,
                 resumed: bool, emit: Callable[..., None] | None,
                 forward_share: float | None = None) -> BudgetFit:
    """The :class:`BudgetFit` of a run, its costs planned from ``plan.json``'s figures for
    this machine; a fresh run's budget is checked first (:func:`check_budget`).

    The planned validation pass is ``validation_rows / batch_size`` steps' worth of
    ``forward_share`` of a step's time: the task's own share when it declares one (a LoRA
    fit's backward pass is shorter than a full one's, so its forward is more of the step),
    else a third (:data:`entrena.planning.timing.FORWARD_SHARE`); the fit replaces it by its
    own measurement at its first evaluation. Without a plan the
    budget is not binding until the first steps are timed.

    Raises:
        ConfigError: The budget is too small (fresh runs only).
    """
    from entrena.planning.timing import FORWARD_SHARE

    local: dict[str, Any] = next((o for o in (plan or {}).get("options", [])
                                  if o.get("kind") == "local"), {})
    epoch_s = local.get("epoch_time_s")
    step_s = epoch_s / max(1, steps_per_epoch) if epoch_s else 1e-6
    share = FORWARD_SHARE if forward_share is None else forward_share
    eval_s = step_s * share * validation_rows / max(1, batch_size)
    finish = FinishEstimate(eval_passes=test_rows / max(1, validation_rows)
                            + (1.0 if restore_best_weights else 0.0), tail_s=tail_s)
    fit = BudgetFit(budget_s, started_at, schedule, step_s=step_s, eval_s=eval_s,
                    finish=finish, evals_per_epoch=evals_per_epoch, emit=emit)
    if not resumed and epoch_s:
        check_budget(budget_s, time.time() - started_at,
                     costs=BudgetCosts(step_s, eval_s, finish.seconds(eval_s)),
                     steps_per_epoch=steps_per_epoch, cap_steps=cap_steps,
                     evals_per_epoch=evals_per_epoch, what="train.budget")
    return fit
