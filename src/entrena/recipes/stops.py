"""How a fit that stops early is reported: a stop signal (:class:`Interrupted`, with the
checkpoint it saved), a non-finite or diverged loss (:class:`NonFiniteError`, with the
batch's rows in ``nonfinite_batch.json``), and a model whose weights or validation loss are
not finite, which is never tested or saved."""

from __future__ import annotations

import logging
import math
from typing import Any

import torch

from entrena.callbacks.checkpoint import unwrap
from entrena.callbacks.preemption import Preemption
from entrena.config import LoadedConfig
from entrena.core.files import write_json_atomic
from entrena.core.rundir import RunPaths
from entrena.core.state import TrainState
from entrena.data.splits import LabelledSplits
from entrena.errors import Interrupted, NonFiniteError

__all__ = ["interrupted_error", "nonfinite_error", "refuse_nonfinite_model"]

log = logging.getLogger("entrena")


def interrupted_error(state: TrainState, preemption: Preemption) -> Interrupted:
    """The :class:`Interrupted` of a fit a stop signal ended: the checkpoint it saved (and
    how long after the signal), or that nothing new needed saving."""
    saved = state.last_checkpoint
    name = state.interrupted
    if saved and saved.get("reason") == name:
        delay = (saved["saved_monotonic"] - preemption.received_at
                 if preemption.received_at is not None else None)
        timing = f", {delay:.2f}s after the signal" if delay is not None else ""
        message = (f"saved checkpoint at step {saved['step']} ({name}){timing}: {saved['path']}; "
                   f"run the same command to resume")
        log.debug(message)
        return Interrupted(message, signal_name=name, step=int(saved["step"]),
                           signal_to_saved_s=delay)
    message = (f"stopped at step {state.step} ({name}); nothing new to save since the "
               f"checkpoint it resumed from; run the same command to resume")
    return Interrupted(message, signal_name=name, step=state.step)


def refuse_nonfinite_model(model: Any, validation: dict[str, float], state: TrainState,
                            restored: bool) -> None:
    """A model whose weights or validation loss are not finite is never tested, saved or
    called finished (``NonFiniteError``; the checkpoints stay)."""
    loss = float(validation.get("loss", float("nan")))
    weights_finite = all(bool(torch.isfinite(p).all()) for p in unwrap(model).parameters())
    if weights_finite and math.isfinite(loss):
        return
    which = (f"the best weights (step {state.best_step})" if restored
             else f"the final weights (step {state.step})")
    what = ("hold non-finite values" if not weights_finite
            else f"give a non-finite validation loss ({loss})")
    raise NonFiniteError(
        f"{which} {what}, so no model was saved and the run is not finished "
        f"({state.skipped_steps} steps were skipped for a non-finite or diverged loss); lower "
        f"train.learning_rate, keep train.divergence_factor and train.on_nonfinite: stop on, "
        f"and run again with --restart")


def nonfinite_error(state: TrainState, paths: RunPaths, splits: LabelledSplits,
                     loaded: LoadedConfig) -> NonFiniteError:
    """The :class:`NonFiniteError` of a fit stopped by a non-finite or diverged loss or
    gradient; writes the batch's indices, rows and text starts to ``paths.nonfinite``."""
    bad = dict(state.extras.get("nonfinite", {}))
    last = state.last_checkpoint  # the stop's own save, or the same position saved just before
    checkpoint = last.get("path") if last.get("step") == state.step else None
    indices = [int(i) for i in bad.get("example_indices", [])]
    rows = [int(splits.train.row_ids[i]) for i in indices]
    report = {**bad, "data_file": loaded.resolve_path(loaded.config.data.train),
              "rows": rows,
              "texts": [splits.train.texts[i][:200] for i in indices],
              "checkpoint": checkpoint,
              "resume_step": state.step}
    write_json_atomic(paths.nonfinite, report)
    tcfg = loaded.config.train
    loss = float(bad.get("loss", float("nan")))
    if bad.get("reason") == "diverged":
        against = ("the larger of its running median and the loss of predicting the training "
                   "mean on that batch" if hasattr(loaded.config.data, "target_transform")
                   else "its running median")
        what = (f"diverged loss ({loss:.4g}, above {bad.get('loss_limit', 0.0):.4g} = "
                f"train.divergence_factor {tcfg.divergence_factor:g} x {against})")
    elif not math.isfinite(loss):
        what = f"non-finite loss ({loss})"
    else:
        what = f"non-finite gradient norm ({bad.get('grad_norm')})"
    bad_loss = bad.get("reason") == "diverged" or not math.isfinite(loss)
    if checkpoint:
        saved = f"the last good state (step {state.step}) is in {checkpoint}"
        if bad_loss and state.step < int(bad.get("step", 1)) - 1:
            saved += " (the step before gave this loss, so it was undone)"
    elif state.resumes:
        saved = (f"nothing new was saved: the checkpoint this session resumed from (step "
                 f"{state.step}) is the last state kept")
        if bad_loss:
            saved += " and it already gives this loss (lower the learning rate more, or --restart)"
    else:
        saved = ("no step had been taken yet, so there is no state to keep (the next run "
                 "starts over)")
    gave_up = ""
    if bad.get("attempted_steps") is not None:
        gave_up = (f"; train.on_nonfinite: skip_batch gave up after skipping "
                   f"{bad.get('skipped_steps')} of {bad.get('attempted_steps')} steps (more than "
                   f"train.max_skipped_fraction {tcfg.max_skipped_fraction:g})")
    shown = ", ".join(map(str, rows[:10])) + (" …" if len(rows) > 10 else "")
    skip = ("" if tcfg.on_nonfinite == "skip_batch"
            else "; or set train.on_nonfinite: skip_batch")
    heavy = None  # a regression's heavy-tailed target: the transform is the fix that works
    if getattr(loaded.config.data, "target_transform", None) == "none":
        from entrena.data.targets import skew_hint

        heavy = skew_hint(splits.train.labels, str(loaded.config.data.label_column))
    return NonFiniteError(
        f"{what} at step {bad.get('step')} (epoch "
        f"{int(bad.get('epoch', 0)) + 1}), caught before the weights changed{gave_up}; {saved}; "
        f"the batch's examples (rows {shown} of {loaded.config.data.train}) are listed in "
        f"{paths.nonfinite}. {'First: ' + heavy + '. Other' if heavy else 'Usual'} fixes: "
        f"lower train.learning_rate (now "
        f"{tcfg.learning_rate:g}); keep train.gradient_clip_norm on (now "
        f"{tcfg.gradient_clip_norm}); train in 32-true or bf16-mixed rather than 16-mixed "
        f"(train.precision); look at those rows for empty or extreme inputs{skip}. Then "
        f"resume with --resume-with-changes, or --restart")
