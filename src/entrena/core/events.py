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
            if state.should_stop: break
        fire(EPOCH_END)
        if state.should_stop: break
    fire(FIT_END)                                    # best weights are restored here

``CHECKPOINT`` fires whenever a checkpoint is written, so callbacks can add files beside it.
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
    EPOCH_END = "on_epoch_end"
    CHECKPOINT = "on_checkpoint"
    FIT_END = "on_fit_end"
