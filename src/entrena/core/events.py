"""The events the training loop fires, in the order it fires them.

The loop (``entrena.engine.loop.fit``) reads, in pseudocode::

    fire(FIT_START)
    for epoch in range(start_epoch, max_epochs):
        fire(EPOCH_START)
        for batch in train_loader:                  # resumes mid-epoch after a restart
            fire(BATCH_START)
            loss = forward(batch); backward(loss)
            fire(AFTER_BACKWARD)                    # gradients exist, not yet clipped/applied
            if step boundary: clip, optimizer.step(), scheduler.step()
            fire(BATCH_END)                         # state.step counts optimizer steps
            if evaluation due:
                fire(EVAL_START); metrics = evaluate(validation); fire(EVAL_END)
            if step boundary:
                fire(STEP_END)                      # resumable point: callbacks may ask
                if checkpoint asked and not the epoch's last batch: save; fire(CHECKPOINT)
            if state.should_stop or state.interrupted: break
        if the epoch is complete: epoch += 1
        fire(EPOCH_END)                             # not when interrupted mid-epoch
        save; fire(CHECKPOINT)                      # epoch end, and whenever training stops
        if state.should_stop or state.interrupted: break
    fire(FIT_END)                                    # best weights are restored here

A non-finite loss or gradient norm is caught before ``optimizer.step()``: the step is
skipped (``train.on_nonfinite: skip_batch``) or the state rewound to the previous step
boundary, saved, and the fit interrupted (``stop``).

``CHECKPOINT`` fires after each checkpoint is written (``state.last_checkpoint`` says which).
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Event"]


class Event(StrEnum):
    """A point in the loop where callbacks run; the value is the callback method's name."""

    FIT_START = "on_fit_start"
    EPOCH_START = "on_epoch_start"
    BATCH_START = "on_batch_start"
    AFTER_BACKWARD = "on_after_backward"
    BATCH_END = "on_batch_end"
    EVAL_START = "on_eval_start"
    EVAL_END = "on_eval_end"
    STEP_END = "on_step_end"
    EPOCH_END = "on_epoch_end"
    CHECKPOINT = "on_checkpoint"
    FIT_END = "on_fit_end"
