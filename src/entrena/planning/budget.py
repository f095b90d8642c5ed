"""What a time budget buys: optimizer steps, evaluations and the fixed costs around them.

A budget is the wall time from launch to the finished run. Whatever is already spent when
the fit starts (reading and caching the data, building the model, planning) is known; what
is left is shared between optimizer steps, validation passes and the work after the last
step (the test pass, baselines, saving, the report, the model registration):

    remaining_s = finish_s + (T - done) * step_s + R(T) * eval_s

where ``T`` is the planned total of optimizer steps and ``R(T)`` the evaluations still to
come at the cadence :func:`evaluation_cadence` gives ``T``. :func:`plan_budget` finds the
largest ``T`` that fits (never above the config's own ``max_epochs`` / ``max_steps``: a budget
longer than the run needs is not binding). The learning-rate schedule is then laid over
``T`` steps (:class:`entrena.callbacks.lr_schedule.ScheduleCurve`): Li, Yumer and Ramanan,
"Budgeted Training: Rethinking Deep Neural Network Training Under Resource Constraints"
(ICLR 2020) show that a schedule decayed to zero at the budget beats a schedule cut off by
it, linear decay being the robust choice. The training recipe re-plans from the fit's own
measured times (``entrena.recipes.budget``).

Standard library and ``entrena.errors`` only: the same arithmetic serves ``entrena plan
--budget`` (from the planned times) and the fit (from the measured ones).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from entrena.errors import ConfigError

__all__ = ["MIN_EVALUATIONS", "DEFAULT_STARTUP_S", "BudgetCosts", "BudgetPlan",
           "budget_seconds", "evaluation_cadence", "minimum_new_steps", "option_budget",
           "plan_budget", "smallest_budget_s"]

MIN_EVALUATIONS = 3
"""Evaluations a budgeted run makes at least (the last one at its final step), so that the
report has a curve and best-weights restore has a choice (entrena's judgement), as long as
those beyond the config's own cadence take at most :data:`EVAL_SHARE` of the time."""

EVAL_SHARE = 0.1
"""The share of the time left (after the finish) that evaluations beyond the config's own
``evals_per_epoch`` may take. Measured reason: on the demo at a quarter of its full run time
(76 s, AMD EPYC, 2026-12-04), 3 validation passes took 21 of its 53 s of fitting and the run
trained 28 steps against the cut-off's 51; a short budget buys steps, not curves."""

MIN_EPOCH_SHARE = 0.1
"""The least training a budget must buy: a tenth of an epoch or 10 optimizer steps, whichever
is more (but never more than the run's own length); below it the budget is refused
(entrena's judgement: fewer steps than that train nothing worth testing)."""

MIN_STEPS = 10
"""See :data:`MIN_EPOCH_SHARE`."""


@dataclass(frozen=True)
class BudgetCosts:
    """The times a budget is shared between, seconds of wall time.

    Attributes:
        step_s: One optimizer step (its data, forward, backward, update, and the loop's
            logging and periodic checkpoints), seconds.
        eval_s: One validation pass, seconds.
        finish_s: Everything after the last step: the final validation when it is not reused,
            the test pass, the baselines, saving the model, ``metrics.json``, the report and
            the model registration, seconds.
    """

    step_s: float
    eval_s: float
    finish_s: float


@dataclass(frozen=True)
class BudgetPlan:
    """What the remaining budget buys.

    Attributes:
        total_steps: Optimizer steps of the whole fit (those already taken included), ``T``.
        done_steps: Optimizer steps already taken when this plan was made.
        steps_per_epoch: Optimizer steps in one epoch.
        evaluations: Validation passes over the whole fit at this cadence.
        eval_every_steps: Steps between two evaluations (the last one is at ``total_steps``).
        binding: Whether the budget, rather than the config's ``max_epochs`` / ``max_steps``,
            sets ``total_steps``.
        remaining_s: The seconds the plan shares out.
        fixed_s: The part of ``remaining_s`` outside optimizer steps (evaluations to come and
            the finish), seconds.
        costs: The :class:`BudgetCosts` the plan used.
    """

    total_steps: int
    done_steps: int
    steps_per_epoch: int
    evaluations: int
    eval_every_steps: int
    binding: bool
    remaining_s: float
    fixed_s: float
    costs: BudgetCosts

    @property
    def epochs(self) -> float:
        """Planned epochs, fractional."""
        return self.total_steps / max(1, self.steps_per_epoch)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, with ``epochs``."""
        return {**asdict(self), "epochs": self.epochs}


def evaluation_cadence(total_steps: int, steps_per_epoch: int, evals_per_epoch: int = 1,
                       affordable: int | None = None) -> tuple[int, int]:
    """``(evaluations, steps between them)`` for a fit of ``total_steps``: the config's
    ``evals_per_epoch`` over the planned epochs, and at least :data:`MIN_EVALUATIONS` — or
    ``affordable`` when fewer fit the time (at least 1: the final one) — never more than one
    a step."""
    epochs = total_steps / max(1, steps_per_epoch)
    least = MIN_EVALUATIONS if affordable is None else max(1, min(MIN_EVALUATIONS, affordable))
    evaluations = max(least, math.ceil(epochs * evals_per_epoch - 1e-9))
    evaluations = max(1, min(evaluations, total_steps))
    return evaluations, max(1, math.ceil(total_steps / evaluations))


def _evaluations_after(done: int, total: int, every: int) -> int:
    """Evaluation points in ``(done, total]``: the multiples of ``every`` below ``total``
    and ``total`` itself."""
    if total <= done:
        return 1  # the stop's own evaluation
    below = (total - 1) // every - done // every
    return max(0, below) + 1


def _cost_s(total: int, done: int, costs: BudgetCosts, steps_per_epoch: int,
            evals_per_epoch: int, affordable: int | None = None) -> float:
    _, every = evaluation_cadence(total, steps_per_epoch, evals_per_epoch, affordable)
    return (costs.finish_s + (total - done) * costs.step_s
            + _evaluations_after(done, total, every) * costs.eval_s)


def minimum_new_steps(steps_per_epoch: int, cap_steps: int, done_steps: int = 0) -> int:
    """The least training a budget must buy (:data:`MIN_EPOCH_SHARE`, :data:`MIN_STEPS`),
    never more than the steps the run has left."""
    least = max(MIN_STEPS, math.ceil(MIN_EPOCH_SHARE * steps_per_epoch))
    return max(0, min(least, cap_steps - done_steps))


def plan_budget(remaining_s: float, *, costs: BudgetCosts, steps_per_epoch: int,
                cap_steps: int, done_steps: int = 0, evals_per_epoch: int = 1) -> BudgetPlan:
    """The largest total of optimizer steps whose remaining cost fits ``remaining_s``.

    Args:
        remaining_s: Seconds of the budget left (the budget less what is already spent).
        costs: Times of a step, an evaluation and the finish.
        steps_per_epoch: Optimizer steps in one epoch.
        cap_steps: The config's own length (``max_epochs`` × steps per epoch, or
            ``max_steps`` if smaller): the plan never goes past it.
        done_steps: Optimizer steps already taken (a re-plan, a resumed run).
        evals_per_epoch: ``train.evals_per_epoch``.

    Returns:
        The :class:`BudgetPlan`. ``total_steps`` is at least ``done_steps`` (a budget already
        spent plans no more steps) and at most ``cap_steps``; when ``cap_steps`` fits,
        ``binding`` is false and the evaluations are the config's.
    """
    if costs.step_s <= 0:
        raise ValueError(f"step_s must be positive, got {costs.step_s}")
    spe = max(1, steps_per_epoch)
    affordable = (math.floor(EVAL_SHARE * max(0.0, remaining_s - costs.finish_s)
                             / costs.eval_s) if costs.eval_s > 0 else None)

    def cost(total: int) -> float:
        return _cost_s(total, done_steps, costs, spe, evals_per_epoch, affordable)

    def plan(total: int, binding: bool) -> BudgetPlan:
        evaluations, every = evaluation_cadence(total, spe, evals_per_epoch, affordable)
        if not binding:  # the config's own cadence: evals_per_epoch points per epoch
            evaluations = max(1, math.ceil(total / spe * evals_per_epoch - 1e-9))
            every = max(1, math.ceil(spe / max(1, evals_per_epoch)))
        fixed = cost(total) - (total - done_steps) * costs.step_s
        return BudgetPlan(total_steps=total, done_steps=done_steps, steps_per_epoch=spe,
                          evaluations=evaluations, eval_every_steps=every, binding=binding,
                          remaining_s=remaining_s, fixed_s=fixed, costs=costs)

    cap = max(cap_steps, done_steps)
    if cost(cap) <= remaining_s:
        return plan(cap, binding=False)
    # The cost grows with the steps but for a small wiggle of the evaluation count (the
    # cadence changes with the total): bisect on it, then step down to a total that fits.
    low, high = done_steps, cap
    while high - low > 1:
        middle = (low + high) // 2
        if cost(middle) <= remaining_s:
            low = middle
        else:
            high = middle
    total = low
    while total > done_steps and cost(total) > remaining_s:
        total -= 1
    return plan(total, binding=True)


def smallest_budget_s(spent_s: float, *, costs: BudgetCosts, steps_per_epoch: int,
                      cap_steps: int, evals_per_epoch: int = 1) -> float:
    """The smallest budget (seconds, launch to finish) that buys :func:`minimum_new_steps`
    and their evaluations, when ``spent_s`` are already gone."""
    steps = minimum_new_steps(steps_per_epoch, cap_steps)
    smallest = spent_s + _cost_s(steps, 0, costs, max(1, steps_per_epoch), evals_per_epoch,
                                 affordable=1)
    for _ in range(100):  # evaluations that fit the share add to it: grow until it buys them
        plan = plan_budget(smallest - spent_s, costs=costs, steps_per_epoch=steps_per_epoch,
                           cap_steps=cap_steps, evals_per_epoch=evals_per_epoch)
        if plan.total_steps >= steps:
            break
        smallest += costs.step_s + costs.eval_s
    return smallest


DEFAULT_STARTUP_S = 20.0
"""Seconds assumed from launch to the first step (imports, reading the cached data, building
the model, the memory probe) when no run of the task here has measured it: the demo spent
21.7 s with its probe and 13-15 s with the probe cached on 2 cores of an AMD EPYC
(2026-12-04). ``entrena plan --budget`` uses it; a fit measures its own."""


def option_budget(budget_s: float, *, epoch_s: float | None, total_s: float | None,
                  epochs: float, steps_per_epoch: int, cap_steps: int, evaluations: int,
                  validation_rows: int, test_rows: int, restore_best_weights: bool,
                  evals_per_epoch: int, startup_s: float, tail_s: float) -> dict[str, Any]:
    """What ``budget_s`` buys on one planned option (``entrena plan --budget``).

    The option's planned times are split into a step (``epoch_s / steps_per_epoch``) and a
    validation and test pass (the evaluation time of its plan, ``total_s - epochs × epoch_s``,
    shared out per row over ``evaluations + 1`` validation passes and one test pass).

    Args:
        budget_s: The budget, seconds, launch to finished run.
        epoch_s / total_s: The option's planned epoch of training steps and whole fit,
            seconds (``None``: unknown, nothing is planned).
        epochs: The epochs the option's times were planned for.
        steps_per_epoch / cap_steps: Optimizer steps per epoch and of the config's own run.
        evaluations: Validation passes in the option's plan (the final one not counted).
        validation_rows / test_rows: Rows of the two splits.
        restore_best_weights: ``train.restore_best_weights`` (one more validation pass).
        evals_per_epoch: ``train.evals_per_epoch``.
        startup_s / tail_s: Seconds before the first step and after the test pass.

    Returns:
        ``{"budget_s", "steps", "epochs", "evaluations", "binding", "enough", "smallest_s",
        "step_s", "eval_s", "finish_s", "startup_s"}``; only ``budget_s`` and ``enough: None``
        when the option has no time figures.
    """
    if not epoch_s or total_s is None:
        return {"budget_s": budget_s, "enough": None}
    step_s = epoch_s / max(1, steps_per_epoch)
    evaluation_s = max(0.0, total_s - epochs * epoch_s)
    per_row = evaluation_s / max(1, (evaluations + 1) * validation_rows + test_rows)
    eval_s = per_row * validation_rows
    finish_s = per_row * test_rows + (eval_s if restore_best_weights else 0.0) + tail_s
    costs = BudgetCosts(step_s=step_s, eval_s=eval_s, finish_s=finish_s)
    plan = plan_budget(budget_s - startup_s, costs=costs, steps_per_epoch=steps_per_epoch,
                       cap_steps=cap_steps, evals_per_epoch=evals_per_epoch)
    least = minimum_new_steps(steps_per_epoch, cap_steps)
    return {"budget_s": budget_s, "steps": plan.total_steps, "epochs": plan.epochs,
            "evaluations": plan.evaluations, "binding": plan.binding,
            "enough": plan.total_steps >= least,
            "smallest_s": smallest_budget_s(startup_s, costs=costs,
                                            steps_per_epoch=steps_per_epoch,
                                            cap_steps=cap_steps, evals_per_epoch=evals_per_epoch),
            "step_s": step_s, "eval_s": eval_s, "finish_s": finish_s, "startup_s": startup_s}


def budget_seconds(text: str, usd_per_hour: float, price_source: str) -> float:
    """``train.budget`` in seconds: a duration as it is, money through this machine's price.

    Raises:
        ConfigError: A money budget on a machine with no price.
    """
    from entrena.units import parse_budget

    parsed = parse_budget(text, bare="s", what="train.budget")
    if parsed.usd is None:
        return float(parsed.seconds or 0.0)
    if usd_per_hour <= 0:
        why = price_source.split(";", 1)[0].removeprefix("free: ")  # its own fix is below
        raise ConfigError(
            f"train.budget {text!r} is money, but this machine has no price ({why}); "
            f"give the budget as a time ('8m', '1h30m'), or price the machine: set "
            f"ENTRENA_INSTANCE to its catalog offer, or local_usd_per_hour in a catalog file "
            f"named by ENTRENA_CATALOG")
    return parsed.usd / usd_per_hour * 3600.0
