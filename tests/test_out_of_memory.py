"""Out of memory in a step: the loop halves the micro-batch and keeps the batch (issue 18).

The GPU path is exercised on the CPU: the model raises ``torch.OutOfMemoryError`` (what
``torch.cuda.OutOfMemoryError`` is) when a forward pass gets more examples than it "fits".
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import torch
from torch import nn

from entrena.callbacks.preemption import Preemption
from entrena.core.callback import Callback
from entrena.core.state import TrainState
from entrena.engine.checkpointing import (
    CheckpointStore,
    restore_rng,
    restore_training,
    training_payload,
)
from entrena.engine.loop import FitSettings, fit
from entrena.engine.micro_batches import halved, split_batch
from entrena.errors import ResourceError
from entrena.tasks.metrics import cross_entropy_loss
from entrena.tracking.events import EventLog
from fakes import FakeBackend, FakeSource, TinyModel, same_weights, weights


class OutOfMemoryModel(nn.Module):
    """Embedding mean -> dropout -> linear; a forward pass of more than ``fits`` examples
    raises ``torch.OutOfMemoryError`` from call ``from_call`` on (1-based; earlier calls
    succeed whatever their size, so a step can fail after its first micro-batch's
    backward)."""

    def __init__(self, fits: int | None = None, from_call: int = 1, dropout: float = 0.0):
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(16, 8)
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(8, 2)
        self.fits, self.from_call, self.calls, self.failures = fits, from_call, 0, 0

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.fits is not None and self.calls >= self.from_call \
                and input_ids.shape[0] > self.fits:
            self.failures += 1
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        mask = attention_mask.unsqueeze(-1).float()
        pooled = (self.embed(input_ids) * mask).sum(1) / mask.sum(1)
        return self.head(self.drop(pooled))


def no_eval(model) -> dict[str, float]:
    return {"loss": 0.0}


def run(model: nn.Module, *, accumulation: int = 1, micro_batch_size: int | None = None,
        callbacks=(), batch_size: int = 4) -> TrainState:
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    state = TrainState(micro_batch_size=micro_batch_size)
    return fit(backend=FakeBackend(), model=model, optimizer=optimizer, loss=cross_entropy_loss,
               train=FakeSource(n=24, batch_size=batch_size), evaluate=no_eval,
               settings=FitSettings(max_epochs=2, gradient_accumulation_steps=accumulation),
               callbacks=list(callbacks), state=state)


def test_split_batch_and_halving():
    batch = FakeSource(n=5, batch_size=5).collate(range(5))
    parts = split_batch(batch, 2)
    assert [int(p["labels"].shape[0]) for p in parts] == [2, 2, 1]
    assert torch.equal(torch.cat([p["input_ids"] for p in parts]), batch["input_ids"])
    assert split_batch(batch, None) == [batch] and split_batch(batch, 5) == [batch]
    assert [halved(n) for n in (16, 5, 3, 2)] == [8, 3, 2, 1]
    with pytest.raises(ResourceError, match="micro-batches of 1 example"):
        halved(1)


def test_split_gradients_equal_the_whole_batch():
    whole, split = OutOfMemoryModel(), OutOfMemoryModel()
    run(whole)
    run(split, micro_batch_size=3)
    for a, b in zip(whole.parameters(), split.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)  # same batch, summed in parts


@pytest.mark.parametrize("accumulation", [1, 2])
def test_out_of_memory_halves_the_micro_batch_and_keeps_the_batch(tmp_path, accumulation):
    events = EventLog(tmp_path / "events.jsonl", every_steps=1)
    failing = OutOfMemoryModel(fits=1)
    state = run(failing, accumulation=accumulation, callbacks=[events])
    assert state.micro_batch_size == 1 and state.out_of_memory_retries == 2  # 4 -> 2 -> 1
    assert state.step == 2 * 6 // accumulation and state.samples_seen == 2 * 24
    # The same as a run that used micro-batches of 1 from the start, bit for bit.
    expected = OutOfMemoryModel()
    run(expected, accumulation=accumulation, micro_batch_size=1)
    assert same_weights(weights(failing), weights(expected))
    records = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    splits = [r for r in records if r["type"] == "out_of_memory"]
    assert [(r["micro_batch_size_before"], r["micro_batch_size"]) for r in splits] == \
        [(4, 2), (2, 1)]
    assert splits[0]["step"] == 1 and "CUDA out of memory" in splits[0]["error"]


def test_the_failed_attempts_gradients_are_discarded():
    # Accumulating 2 micro-batches of 4: the first one's backward has run when the second
    # fails; its gradients must not count twice.
    failing = OutOfMemoryModel(fits=2, from_call=2)
    state = run(failing, accumulation=2)
    assert failing.failures == 1 and state.out_of_memory_retries == 1
    expected = OutOfMemoryModel()
    run(expected, accumulation=2, micro_batch_size=2)
    assert same_weights(weights(failing), weights(expected))
    leaked = OutOfMemoryModel()  # what keeping the first micro-batch's gradients would give
    assert not same_weights(weights(failing), weights(leaked))


def test_out_of_memory_at_one_example_is_a_resource_error():
    with pytest.raises(ResourceError, match="does not fit this device even so"):
        run(OutOfMemoryModel(fits=0))


def test_several_processes_do_not_split_alone():
    class Ranks(FakeBackend):
        world_size = 2

    model = OutOfMemoryModel(fits=2)
    with pytest.raises(ResourceError, match="with several processes"):
        fit(backend=Ranks(), model=model,
            optimizer=torch.optim.AdamW(model.parameters(), lr=0.05), loss=cross_entropy_loss,
            train=FakeSource(n=8, batch_size=4), evaluate=no_eval,
            settings=FitSettings(max_epochs=1), callbacks=[])


class SigtermAt(Callback):
    def __init__(self, step: int):
        self.step = step

    def on_batch_end(self, state: TrainState) -> None:
        if state.step == self.step and state.extras.get("last_micro"):
            os.kill(os.getpid(), signal.SIGTERM)


def _fit_with_checkpoints(directory: Path, model: nn.Module, extra=(), resume: bool = False
                          ) -> TrainState:
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    preemption = Preemption()
    callbacks = [preemption, *extra]
    store = CheckpointStore(directory)
    state, rng = TrainState(), None
    if resume:
        payload = store.load(store.latest_readable())
        restore_training(payload, state, model=model, optimizer=optimizer,
                         backend=FakeBackend(), callbacks=callbacks)
        rng = payload["rng"]

    def save(current: TrainState, reason: str) -> dict:
        payload = training_payload(current, model=model, optimizer=optimizer,
                                   backend=FakeBackend(), callbacks=callbacks, config_hash="h")
        info = store.save(payload, {"step": current.step, "epoch": current.epoch,
                                    "batch_in_epoch": current.batch_in_epoch,
                                    "reason": reason}, keep_last=2)
        return {"path": str(info.path), "step": info.step}

    with preemption.installed():
        if rng is not None:
            restore_rng(rng)
        return fit(backend=FakeBackend(), model=model, optimizer=optimizer,
                   loss=cross_entropy_loss, train=FakeSource(n=24, batch_size=4),
                   evaluate=no_eval, settings=FitSettings(max_epochs=3), callbacks=callbacks,
                   state=state, save_checkpoint=save)


def test_a_resumed_run_splits_as_the_run_did_and_stays_exact(tmp_path):
    expected = OutOfMemoryModel(fits=2, dropout=0.3)
    torch.manual_seed(1)
    _fit_with_checkpoints(tmp_path / "reference", expected)
    first = OutOfMemoryModel(fits=2, dropout=0.3)
    torch.manual_seed(1)  # dropout draws from here on, as in the reference
    state = _fit_with_checkpoints(tmp_path / "run", first, extra=[SigtermAt(7)])
    assert state.interrupted == "SIGTERM" and state.micro_batch_size == 2
    second = OutOfMemoryModel(fits=2, dropout=0.3)
    final = _fit_with_checkpoints(tmp_path / "run", second, resume=True)
    # The checkpoint said 2: the resumed run never tried the whole batch again.
    assert second.failures == 0 and final.out_of_memory_retries == 1
    assert final.micro_batch_size == 2 and final.step == 18
    assert same_weights(weights(second), weights(expected))


def test_unsplit_model_is_unaffected():
    # A model that never runs out of memory trains as before: no split, no retry.
    model = TinyModel()
    state = run(model)
    assert state.micro_batch_size is None and state.out_of_memory_retries == 0
