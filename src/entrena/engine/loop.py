"""The training loop: readable top to bottom, firing events (see ``entrena.core.events``).

The loop knows nothing of configs, files or tasks: it gets a backend, a model returning logits,
an optimizer, a :class:`BatchSource` for training and one for validation, and callbacks. It
calls ``model(**inputs)``, where ``inputs`` is a batch without its ``"labels"`` (the input
names of each task are listed in :mod:`entrena.tasks.base`).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from entrena.core.callback import Callback
from entrena.core.events import Event
from entrena.core.state import TrainState
from entrena.data.batching import BatchSource
from entrena.engine.guard import StepUndo, divergence_threshold, gives_up, record_loss
from entrena.engine.micro_batches import forward_backward, model_inputs, retry_smaller

__all__ = ["BatchSource", "FitSettings", "LossFn", "SaveCheckpoint", "fit", "predict",
           "evaluation_points", "model_inputs", "token_counts"]

log = logging.getLogger("entrena")


def token_counts(batch: dict[str, torch.Tensor]) -> tuple[int, int]:
    """``(real tokens, padded tokens)`` of a batch: from ``attention_mask`` (B, T) when there
    is one, else one per example (images, table rows: no padding)."""
    mask = batch.get("attention_mask")
    if mask is None:
        size = int(batch["labels"].shape[0])
        return size, size
    return int(mask.sum()), int(mask.numel())


@dataclass(frozen=True)
class FitSettings:
    """Loop settings (plain values, built from ``train.*`` by the api layer).

    Attributes:
        on_nonfinite: ``"stop"`` or ``"skip_batch"``: what a NaN/Inf loss or gradient norm
            (or a diverged loss) does.
        check_gradients: Check the gradient norm too (off under a gradient scaler, i.e.
            ``16-mixed``, whose overflowing steps are skipped by the scaler by design).
        divergence_factor: A step loss above this many times its running median (see
            :func:`~entrena.engine.guard.divergence_threshold`) is treated like a non-finite
            one; ``None`` turns the guard, and the one-step undo behind it, off.
        max_skipped_fraction: ``skip_batch`` gives up (and stops as ``stop`` does) when more
            than this share of the steps attempted were skipped (and at least 3); ``None``:
            never.
    """

    max_epochs: int
    max_steps: int | None = None
    gradient_accumulation_steps: int = 1
    gradient_clip_norm: float | None = 1.0
    evals_per_epoch: int = 1
    on_nonfinite: str = "stop"
    check_gradients: bool = True
    divergence_factor: float | None = None
    max_skipped_fraction: float | None = None


LossFn = Callable[[Any, dict[str, torch.Tensor]], tuple[torch.Tensor, int]]
"""A task's loss: ``(model outputs, batch) -> (loss summed over the batch, the count it is
normalised by)`` (examples for a classifier; target tokens for a language model). The loop
trains on the ratio and averages evaluations over the counts."""

SaveCheckpoint = Callable[[TrainState, str], dict[str, Any]]
"""Writes a resumable checkpoint of the state (reason: ``"epoch"``, ``"steps"``, ``"SIGTERM"``
…) and returns what it wrote (``path``, ``bytes`` …), which becomes ``state.last_checkpoint``."""


class _Callbacks:
    def __init__(self, callbacks: Sequence[Callback]):
        self.callbacks = list(callbacks)

    def fire(self, event: Event, state: TrainState) -> None:
        for callback in self.callbacks:
            getattr(callback, event.value)(state)


def evaluation_points(batches_per_epoch: int, evals_per_epoch: int) -> set[int]:
    """Batch counts (1-based, within an epoch) after which validation runs; always the last."""
    evals = max(1, min(evals_per_epoch, batches_per_epoch))
    return {math.ceil(batches_per_epoch * (k + 1) / evals) for k in range(evals)}


@torch.no_grad()
def predict(backend: Any, model: Any, source: BatchSource,
            loss: LossFn) -> tuple[np.ndarray, np.ndarray, float]:
    """Run the model over every batch of ``source`` once.

    Args:
        loss: The task's loss (:data:`LossFn`).

    Returns:
        ``(outputs (N, ...) float32 in example order, the batches' ``labels`` (N, ...) in
        example order, the loss averaged over its counts)``.
    """
    was_training = model.training
    model.eval()
    batches = source.plan(0)
    n = sum(len(b) for b in batches)
    outputs_out: np.ndarray | None = None
    labels_out: np.ndarray | None = None
    total_loss, count = 0.0, 0
    for indices in batches:
        batch = backend.to_device(source.collate(indices))
        outputs = model(**model_inputs(batch)).float()
        batch_sum, batch_count = loss(outputs, batch)
        total_loss += batch_sum.item()
        count += batch_count
        labels = batch["labels"].cpu().numpy()
        if outputs_out is None or labels_out is None:
            outputs_out = np.zeros((n, *outputs.shape[1:]), dtype=np.float32)
            labels_out = np.zeros((n, *labels.shape[1:]), dtype=labels.dtype)
        outputs_out[indices] = outputs.cpu().numpy()
        labels_out[indices] = labels
    model.train(was_training)
    if outputs_out is None or labels_out is None:
        raise ValueError("evaluation data is empty")
    return outputs_out, labels_out, total_loss / max(1, count)


class _Saver:
    """Saves at most once per position; a restored position needs no new checkpoint."""

    def __init__(self, save: SaveCheckpoint | None, hooks: _Callbacks, state: TrainState):
        self.save = save
        self.hooks = hooks
        self.last = (state.epoch, state.batch_in_epoch, state.step)

    def __call__(self, state: TrainState, reason: str, force: bool = False) -> None:
        state.checkpoint_due = ""
        position = (state.epoch, state.batch_in_epoch, state.step)
        if self.save is None or (position == self.last and not force):
            return
        state.last_checkpoint = dict(self.save(state, reason) or {}, reason=reason)
        self.last = position
        self.hooks.fire(Event.CHECKPOINT, state)


def _gradient_norm(backend: Any, model: Any, optimizer: Any, settings: FitSettings) -> float | None:
    """Clip (when configured) and return the total gradient L2 norm before clipping."""
    if settings.gradient_clip_norm:
        norm = backend.clip_gradients(model, optimizer, settings.gradient_clip_norm)
    elif settings.check_gradients:
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        norm = torch.nn.utils.get_total_norm(grads) if grads else None
    else:
        return None
    return float(norm) if norm is not None else None


def _undo_counters(state: TrainState, group_start: tuple[int, int, int, int, float]
                   ) -> dict[str, Any]:
    """The counters at the start of the step about to be taken (what an undo goes back to)."""
    (batch_in_epoch, samples_seen, tokens_seen, padded_tokens_seen, train_time_s) = group_start
    return {"epoch": state.epoch, "step": state.step, "batch_in_epoch": batch_in_epoch,
            "samples_seen": samples_seen, "tokens_seen": tokens_seen,
            "padded_tokens_seen": padded_tokens_seen, "train_time_s": train_time_s,
            "skipped_steps": state.skipped_steps,
            "recent_losses": list(state.recent_losses), "first_losses": list(state.first_losses),
            "learning_rates": [group["lr"] for group in state.optimizer.param_groups]}


def _roll_back(state: TrainState, undo: StepUndo) -> None:
    """Back to the state before the latest optimizer step: weights, optimizer state, LR
    schedule, position and counters (the steps skipped since count no more; resumes and
    history stay as they are)."""
    counters = undo.restore()
    for group, rate in zip(state.optimizer.param_groups, counters["learning_rates"],
                           strict=True):
        group["lr"] = rate
    for key, value in counters.items():
        if key != "learning_rates":
            setattr(state, key, value)
    state.learning_rate = state.optimizer.param_groups[0]["lr"]
    log.info("rolled back to step %d, the last state whose loss was sane", state.step)


def fit(*, backend: Any, model: Any, optimizer: Any, train: BatchSource, loss: LossFn,
        evaluate: Callable[[Any], dict[str, float]], settings: FitSettings,
        callbacks: Sequence[Callback], state: TrainState | None = None,
        save_checkpoint: SaveCheckpoint | None = None) -> TrainState:
    """Train ``model`` and return the final state.

    Args:
        backend: The :class:`~entrena.engine.backend.Backend` (model and optimizer already set up).
        model: Module mapping ``model(**inputs)`` (the batch without ``labels``) to the
            outputs the task's loss reads (logits (B, C) for a classifier).
        optimizer: The optimizer.
        train: Training batches.
        loss: The task's loss (:data:`LossFn`); each micro-batch trains on its mean.
        evaluate: Called with the model at each evaluation point; returns validation metrics
            (``{"loss": …, "accuracy": …}``) stored in ``state.eval_metrics``.
        settings: Loop settings.
        callbacks: Called at each event, in order.
        state: A restored state to continue from (resume), or ``None`` to start fresh.
        save_checkpoint: Writes a resumable checkpoint; called only where resuming is exact
            (after an optimizer step and its evaluation, or at the end of an epoch).

    Returns:
        The final state; ``state.stop_reason`` says why training ended, or
        ``state.interrupted`` why it was interrupted (a checkpoint was saved first).
    """
    state = state or TrainState()
    _start_state(state, model, optimizer, train, settings)
    eval_points = evaluation_points(state.batches_per_epoch, settings.evals_per_epoch)
    hooks = _Callbacks(callbacks)
    save = _Saver(save_checkpoint, hooks, state)
    undo = StepUndo(model, optimizer) if settings.divergence_factor is not None else None
    run = _Run(backend=backend, model=model, optimizer=optimizer, train=train, loss=loss,
               evaluate=evaluate, settings=settings, hooks=hooks, save=save, undo=undo,
               eval_points=eval_points)
    model.train()
    hooks.fire(Event.FIT_START, state)
    while (state.epoch < settings.max_epochs and not state.should_stop
           and not state.interrupted):
        hooks.fire(Event.EPOCH_START, state)
        plan = train.plan(state.epoch)
        _train_epoch(run, state, plan)
        _end_epoch(run, state, plan)
    if not state.stop_reason and not state.interrupted:
        state.stop_reason = "max_epochs"
    hooks.fire(Event.FIT_END, state)
    return state


def _start_state(state: TrainState, model: Any, optimizer: Any, train: BatchSource,
                 settings: FitSettings) -> None:
    """The run's shape in ``state``: batches and optimizer steps per epoch, the last step."""
    state.model, state.optimizer = model, optimizer
    state.max_epochs = settings.max_epochs
    batches_per_epoch = len(train.plan(0))
    state.batches_per_epoch = batches_per_epoch
    state.steps_per_epoch = math.ceil(batches_per_epoch / settings.gradient_accumulation_steps)
    planned = state.steps_per_epoch * settings.max_epochs
    state.max_steps = min(planned, settings.max_steps) if settings.max_steps else planned


