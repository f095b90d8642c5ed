"""Put a plan together: the run's shape, the options, the recommendation, the JSON document.

Everything here is a function of plain inputs (token lengths, the model profile, the machine,
the catalog), so it is tested without data files or weights; :mod:`entrena.api.planning`
(``entrena plan``) and :mod:`entrena.recipes.planning` (``entrena train``'s ``plan.json``)
gather the inputs and both call :func:`build_plan`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from entrena.hardware.catalog import Accelerator, Catalog, Offer
from entrena.hardware.detection import Machine
from entrena.planning.llm_profile import llm_plan_details
from entrena.planning.model import ModelProfile
from entrena.planning.options import Option, RunShape, catalog_option, local_option
from entrena.planning.recommend import Recommendation, recommend
from entrena.planning.timing import FORWARD_SHARE, Calibration, epoch_batches
from entrena.tasks.base import PlanningSpec
from entrena.units import Budget

__all__ = ["run_shape", "make_plan", "plan_document", "build_plan", "LOCAL"]

LOCAL = "local"
"""The name of this machine among the options (``--hardware local``)."""


def run_shape(*, train_lengths: Sequence[int], eval_lengths: Sequence[int],
              test_lengths: Sequence[int], profile: ModelProfile, batch_size: int,
              eval_batch_size: int, precision: str, max_epochs: int, max_steps: int | None,
              gradient_accumulation_steps: int, evals_per_epoch: int, devices: int | str,
              seed: int, group_by_length: bool, accelerator: str = "auto",
              threads: int | None = None, undo_copy: bool = False,
              batch_width: Callable[[int], int] | None = None) -> RunShape:
    """The run as the loop will execute it (lengths already truncated at ``max_length``).

    Args:
        train_lengths / eval_lengths / test_lengths: Token lengths per example, truncated.
        profile: The model (for evaluation FLOPs).
        batch_size / eval_batch_size: ``train.batch_size`` and the evaluation batch size.
        precision: ``train.precision``.
        max_epochs / max_steps / gradient_accumulation_steps / evals_per_epoch: ``train.*``.
        devices: ``train.devices`` (``auto`` counts as 1).
        seed / group_by_length: ``train.seed`` and ``train.group_by_length``.
        accelerator: ``train.accelerator``.
        threads: ``train.num_threads`` (``None``: the usable cores).
        undo_copy: ``train.divergence_factor`` is set (the loop keeps a step of undo).
        batch_width: A batch's padded width from its longest example's length (the task's
            :attr:`~entrena.tasks.base.PlanningSpec.batch_width`); ``None``: that length.

    Returns:
        The :class:`~entrena.planning.options.RunShape`.
    """
    train = epoch_batches(train_lengths, batch_size, seed=seed, group_by_length=group_by_length,
                          batch_width=batch_width)
    steps_per_epoch = max(1, math.ceil(train.batches / gradient_accumulation_steps))
    planned_steps = steps_per_epoch * max_epochs
    steps = min(planned_steps, max_steps) if max_steps else planned_steps
    epochs = steps / steps_per_epoch
    evals = max(1, math.ceil(epochs * evals_per_epoch))
    evaluation = epoch_batches(eval_lengths, eval_batch_size, seed=seed, shuffle=False,
                               batch_width=batch_width)
    test = epoch_batches(test_lengths, eval_batch_size, seed=seed, shuffle=False,
                         batch_width=batch_width)
    eval_flops = FORWARD_SHARE * ((evals + 1) * evaluation.flops(profile).sum()
                                  + test.flops(profile).sum())  # +1: rescored with best weights
    return RunShape(batch_size=batch_size, precision=precision, epochs=epochs,
                    devices=devices if isinstance(devices, int) else 1, train=train,
                    eval_flops=float(eval_flops),
                    eval_batches=(evals + 1) * evaluation.batches + test.batches,
                    accelerator=accelerator, threads=threads, undo_copy=undo_copy)


def make_plan(*, profile: ModelProfile, shape: RunShape, machine: Machine, catalog: Catalog,
              selection: Sequence[Offer | Accelerator | str] | None = None,
              local_only: bool = False, calibration: Calibration | None = None,
              base_rss_bytes: float = 0.0, weights_in_base: bool = False,
              deadline_s: float | None = None,
              budget: Budget | None = None) -> tuple[list[Option], Recommendation]:
    """The options and the recommendation.

    Args:
        profile: The model.
        shape: The run.
        machine: This machine.
        catalog: Accelerators, offers, efficiency factors.
        selection: Options to plan (catalog entries, or :data:`LOCAL`); ``None``: this machine
            and every catalog offer.
        local_only: Only this machine.
        calibration: A probe's measurement for this machine, if one ran.
        base_rss_bytes: The fit process's resident memory before the fit (CPU peak).
        weights_in_base: Whether ``base_rss_bytes`` includes the model's weights.
        deadline_s: Latest acceptable total time.
        budget: A USD or time limit.

    Returns:
        ``(options, recommendation)``; this machine first, then by on-demand cost (unpriced
        last).
    """
    local = local_option(machine, catalog, profile, shape, calibration=calibration,
                         base_rss_bytes=base_rss_bytes, weights_in_base=weights_in_base)
    if local_only:
        entries: list[Offer | Accelerator | str] = [LOCAL]
    elif selection is None:
        entries = [LOCAL, *catalog.offers.values()]
    else:
        entries = list(selection)
    options = [local if entry == LOCAL else catalog_option(entry, catalog, profile, shape)
               for entry in entries if entry == LOCAL or not isinstance(entry, str)]
    options.sort(key=lambda o: (o.kind != "local", o.cost_usd is None, o.cost_usd or 0.0))
    return options, recommend(options, deadline_s=deadline_s, budget=budget)


def plan_document(*, machine: Machine, profile: ModelProfile, shape: RunShape,
                  options: list[Option], recommendation: Recommendation, max_length: int,
                  train_lengths: Sequence[int], model_name: str,
                  calibration: Calibration | None, catalog: Catalog,
                  deadline_s: float | None, budget: Budget | None,
                  extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON document of ``entrena plan --json`` and ``plan.json``.

    Keys scripts depend on: ``machine``, ``model.parameters``,
    ``model.trainable_parameters``, ``model.flops_per_sample``, ``options[]`` (``name``,
    ``kind``, ``fits``, ``batch_size``, ``precision``, ``peak_memory_bytes``,
    ``epoch_time_s``, ``total_time_s``, ``cost_usd``, ``cost_usd_spot`` …),
    ``recommendation``.
    """
    lengths = np.asarray(train_lengths, dtype=float)
    per_sample = [profile.flops_per_sample(t) for t in lengths] if len(lengths) else [0.0]
    epoch_flops = float(shape.train.flops(profile).sum())
    gpus = [{"name": g.name, "memory_total_bytes": g.memory_total_bytes} for g in machine.gpus]
    return {
        "machine": {"cpu": machine.cpu.model, "cores": machine.cpu.cores,
                    "memory_total_bytes": machine.memory.get("total_bytes"),
                    "memory_available_bytes": machine.memory.get("available_bytes"),
                    "gpus": gpus, "torch": machine.torch.get("version")},
        "model": {"name": model_name, "parameters": profile.parameters,
                  "trainable_parameters": profile.trainable_parameters,
                  "flops_per_sample": float(np.mean(per_sample)),
                  "flops_per_sample_padded": epoch_flops / max(shape.train.samples, 1),
                  "flops_per_epoch": epoch_flops,
                  "flops_per_sample_formula": {"constant": profile.flops_constant,
                                               "per_token": profile.flops_linear,
                                               "per_token_squared": profile.flops_quadratic},
                  "layers": profile.layers, "hidden_size": profile.hidden_size,
                  "heads": profile.heads, "kind": profile.kind},
        "data": {"train_rows": int(len(lengths)), "max_length": int(max_length),
                 "mean_length": float(lengths.mean()) if len(lengths) else 0.0,
                 "longest_batch_tokens": shape.train.longest,
                 "batches_per_epoch": shape.train.batches,
                 "padding_fraction": shape.train.padding_fraction},
        "run": {"batch_size": shape.batch_size, "precision": shape.precision,
                "epochs": shape.epochs, "devices": shape.devices},
        "constraints": {"deadline_s": deadline_s,
                        "budget_usd": budget.usd if budget else None,
                        "budget_s": budget.seconds if budget else None},
        "options": [o.as_dict() for o in options],
        "recommendation": recommendation.as_dict(),
        "calibration": calibration.as_dict() if calibration else None,
        "catalog": {"files": catalog.files},
        **(extra or {}),
    }


