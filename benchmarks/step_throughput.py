"""Step throughput on identical batches: entrena's loop against a hand-written PyTorch loop.

    .venv/bin/python benchmarks/step_throughput.py [--mode full|quick|smoke] [--pairs 5]
    (``benchmarks/bench.py`` calls :func:`run`)

One process, one model (MiniLM-L6 from the package with entrena's mean-pooling head and the
attention dropout ``entrena train`` resolves: 0 on a CPU), one list
of pre-built batches (the reviews' first training batches as entrena's length-grouped loader
cuts them). Each arm starts from a copy of the same weights with a fresh AdamW
(``entrena.recipes.training.build_optimizer``: no decay on 1-D tensors; entrena's arm fused
on a CPU as ``entrena train`` makes it, the hand-written arm PyTorch's default
implementation, as a user's ``torch.optim.AdamW`` is), the same precision
(``train.precision: auto`` on this device), a linear schedule with 10% warmup and gradient
clipping at 1.0:

- **entrena**: ``entrena.engine.loop.fit`` through the Lightning Fabric backend, with the
  attention kernel ``entrena train`` picks (``model.attn_implementation: auto``:
  :mod:`entrena.engine.attention`, measured before the timed loops) and the
  callbacks ``entrena train`` runs every step (LR schedule, efficiency monitor, event log);
  no evaluation, no checkpoint; timed from the end of the fit-start event to the start of the
  fit-end event (what callbacks do once per fit is set-up, like the other arm's);
- **hand-written**: ``for batch in batches: forward, cross-entropy, backward, clip, step,
  schedule, zero_grad``, with transformers' default attention (``sdpa``).

Both arms run once untimed first; then the timed pairs alternate entrena, hand, entrena, hand.
Throughput = samples / wall time of the arm's loop (set-up excluded). Ratio = entrena / hand.

``--compile``: entrena's arm trains one model compiled in place (``train.compile: true``:
``entrena.engine.compiling.compile_model``), its weights reset from the same copy and a
fresh AdamW each time, so the untimed warm-up pays the compilations (reported as the
warm-up's excess over the eager hand-written arm's) and the timed pairs measure compiled
steps against the hand-written eager loop.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import ROOT  # noqa: E402
from _stats import ab_order, ratios  # noqa: E402

CONFIG = ROOT / "examples" / "reviews" / "config.yaml"
MODES: dict[str, dict[str, Any]] = {
    "full": {"batch_size": 32, "max_length": "auto", "steps": 20},
    "quick": {"batch_size": 16, "max_length": 128, "steps": 8},
    "smoke": {"batch_size": 8, "max_length": 64, "steps": 3},
}
WARMUP_FRACTION = 0.1
CLIP_NORM = 1.0


class PrebuiltBatches:
    """A :class:`~entrena.data.batching.BatchSource` over batches built once, in order."""

    def __init__(self, batches: list[dict[str, Any]]):
        self.batches = batches

    def plan(self, epoch: int) -> list[list[int]]:
        return [[i] for i in range(len(self.batches))]

    def collate(self, indices: list[int]) -> dict[str, Any]:
        return self.batches[indices[0]]


def build(mode: str, folder: Path) -> dict[str, Any]:
    """The model to copy, the batches and the settings of ``mode``."""
    import numpy as np

    from entrena.api.preparing import prepare_data, resolve_model_sources
    from entrena.data.loaders import TextBatches
    from entrena.tasks.registry import load_config
    from entrena.tasks.text.model import build_classifier
    from entrena.tasks.text.config import resolve_attention_dropout

    settings = MODES[mode]
    loaded = load_config(CONFIG, {"model.max_length": settings["max_length"],
                                  "data.cache_dir": str(folder / "cache"),
                                  "tracking.enabled": False})
    sources = resolve_model_sources(loaded)
    prepared = prepare_data(loaded, sources)
    cfg = loaded.config
    tokenizer = prepared.tokenizer
    max_length = min(prepared.max_length, 512)
    source = TextBatches(prepared.encoded["train"], prepared.splits.train.labels,
                         max_length=max_length, batch_size=settings["batch_size"],
                         pad_id=tokenizer.pad_token_id or 0, shuffle=True,
                         group_by_length=True, seed=cfg.train.seed)
    plan = source.plan(0)[:settings["steps"]]
    batches = [source.collate(indices) for indices in plan]
    model = build_classifier(num_labels=len(prepared.splits.labels), pretrained=sources["weights"],
                             architecture=None, vocab_size=len(tokenizer),
                             pad_token_id=tokenizer.pad_token_id or 0, pooling=cfg.model.pooling,
                             dropout=cfg.model.dropout,
                             attention_dropout=resolve_attention_dropout(cfg))
    tokens = [int(b["attention_mask"].sum()) for b in batches]
    padded = [int(b["attention_mask"].numel()) for b in batches]
    return {"model": model, "batches": batches, "learning_rate": cfg.train.learning_rate,
            "weight_decay": cfg.train.weight_decay, "max_length": max_length,
            "batch_size": settings["batch_size"], "steps": len(batches),
            "samples": sum(len(b["labels"]) for b in batches),
            "padded_lengths": [int(b["input_ids"].shape[1]) for b in batches],
            "padding_fraction": 1 - sum(tokens) / sum(padded),
            "lengths": np.asarray([len(i) for i in plan])}


def entrena_arm(backend: Any, built: dict[str, Any], folder: Path, threads: int,
                compiled: Any = None) -> float:
    """Seconds of ``entrena.engine.loop.fit`` over the batches (``compiled``: that model,
    compiled once, with the copy's weights loaded, instead of a fresh copy)."""
    from entrena.callbacks.lr_schedule import LRSchedule
    from entrena.engine.loop import FitSettings, fit
    from entrena.hardware.memory import peak_memory_bytes
    from entrena.recipes.efficiency import build_monitor
    from entrena.recipes.training import build_optimizer, fused_optimizer
    from entrena.tasks.metrics import cross_entropy_loss
    from entrena.tracking.events import EventLog

    if compiled is not None:
        compiled.load_state_dict(built["model"].state_dict())
        model = compiled
    else:
        model = copy.deepcopy(built["entrena_model"])
    optimizer = build_optimizer(model, built["learning_rate"], built["weight_decay"],
                                fused=fused_optimizer(backend.accelerator))
    model, optimizer = backend.setup(model, optimizer)
    events = EventLog(folder / f"events-{time.monotonic_ns()}.jsonl")
    monitor = build_monitor(plan=None, lengths=built["lengths"], accelerator=backend.accelerator,
                            precision=backend.precision, threads=threads,
                            cache_dir=folder / "peak", every_steps=10, emit=events.write,
                            peak_memory=lambda: peak_memory_bytes(backend.accelerator))
    first, last = _Clock(backend.device), _Clock(backend.device)
    callbacks = [last, LRSchedule("linear", WARMUP_FRACTION), monitor, events, first]
    settings = FitSettings(max_epochs=1, gradient_clip_norm=CLIP_NORM)
    fit(backend=backend, model=model, loss=cross_entropy_loss, optimizer=optimizer,
        train=PrebuiltBatches(built["batches"]), evaluate=lambda _: {}, settings=settings,
        callbacks=callbacks)
    return last.end - first.start


class _Clock:
    """A callback noting the time at the fit's start and end events (the set-up each
    callback does once per fit is left out, like the hand-written loop's set-up)."""

    def __init__(self, device: Any):
        self.device = device
        self.start = self.end = 0.0

    def __getattr__(self, name: str) -> Any:
        if name.startswith("on_"):
            return lambda state: None
        raise AttributeError(name)

    def on_fit_start(self, state: Any) -> None:
        _synchronize(self.device)
        self.start = time.perf_counter()

    def on_fit_end(self, state: Any) -> None:
        _synchronize(self.device)
        self.end = time.perf_counter()


def hand_arm(device: Any, precision: str, built: dict[str, Any]) -> float:
    """Seconds of the plain PyTorch loop over the same batches."""
    import torch
    import torch.nn.functional as F

    from entrena.callbacks.lr_schedule import warmup_decay_factor
    from entrena.recipes.training import build_optimizer

    model = copy.deepcopy(built["model"]).to(device)
    optimizer = build_optimizer(model, built["learning_rate"], built["weight_decay"])
    total = len(built["batches"])
    warmup = int(round(WARMUP_FRACTION * total))
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: warmup_decay_factor(step, total, warmup, "linear"))
    if precision not in ("32-true", "bf16-mixed"):
        raise ValueError(f"the hand-written loop supports 32-true and bf16-mixed, got "
                         f"{precision!r}; set train.precision to one of them")
    autocast = precision == "bf16-mixed"
    batches = [{k: v.to(device) for k, v in b.items()} for b in built["batches"]]
    model.train()
    _synchronize(device)
    started = time.perf_counter()
    for batch in batches:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            logits = model(batch["input_ids"], batch["attention_mask"])
        loss = F.cross_entropy(logits.float(), batch["labels"])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP_NORM)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
    _synchronize(device)
    return time.perf_counter() - started