@dataclass
class _Run:
    """What :func:`fit`'s parts share (fixed for the whole fit)."""

    backend: Any
    model: Any
    optimizer: Any
    train: BatchSource
    loss: LossFn
    evaluate: Callable[[Any], dict[str, float]]
    settings: FitSettings
    hooks: _Callbacks
    save: _Saver
    undo: StepUndo | None
    eval_points: set[int]

    @property
    def count_units(self) -> Callable[[Any], int] | None:
        """A source that counts its batches' loss units (target tokens of a language model)
        lets each micro-batch's summed loss be divided by the whole optimizer step's count,
        so that gradient accumulation gives the gradient of one big batch (transformers PR
        #34191)."""
        return getattr(self.train, "target_count", None)

    @property
    def reference_loss(self) -> Callable[[Any], float | None] | None:
        """The loss of predicting the mean on a batch (regression), which the divergence
        guard also judges against; ``None`` without a guard."""
        return (getattr(self.train, "reference_loss", None)
                if self.settings.divergence_factor is not None else None)


@dataclass
class _Group:
    """The micro-batches of the optimizer step being accumulated.

    Attributes:
        start: ``(position, samples, tokens, padded tokens, train time)`` where it began: what
            a rewind restores.
        indices: Example indices of its micro-batches.
        losses: Each micro-batch's loss.
        references: Each micro-batch's reference loss (or ``None``).
        count: Loss units of the whole step (``None``: the source counts none).
    """

    start: tuple[int, int, int, int, float] = (0, 0, 0, 0, 0.0)
    indices: list[int] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    references: list[float | None] = field(default_factory=list)
    count: int | None = None

    def begin(self, run: _Run, state: TrainState, plan: list[Any], position: int) -> None:
        """Start a new step at batch ``position`` of ``plan``."""
        accumulation = run.settings.gradient_accumulation_steps
        self.start = (position, state.samples_seen, state.tokens_seen,
                      state.padded_tokens_seen, state.train_time_s)
        self.indices, self.losses, self.references = [], [], []
        state.extras.pop("nonfinite", None)
        if run.count_units is not None:
            end = min(len(plan), (position // accumulation + 1) * accumulation)
            self.count = sum(run.count_units(plan[p]) for p in range(position, end))


def _train_epoch(run: _Run, state: TrainState, plan: list[Any]) -> None:
    """The batches of one epoch from ``state.batch_in_epoch`` on: forward and backward, an
    optimizer step (guarded) every ``gradient_accumulation_steps`` micro-batches, the
    evaluations and checkpoints due; returns early on a stop or an interruption."""
    accumulation = run.settings.gradient_accumulation_steps
    group = _Group(start=(state.batch_in_epoch, 0, 0, 0, 0.0))
    first = state.batch_in_epoch
    position = first - 1
    while position + 1 < len(plan):
        position += 1
        indices = plan[position]
        if position % accumulation == 0 or position == first:
            group.begin(run, state, plan, position)
        state.batch_indices = list(indices)
        run.hooks.fire(Event.BATCH_START, state)
        started = time.perf_counter()
        batch = run.backend.to_device(run.train.collate(indices))
        data_wait_s = time.perf_counter() - started
        last_micro = position % accumulation == accumulation - 1 or position == len(plan) - 1
        try:
            loss_value = forward_backward(
                backend=run.backend, model=run.model, loss=run.loss, batch=batch,
                accumulation=accumulation, sync=last_micro,
                micro_batch_size=state.micro_batch_size, group_count=group.count)
        except torch.OutOfMemoryError as exc:  # torch.cuda.OutOfMemoryError too
            error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        else:
            error = ""
        if error:  # outside the except block: its traceback held the attempt's tensors
            del batch
            retry_smaller(state, run.optimizer, run.backend, group.start, len(indices), error)
            position = group.start[0] - 1  # the step again, from its first micro-batch
            continue
        group.indices.extend(int(i) for i in indices)
        group.losses.append(loss_value)
        if run.reference_loss is not None:
            group.references.append(run.reference_loss(indices))
        run.hooks.fire(Event.AFTER_BACKWARD, state)
        outcome = _guarded_step(run, state, group, position, loss_value) if last_micro else ""
        if outcome == "stopped":
            break
        _account_batch(run, state, position, loss_value, indices, batch,
                       time.perf_counter() - started, data_wait_s, outcome == "stepped")
        if outcome == "stepped" and run.settings.max_steps \
                and state.step >= run.settings.max_steps:
            state.should_stop, state.stop_reason = True, state.stop_reason or "max_steps"
        _evaluate_if_due(run, state, position, last_micro)
        if last_micro:
            run.hooks.fire(Event.STEP_END, state)
            state.extras.pop("out_of_memory", None)
            if state.checkpoint_due and position + 1 < len(plan):
                run.save(state, state.checkpoint_due)  # the epoch's last step saves below
        if state.should_stop or state.interrupted:
            break


def _guarded_step(run: _Run, state: TrainState, group: _Group, position: int,
                  loss_value: float) -> str:
    """The optimizer step of ``group``, unless its loss or gradient is not finite or the loss
    diverged (checked before ``optimizer.step()``, so bad values never reach the weights):
    then the step is skipped, or the fit stops at the last good state (saved).

    Returns:
        ``stepped``, ``skipped`` or ``stopped`` (``state.interrupted`` is ``nonfinite``).
    """
    settings, optimizer = run.settings, run.optimizer
    step_loss = sum(group.losses) / len(group.losses)
    references = [r for r in group.references if r is not None]
    limit = divergence_threshold(state.recent_losses, state.first_losses,
                                 settings.divergence_factor,
                                 sum(references) / len(references) if references else None)
    losses_finite = all(math.isfinite(v) for v in group.losses)
    bad_loss = not losses_finite or (limit is not None and step_loss > limit)
    grad_norm = (_gradient_norm(run.backend, run.model, optimizer, settings)
                 if not bad_loss else None)
    if not (bad_loss or (settings.check_gradients and grad_norm is not None
                         and not math.isfinite(grad_norm))):
        if run.undo is not None:
            run.undo.take(_undo_counters(state, group.start), state.scheduler)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        state.step += 1
        record_loss(state.recent_losses, state.first_losses, step_loss)
        return "stepped"
    optimizer.zero_grad(set_to_none=True)
    give_up = (settings.on_nonfinite == "skip_batch"
               and settings.max_skipped_fraction is not None
               and gives_up(state.skipped_steps + 1, state.step + state.skipped_steps + 1,
                            settings.max_skipped_fraction))
    state.extras["nonfinite"] = {
        "step": state.step + 1, "epoch": state.epoch, "batch": position + 1,
        "reason": "diverged" if losses_finite and bad_loss else "nonfinite",
        "loss": next((v for v in group.losses if not math.isfinite(v)),
                     step_loss if bad_loss else loss_value),
        "loss_limit": limit, "grad_norm": grad_norm, "example_indices": group.indices,
        "action": "stop" if give_up else settings.on_nonfinite}
    if give_up:
        state.skipped_steps += 1
        state.extras["nonfinite"].update(skipped_steps=state.skipped_steps,
                                         attempted_steps=state.step + state.skipped_steps)
    if settings.on_nonfinite == "stop" or give_up:
        _stop_at_last_good_state(run, state, group, bad_loss)
        return "stopped"
    state.skipped_steps += 1
    if state.extras["nonfinite"]["reason"] == "diverged":
        log.warning("skipped step %d (epoch %d): loss %.4g above %.4g (diverged); example "
                    "indices %s", state.step + 1, state.epoch + 1, step_loss, limit,
                    group.indices)
    else:
        log.warning("skipped step %d (epoch %d): loss %s, gradient norm %s; example indices %s",
                    state.step + 1, state.epoch + 1, state.extras["nonfinite"]["loss"],
                    grad_norm, group.indices)
    return "skipped"


def _stop_at_last_good_state(run: _Run, state: TrainState, group: _Group,
                             bad_loss: bool) -> None:
    """The weights and optimizer are those of the previous step boundary: rewind the position
    and counters to it. When that state's own loss (this one) is bad, go one step further
    back, to the last state whose loss was sane. Save, and leave."""
    (state.batch_in_epoch, state.samples_seen, state.tokens_seen,
     state.padded_tokens_seen, state.train_time_s) = group.start
    undo = run.undo if bad_loss else None
    rolled_back = undo is not None and undo.taken
    if undo is not None and undo.taken:
        _roll_back(state, undo)
    state.extras["nonfinite"]["resume_step"] = state.step
    state.interrupted = "nonfinite"
    run.hooks.fire(Event.STEP_END, state)
    run.save(state, "nonfinite", force=rolled_back)


def _account_batch(run: _Run, state: TrainState, position: int, loss_value: float,
                   indices: Any, batch: dict[str, torch.Tensor], seconds: float,
                   data_wait_s: float, stepped: bool) -> None:
    """The batch's counters in ``state`` (position, loss, learning rate, samples, tokens,
    time), then ``BATCH_END``."""
    state.batch_in_epoch = position + 1
    state.loss = loss_value
    state.learning_rate = run.optimizer.param_groups[0]["lr"]
    state.samples_seen += len(indices)
    tokens, padded = token_counts(batch)
    state.tokens_seen += tokens
    state.padded_tokens_seen += padded
    state.train_time_s += seconds
    state.data_wait_s += data_wait_s
    state.extras["last_micro"] = stepped  # an optimizer step ended with this batch
    run.hooks.fire(Event.BATCH_END, state)


def _evaluate_if_due(run: _Run, state: TrainState, position: int, last_micro: bool) -> None:
    """An evaluation at the epoch's evaluation points, at a stop, or when a callback asked
    for one (at the next step boundary)."""
    if not ((state.epoch_evaluations and position + 1 in run.eval_points) or state.should_stop
            or (state.eval_due and last_micro)):
        return
    state.eval_due = False
    run.hooks.fire(Event.EVAL_START, state)
    state.eval_metrics = run.evaluate(run.model)
    state.history.append({"epoch": state.epoch, "step": state.step, **state.eval_metrics})
    run.hooks.fire(Event.EVAL_END, state)


def _end_epoch(run: _Run, state: TrainState, plan: list[Any]) -> None:
    """After the epoch's batches (or a stop inside it): the epoch counter, ``EPOCH_END`` and
    the checkpoint where resuming is exact."""
    epoch_complete = state.batch_in_epoch >= len(plan)
    if epoch_complete:
        state.epoch += 1
        state.batch_in_epoch = 0
    if epoch_complete or not state.interrupted:
        run.hooks.fire(Event.EPOCH_END, state)
    if epoch_complete or state.should_stop or state.checkpoint_due:
        run.save(state, state.interrupted or state.stop_reason
                 or ("epoch" if epoch_complete else state.checkpoint_due))
