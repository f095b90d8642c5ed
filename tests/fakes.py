"""Small stand-ins for driving ``entrena.engine.loop.fit`` without transformers or Fabric."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from entrena.core.callback import Callback
from entrena.core.events import Event
from entrena.core.state import TrainState


class FakeBackend:
    """The part of ``entrena.engine.backend.Backend`` the loop uses, on plain CPU tensors."""

    def to_device(self, obj: Any) -> Any:
        return obj

    def no_backward_sync(self, model: Any, enabled: bool) -> Any:
        return contextlib.nullcontext()

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def clip_gradients(self, model: Any, optimizer: Any, max_norm: float) -> torch.Tensor:
        return torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)


class TinyModel(nn.Module):
    """Mean of token embeddings -> linear head: (B, T) ids and mask -> (B, C) logits."""

    def __init__(self, vocab: int = 16, width: int = 4, classes: int = 2, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.embed = nn.Embedding(vocab, width)
        self.head = nn.Linear(width, classes)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        mask = attention_mask.unsqueeze(-1).float()
        pooled = (self.embed(input_ids) * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return self.head(pooled)


class FakeSource:
    """A BatchSource of ``n`` random sequences; batches in order (or reversed on odd epochs)."""

    def __init__(self, n: int = 40, batch_size: int = 4, vocab: int = 16, seed: int = 0):
        generator = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(1, vocab, (n, 6), generator=generator)
        self.labels = (self.ids[:, 0] % 2).long()
        self.batch_size = batch_size
        self.n = n

    def plan(self, epoch: int) -> list[list[int]]:
        order = list(range(self.n)) if epoch % 2 == 0 else list(reversed(range(self.n)))
        return [order[i:i + self.batch_size] for i in range(0, self.n, self.batch_size)]

    def collate(self, indices: Sequence[int]) -> dict[str, torch.Tensor]:
        index = torch.tensor(list(indices))
        return {"input_ids": self.ids[index], "attention_mask": torch.ones_like(self.ids[index]),
                "labels": self.labels[index]}


class ScriptedEvaluate:
    """An ``evaluate`` that returns the scripted validation losses in turn (then repeats the
    last); accuracy is ``1 - loss``."""

    def __init__(self, losses: Sequence[float]):
        self.losses = list(losses)
        self.calls = 0

    def __call__(self, model: Any) -> dict[str, float]:
        loss = self.losses[min(self.calls, len(self.losses) - 1)]
        self.calls += 1
        return {"loss": loss, "accuracy": 1.0 - loss}


class Recorder(Callback):
    """Records every event, the learning rate of each optimizer step, and a copy of the weights
    at each evaluation (keyed by step)."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.step_lrs: list[float] = []
        self.weights_at_eval: dict[int, dict[str, torch.Tensor]] = {}

    def on_fit_start(self, state: TrainState) -> None:
        self.events.append(Event.FIT_START)

    def on_epoch_start(self, state: TrainState) -> None:
        self.events.append(Event.EPOCH_START)

    def on_batch_start(self, state: TrainState) -> None:
        self.events.append(Event.BATCH_START)

    def on_after_backward(self, state: TrainState) -> None:
        self.events.append(Event.AFTER_BACKWARD)

    def on_batch_end(self, state: TrainState) -> None:
        self.events.append(Event.BATCH_END)
        if state.extras.get("last_micro", True):
            self.step_lrs.append(state.learning_rate)

    def on_eval_start(self, state: TrainState) -> None:
        self.events.append(Event.EVAL_START)

    def on_eval_end(self, state: TrainState) -> None:
        self.events.append(Event.EVAL_END)
        self.weights_at_eval[state.step] = weights(state.model)

    def on_epoch_end(self, state: TrainState) -> None:
        self.events.append(Event.EPOCH_END)

    def on_checkpoint(self, state: TrainState) -> None:
        self.events.append(Event.CHECKPOINT)

    def on_fit_end(self, state: TrainState) -> None:
        self.events.append(Event.FIT_END)


def weights(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
