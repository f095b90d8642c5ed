"""The recommendation: which option to use under the deadline and budget, and why."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from entrena.planning.options import Option
from entrena.units import Budget, format_bytes, format_duration, format_usd

__all__ = ["Recommendation", "recommend", "ram_refusal", "LONG_RUN_S",
           "SPOT_CHECKPOINT_MINUTES"]

LONG_RUN_S = 3600.0
"""Runs longer than this get the spot advice (entrena's threshold)."""

SPOT_CHECKPOINT_MINUTES = 10
"""Checkpoint interval advised on spot: at most this much work is lost per preemption, and a
preempted run resumes from its last checkpoint (``train.checkpoint.every_minutes``)."""


@dataclass
class Recommendation:
    """What to use and why.

    Attributes:
        option: The recommended option's name, or ``None`` when nothing meets the constraints.
        spot: Whether its spot price is advised.
        summary: One sentence.
        reasons: The reasons, one per line.
    """

    option: str | None
    spot: bool
    summary: str
    reasons: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _meets(option: Option, deadline_s: float | None, budget: Budget | None) -> bool:
    if not option.fits or option.total_time_s is None:
        return False
    if deadline_s is not None and option.total_time_s > deadline_s:
        return False
    if budget is not None and budget.seconds is not None and option.total_time_s > budget.seconds:
        return False
    if budget is not None and budget.usd is not None:
        cost = _best_cost(option)
        if cost is None or cost > budget.usd:
            return False
    return True


def _best_cost(option: Option) -> float | None:
    costs = [c for c in (option.cost_usd, option.cost_usd_spot) if c is not None]
    return min(costs) if costs else None


def _describe(option: Option) -> str:
    parts = [f"fits ({format_bytes(option.peak_memory_bytes or 0)} of "
             f"{format_bytes(option.memory_capacity_bytes or 0)})"]
    if option.total_time_s is not None:
        parts.append(f"about {format_duration(option.total_time_s)} in all")
    if option.cost_usd is not None and option.kind != "local":
        parts.append(f"{format_usd(option.cost_usd)} on demand")
    return ", ".join(parts)


def recommend(options: list[Option], *, deadline_s: float | None = None,
              budget: Budget | None = None) -> Recommendation:
    """Choose an option.

    Rules, in order: this machine when it fits and meets the deadline and budget ("a CPU is
    enough" when it is a CPU); else the cheapest priced option that fits and meets them (the
    faster on a tie), with spot and a checkpoint interval when the run is long; else say what
    is missing. Oversized options are only chosen when nothing else qualifies.

    Args:
        options: The planned options.
        deadline_s: Latest acceptable total time, seconds.
        budget: A money (USD) or time limit.

    Returns:
        The :class:`Recommendation`.
    """
    limits = []
    if deadline_s is not None:
        limits.append(f"deadline {format_duration(deadline_s)}")
    if budget is not None:
        limits.append(f"budget {budget}")
    within = f" within the {' and '.join(limits)}" if limits else ""
    local = next((o for o in options if o.kind == "local"), None)
    if local is not None and _meets(local, deadline_s, budget):
        enough = "a CPU is enough" if local.device == "cpu" else "this machine's GPU is enough"
        reasons = [f"this machine {_describe(local)}{within}"]
        faster = [o for o in options if o is not local and o.fits and o.total_time_s
                  and o.cost_usd is not None]
        if faster:
            quickest = min(faster, key=lambda o: o.total_time_s or 0.0)
            reasons.append(f"fastest alternative: {quickest.name} in about "
                           f"{format_duration(quickest.total_time_s or 0)} for "
                           f"{format_usd(quickest.cost_usd)}")
        return Recommendation("local", False, f"Train here: {enough}.", reasons)

    candidates = [o for o in options if o.kind != "local" and o.cost_usd is not None
                  and _meets(o, deadline_s, budget)]
    if candidates:
        right_sized = [o for o in candidates if not o.oversized] or candidates
        best = min(right_sized, key=lambda o: (o.cost_usd or 0.0, o.total_time_s or 0.0))
        reasons = [f"{best.name} {_describe(best)}{within}"]
        if local is not None:
            if not local.fits:
                reasons.append(f"this machine does not fit the run (needs "
                               f"{format_bytes(local.peak_memory_bytes or 0)}, has "
                               f"{format_bytes(local.memory_capacity_bytes or 0)})")
            elif local.total_time_s is not None:
                reasons.append(f"this machine would take {format_duration(local.total_time_s)}")
        spot = False
        if best.cost_usd_spot is not None and (best.total_time_s or 0) > LONG_RUN_S:
            spot = True
            reasons.append(f"long run: use spot ({format_usd(best.cost_usd_spot)} instead of "
                           f"{format_usd(best.cost_usd)}) with train.checkpoint.every_minutes: "
                           f"{SPOT_CHECKPOINT_MINUTES}; a preempted run resumes from its last "
                           f"checkpoint")
        if best.oversized:
            reasons.append("every qualifying option is oversized for this run")
        skipped = [o.name for o in candidates if o.oversized and o is not best]
        if skipped:
            reasons.append(f"oversized and skipped: {', '.join(skipped[:5])}"
                           + (" …" if len(skipped) > 5 else ""))
        return Recommendation(best.name, spot, f"Rent {best.name}"
                              + (" on spot" if spot else "") + ".", reasons)

    fitting = [o for o in options if o.fits and o.total_time_s is not None]
    if not fitting:
        return Recommendation(None, False, "Nothing fits: lower train.batch_size or "
                              "model.max_length, or plan bigger hardware with --hardware.",
                              [f"{o.name}: needs {format_bytes(o.peak_memory_bytes or 0)}"
                               for o in options[:5]])
    fastest = min(fitting, key=lambda o: o.total_time_s or 0.0)
    reasons = [f"fastest option that fits: {fastest.name}, about "
               f"{format_duration(fastest.total_time_s or 0)}"
               + (f" for {format_usd(fastest.cost_usd)}" if fastest.cost_usd is not None
                  else "")]
    priced = [o for o in fitting if _best_cost(o) is not None]
    if priced:
        cheapest = min(priced, key=lambda o: _best_cost(o) or 0.0)
        reasons.append(f"cheapest that fits: {cheapest.name}, "
                       f"{format_usd(_best_cost(cheapest))}")
    wanted = " and ".join(limits) or "constraints"
    return Recommendation(None, False, f"No option meets the {wanted}: relax them, or shorten "
                          "the run (train.max_epochs, data.max_train_samples).", reasons)


def ram_refusal(option: Option, accumulation: int = 1) -> str | None:
    """Why a CPU run's batch would not fit in this machine's RAM, or ``None`` when it fits
    (or the estimate or the RAM is unknown, or the option is not a CPU).

    Args:
        option: The ``local`` option, planned without a probe (the probe would already train
            at this batch size).
        accumulation: ``train.gradient_accumulation_steps`` now.

    Returns:
        One sentence: the estimate against the available RAM (``psutil``'s
        ``available``: free plus reclaimable cache), the largest batch that fits, and the
        settings that keep the effective batch.
    """
    if option.device != "cpu" or option.fits is not False:
        return None
    batch = option.batch_size
    head = (f"train.batch_size = {batch} needs about {format_bytes(option.peak_memory_bytes or 0)} "
            f"of RAM to train (entrena's estimate: weights, gradients, optimizer states and "
            f"the activations of the longest batch), and this machine has "
            f"{format_bytes(option.memory_capacity_bytes or 0)} available")
    largest = option.max_batch_size or 0
    if largest < 1:
        return (f"{head}; even a batch of 1 does not fit: use a smaller model or "
                f"model.max_length, or free memory (see `entrena plan`)")
    effective = batch * accumulation
    steps = -(-effective // largest)
    return (f"{head}; the largest batch that fits is about {largest}: set "
            f"train.batch_size={largest} and train.gradient_accumulation_steps={steps} for "
            f"{largest * steps} examples a step (now {effective}), or free memory (see "
            f"`entrena plan`)")