def build_plan(*, spec: PlanningSpec, profile: ModelProfile, shape: RunShape, machine: Machine,
               catalog: Catalog, max_length: int, calibration: Calibration | None,
               base_rss_bytes: float, weights_in_base: bool,
               selection: Sequence[Offer | Accelerator | str] | None = None,
               local_only: bool = False, deadline_s: float | None = None,
               budget: Budget | None = None,
               annotate: Callable[[list[Option]], None] | None = None,
               extra: Callable[[], dict[str, Any]] | None = None
               ) -> tuple[dict[str, Any], list[Option], Recommendation]:
    """The plan of a run, as ``entrena plan`` and ``entrena train`` (``plan.json``) give it:
    :func:`make_plan`, then :func:`plan_document` with the task's training lengths, model
    name and, for an LLM (``spec.llm``), the formulas' terms.

    Args:
        spec: The task's planning inputs.
        max_length: The truncation length, tokens (1 for fixed-size inputs).
        annotate: Called with the planned options before the document is made (``entrena
            plan --budget`` sets what the budget buys on each).
        extra: Called last, for the document's further keys (a planning time measured then
            counts the options).

        The other arguments are :func:`make_plan`'s.

    Returns:
        ``(document, options, recommendation)``.
    """
    options, recommendation = make_plan(
        profile=profile, shape=shape, machine=machine, catalog=catalog, selection=selection,
        local_only=local_only, calibration=calibration, base_rss_bytes=base_rss_bytes,
        weights_in_base=weights_in_base, deadline_s=deadline_s, budget=budget)
    if annotate is not None:
        annotate(options)
    document = plan_document(
        machine=machine, profile=profile, shape=shape, options=options,
        recommendation=recommendation, max_length=max_length,
        train_lengths=spec.lengths("train"), model_name=spec.model_name,
        calibration=calibration, catalog=catalog, deadline_s=deadline_s, budget=budget,
        extra={**(llm_plan_details(spec.llm) if spec.llm else {}),
               **(extra() if extra is not None else {})})
    return document, options, recommendation