def _synchronize(device: Any) -> None:
    import torch

    if getattr(device, "type", str(device)) == "cuda":
        torch.cuda.synchronize()


def run(mode: str, pairs: int, threads: int | None = None,
        progress: Any = print, compile_model: bool = False) -> dict[str, Any]:
    """Warm-up of both arms, then ``pairs`` timed pairs (entrena, hand, entrena, hand …);
    ``threads`` torch threads (default: entrena's, the physical cores)."""
    import os

    from entrena.engine.attention import apply_attention
    from entrena.engine.backend import auto_cpu_bf16, configure_threads, create_backend

    threads = configure_threads(threads)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-step-") as tmp:
        folder = Path(tmp)
        built = build(mode, folder)
        # precision: auto, as `entrena train` resolves it for this model on this machine
        backend = create_backend(accelerator="auto", devices=1, precision="auto", seed=0,
                                 deterministic=False,
                                 cpu_bf16=auto_cpu_bf16(built["model"], "auto"))
        # entrena's arm: the attention kernel `entrena train` picks (model.attn_implementation:
        # auto, measured here outside the timed loops); the hand-written arm keeps
        # transformers' default (sdpa), as a user's loop does
        built["entrena_model"] = copy.deepcopy(built["model"])
        attention = apply_attention(built["entrena_model"], "auto",
                                    device=backend.accelerator, precision=backend.precision,
                                    batch_size=built["batch_size"],
                                    max_length=built["max_length"], threads=threads,
                                    cache_dir=folder / "attention")
        progress(attention or "attention: no Hugging Face model")
        compiled = None
        if compile_model:
            from entrena.engine.compiling import compile_model as compile_in_place

            compiled = compile_in_place(copy.deepcopy(built["entrena_model"]))
        arms = {"entrena": lambda: entrena_arm(backend, built, folder, threads, compiled),
                "hand": lambda: hand_arm(backend.device, backend.precision, built)}
        warmup = {name: arm() for name, arm in arms.items()}
        progress(f"warm-up: entrena {warmup['entrena']:.1f}s, hand {warmup['hand']:.1f}s "
                 f"({built['steps']} steps of {built['batch_size']})")
        seconds: dict[str, list[float]] = {"entrena": [], "hand": []}
        for i, name in enumerate(ab_order(pairs, "entrena", "hand")):
            seconds[name].append(arms[name]())
            if name == "hand":
                progress(f"pair {i // 2 + 1}: entrena {seconds['entrena'][-1]:.2f}s, hand "
                         f"{seconds['hand'][-1]:.2f}s")
    samples = built["samples"]
    throughput = {name: [samples / s for s in values] for name, values in seconds.items()}
    pair_ratios = ratios(throughput["entrena"], throughput["hand"])
    return {"mode": mode, "pairs": pairs, "threads": threads, "device": str(backend.device),
            "compiled": compile_model, "warmup_s": warmup, "attention": attention,
            "compile_s": (warmup["entrena"] - warmup["hand"]) if compile_model else None,
            "precision": backend.precision, "seconds": seconds, "throughput": throughput,
            "ratios": pair_ratios, "median_ratio": statistics.median(pair_ratios),
            "load": (load_before, os.getloadavg()[0]),
            **{k: built[k] for k in ("batch_size", "steps", "samples", "max_length",
                                     "padded_lengths", "padding_fraction")}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=list(MODES), default="smoke")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--compile", action="store_true",
                        help="entrena's arm compiled (train.compile: true)")
    args = parser.parse_args()
    result = run(args.mode, args.pairs, args.threads, compile_model=args.compile)
    print({k: v for k, v in result.items() if k != "padded_lengths"})


if __name__ == "__main__":
    main()
