"""The mutable state of one fit, shared by the loop and its callbacks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["TrainState"]


@dataclass
class TrainState:
    """What the loop knows at any point; callbacks read and may set the flagged fields.

    Attributes:
        epoch: Current epoch, 0-based.
        step: Optimizer steps taken so far.
        batch_in_epoch: Micro-batches consumed in the current epoch.
        steps_per_epoch: Optimizer steps in one epoch.
        batches_per_epoch: Micro-batches in one epoch.
        max_steps: Planned optimizer steps for the whole fit.
        loss: Training loss of the last micro-batch.
        learning_rate: Current learning rate.
        samples_seen / tokens_seen / padded_tokens_seen: Running counts over the fit
            (tokens are real tokens; padded tokens include padding).
        train_time_s: Seconds spent in training steps (evaluation excluded).
        data_wait_s: The part of ``train_time_s`` spent building batches and moving them to
            the device (collate + transfer), i.e. waiting for data.
        eval_metrics: The latest validation metrics (``{"loss": …, "accuracy": …}``).
        history: One dict per evaluation (step, epoch, metrics).
        should_stop: Set by a callback to end the fit after the current step (and an
            evaluation); the fit is over for good.
        stop_reason: Why the fit ended (``"max_epochs"``, ``"early_stopping"``, ``"max_time"`` …).
        interrupted: Set to end the fit at the next step boundary *without* ending the run
            (``"SIGTERM"``, ``"SIGUSR1"``, ``"SIGINT"``, or ``"nonfinite"`` set by the loop): a
            checkpoint is written there and no unplanned evaluation runs, so a resumed run
            continues exactly.
        eval_due: Set by a callback to ask for a validation pass after the current optimizer
            step (a budgeted run's cadence); the loop clears it when the pass has run.
        epoch_evaluations: Whether the loop evaluates at its ``evals_per_epoch`` points; a
            callback that sets its own cadence (``eval_due``) turns them off.
        checkpoint_due: Set by a callback to ask the loop for a checkpoint at the next point
            where one resumes exactly (the value is the reason: ``"steps"``, ``"minutes"`` …).
        last_checkpoint: What the latest save returned (``path``, ``step``, ``bytes``,
            ``write_s``, ``reason``, ``saved_monotonic``); read it in ``on_checkpoint``.
        skipped_steps: Optimizer steps skipped because of a non-finite loss or gradient, or a
            diverged loss.
        recent_losses / first_losses: The divergence guard's history: the losses of the last
            and of the first kept steps (see :mod:`entrena.engine.guard`).
        resumes: How many times this fit was resumed from a checkpoint.
        micro_batch_size: Examples per forward pass, ``None`` for the whole batch; halved by
            the loop after an out-of-memory error (see :mod:`entrena.engine.micro_batches`).
        out_of_memory_retries: Steps run again after an out-of-memory error.
        batch_indices: Example indices of the current micro-batch (into the training split).
        best_score / best_step: Best monitored value so far and the step it was reached at.
        model, optimizer, scheduler: The live objects (set by the loop).
        extras: Free space for callbacks to share values.
    """

    epoch: int = 0
    step: int = 0
    batch_in_epoch: int = 0
    steps_per_epoch: int = 0
    batches_per_epoch: int = 0
    max_steps: int = 0
    max_epochs: int = 0
    loss: float = float("nan")
    learning_rate: float = 0.0
    samples_seen: int = 0
    tokens_seen: int = 0
    padded_tokens_seen: int = 0
    train_time_s: float = 0.0
    data_wait_s: float = 0.0
    eval_metrics: dict[str, float] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    should_stop: bool = False
    stop_reason: str = ""
    interrupted: str = ""
    checkpoint_due: str = ""
    eval_due: bool = False
    epoch_evaluations: bool = True
    last_checkpoint: dict[str, Any] = field(default_factory=dict)
    skipped_steps: int = 0
    recent_losses: list[float] = field(default_factory=list)
    first_losses: list[float] = field(default_factory=list)
    resumes: int = 0
    micro_batch_size: int | None = None
    out_of_memory_retries: int = 0
    batch_indices: list[int] = field(default_factory=list)
    best_score: float | None = None
    best_step: int | None = None
    model: Any = None
    optimizer: Any = None
    scheduler: Any = None
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def padding_fraction(self) -> float:
        """Share of processed token slots that were padding (0 when nothing was processed)."""
        if not self.padded_tokens_seen:
            return 0.0
        return 1.0 - self.tokens_seen / self.padded_tokens_seen

    def counters(self) -> dict[str, Any]:
        """The resumable scalar counters (saved in checkpoints)."""
        return {k: getattr(self, k) for k in _COUNTERS}

    def restore_counters(self, counters: dict[str, Any]) -> None:
        """Put back what :meth:`counters` returned; a recorded stop reason ends the fit."""
        for key in _COUNTERS:
            if key in counters:
                setattr(self, key, counters[key])
        self.should_stop = bool(self.stop_reason)


_COUNTERS = ("epoch", "step", "batch_in_epoch", "samples_seen", "tokens_seen",
             "padded_tokens_seen", "train_time_s", "data_wait_s", "best_score", "best_step",
             "history", "stop_reason", "skipped_steps", "resumes", "recent_losses",
             "first_losses", "micro_batch_size", "out_of_memory_retries")
