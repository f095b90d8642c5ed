"""``train.compile``: whether ``torch.compile`` pays for a run, and compiling the model.

Compiling fuses a model's elementwise work (GELU, layer norm, softmax, dropout) around the
matrix products, which are the same library calls either way; it costs a compilation per
new graph (the training step, the no-grad evaluation, and one recompile when a second batch
shape marks the dimensions dynamic: ``torch.compile``'s automatic dynamic shapes, so
length-grouped batches of many lengths compile a bounded number of times). Whether that pays
depends on the device, the model's size and the run's length: ``auto`` compiles when the
measured speed-up repays the measured compile time within the planned training time, with a
margin (on a CPU, small models measured no speed-up at all: :data:`SMALL_MODEL_PARAMETERS`).
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass
from typing import Any

from entrena.errors import ConfigError

__all__ = ["CompileDecision", "COMPILE_COSTS", "compile_decision", "compile_model",
           "REPAY_MARGIN", "SMALL_MODEL_PARAMETERS"]

log = logging.getLogger("entrena")

REPAY_MARGIN = 2.0
"""``auto`` compiles when the planned saving is at least this many times the compile time
(the speed-up and compile time vary with the model and the machine's load)."""

SMALL_MODEL_PARAMETERS = 2_000_000
"""On a CPU, a model with fewer parameters than this is judged by the small models'
measurement (``cpu-small`` in :data:`COMPILE_COSTS`): its steps are the loop's own overhead
and small kernels, which compiling does not shorten. Measured: 12 k (an MLP), 20 k (a CNN)
and 1.0 M (a 2-layer BERT of width 32) parameters gained nothing; the next size measured,
MiniLM-L6's 22.6 M, gained. The bound between 1.0 M and 22.6 M is a judgement, not a
measurement."""


@dataclass(frozen=True)
class CompileCost:
    """What compiling measured on a kind of device.

    Attributes:
        speedup: Training-step throughput compiled over eager, same batches.
        compile_s: Seconds the compilations of a run add (training and evaluation graphs,
            the dynamic-shape recompile), with inductor's caches cold.
        source: The measurement behind the figures.
        reference: Where the measurement is published (for the log line).
    """

    speedup: float
    compile_s: float
    source: str
    reference: str = "docs/benchmarks.md"


COMPILE_COSTS: dict[str, CompileCost] = {
    "cpu": CompileCost(
        speedup=1.10, compile_s=320.0,
        source="benchmarks/step_throughput.py --mode quick --pairs 3 --compile: MiniLM-L6 "
               "fp32, batch 16 x <=128 tokens, compiled entrena 1.10x (1.07-1.20x) the eager "
               "hand-written loop; 319 s of compiling the training graph alone (cold inductor "
               "cache); AMD EPYC AVX2, 2 cores, load 2-3, 2026-12-02 (docs/benchmarks.md, "
               "bench:first-step)",
        reference="docs/benchmarks.md, bench:first-step"),
    "cpu-bf16": CompileCost(
        speedup=1.25, compile_s=80.0,
        source="benchmarks/step_throughput.py --mode full --pairs 3 [--compile]: MiniLM-L6 "
               "bf16-mixed, batch 32, 20 length-grouped batches up to 272 tokens; against the "
               "eager hand-written loop, compiled entrena 1.30x (1.19-1.38x), eager entrena "
               "1.04x (1.04-1.10x), one run after the other: compiled over eager 1.25x; 80 s "
               "of compiling (cold inductor cache, quick mode); AMD EPYC AVX-512 BF16, 2 "
               "cores, 2026-12-02 (docs/benchmarks.md, bench:first-step)",
        reference="docs/benchmarks.md, bench:first-step"),
    "cpu-amx-bf16": CompileCost(
        speedup=1.02, compile_s=90.0,
        source="benchmarks/step_throughput.py --mode full --pairs 3 [--compile]: MiniLM-L6 "
               "bf16-mixed at attention dropout 0 with the attention kernel entrena picks "
               "(model.attn_implementation: auto), batch 32, 20 length-grouped batches up to "
               "272 tokens; against the eager hand-written loop (sdpa), one run after the "
               "other: compiled entrena 1.32x (1.31-1.45x), eager entrena 1.30x "
               "(1.19-1.34x): compiled over eager 1.02x; 87 s of compiling (cold inductor "
               "cache); Intel Xeon with AMX, 2 cores, 2026-12-03 (docs/benchmarks.md, "
               "bench:first-step). Before that kernel choice, with sdpa at every length: "
               "1.10x, 211 s (2026-12-02)",
        reference="docs/benchmarks.md, bench:first-step"),
    "cpu-small": CompileCost(
        speedup=1.00, compile_s=38.0,
        source="benchmarks/experiments/compile_examples.py --pairs 2 --epochs 4: entrena train "
               "of the examples, train.compile false and true alternated, a cold inductor cache "
               "per run, fp32 (their precision auto): steps of epochs 2-4 compiled over eager "
               "0.99x (0.97-1.02x) for examples/tiny (1.0 M parameters; ~38 s of compiling), "
               "1.00x (0.95-1.05x) for examples/digits (a 20 k CNN; ~21 s), 0.72x for "
               "examples/credit (a 12 k MLP; ~16 s); Intel Xeon with AMX, 2 cores, "
               "2026-12-04 (docs/benchmarks.md, bench:compile-examples); not measured on "
               "other CPU kinds",
        reference="docs/benchmarks.md, bench:compile-examples"),
    "cuda": CompileCost(
        speedup=1.43, compile_s=60.0,
        source="speed-up: PyTorch 2.0 announcement (163 open-source models, A100, AMP, mean "
               "training speed-up 43%); compile time: an estimate, not measured here",
        reference="PyTorch 2.0 announcement; compile time not measured"),
}
"""Per device kind (``cpu-amx-bf16``: a CPU with AMX training in bf16-mixed; ``cpu-bf16``:
another CPU in bf16-mixed, with native bf16 such as AVX-512 BF16; ``cpu``: in fp32;
``cpu-small``: a model under :data:`SMALL_MODEL_PARAMETERS` on any CPU, whatever the
precision); a device missing here is never compiled by ``auto``. Each CPU figure was
measured on its own CPU kind and stays beside the others (the CPU changes from one machine
to the next)."""


@dataclass(frozen=True)
class CompileDecision:
    """Whether to compile, and the sentence that says why."""

    compile: bool
    reason: str


def compile_decision(setting: str | bool, device: str,
                     planned_train_s: float | None, precision: str | None = None,
                     cpu_features: dict[str, bool] | None = None,
                     parameters: int | None = None) -> CompileDecision:
    """Decide ``train.compile`` for a run.

    Args:
        setting: ``"auto"``, ``True`` or ``False``.
        device: ``"cpu"`` or ``"cuda"`` (other devices are never compiled by ``auto``).
        planned_train_s: The plan's seconds of training steps, or ``None`` when unknown.
        precision: The run's resolved precision (``"bf16-mixed"`` …): on a CPU, bf16 and fp32
            have their own measurements (:data:`COMPILE_COSTS`).
        cpu_features: The CPU's instruction-set flags
            (:attr:`entrena.hardware.detection.CpuInfo.features`): a CPU with ``amx_bf16``
            in bf16 has its own measurement.
        parameters: The model's parameter count (trainable or not), or ``None`` when
            unknown: on a CPU, a model under :data:`SMALL_MODEL_PARAMETERS` is judged by the
            small models' measurement (``cpu-small``).

    Returns:
        The :class:`CompileDecision`.

    Raises:
        ConfigError: ``true`` on a CPU without a C++ compiler (inductor generates C++).
    """
    if setting is False:
        return CompileDecision(False, "train.compile is false")
    if device == "cpu" and not (shutil.which("c++") or shutil.which("g++")):
        if setting is True:
            raise ConfigError("train.compile: true needs a C++ compiler on a CPU (inductor "
                              "writes C++ kernels) and none is on PATH: install g++ "
                              "(`apt-get install g++`) or set train.compile: false")
        return CompileDecision(False, "auto: no C++ compiler for inductor on this CPU")
    if setting is True:
        return CompileDecision(True, "train.compile is true")
    kind = device
    if device == "cpu" and parameters is not None and parameters < SMALL_MODEL_PARAMETERS:
        kind = "cpu-small"
    elif precision and precision.startswith("bf16"):
        amx = device == "cpu" and bool((cpu_features or {}).get("amx_bf16"))
        for candidate in ((f"{device}-amx-bf16",) if amx else ()) + (f"{device}-bf16",):
            if candidate in COMPILE_COSTS:
                kind = candidate
                break
    cost = COMPILE_COSTS.get(kind)
    if cost is None:
        return CompileDecision(False, f"auto: compiling is not measured on {device}")
    if planned_train_s is None:
        return CompileDecision(False, "auto: the planned training time is unknown")
    saving = planned_train_s * (1.0 - 1.0 / cost.speedup) if cost.speedup > 1 else 0.0
    pays = saving >= REPAY_MARGIN * cost.compile_s
    size = (f"{parameters / 1e6:.2f} M parameters, "
            if kind == "cpu-small" and parameters is not None else "")
    return CompileDecision(
        pays, f"auto ({size}{kind}): a {cost.speedup:.2f}x step speed-up would save "
              f"{saving:.0f}s of {planned_train_s:.0f}s planned against "
              f"~{cost.compile_s:.0f}s of compiling "
              f"({'pays' if pays else 'does not pay'} with a {REPAY_MARGIN:g}x margin; "
              f"figures: {cost.reference})")


def compile_model(model: Any) -> Any:
    """Compile ``model`` in place (``nn.Module.compile``: its ``state_dict`` keys, and so
    checkpoints, exports and resume, are those of the eager model) with inductor and
    automatic dynamic shapes. Returns ``model``."""
    model.compile()
    return model
