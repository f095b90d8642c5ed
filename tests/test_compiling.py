"""train.compile: the auto rule, the missing-compiler error, and a compiled fit that saves,
resumes and predicts like an eager one (slow: inductor compiles for minutes on 2 cores)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

import entrena
from entrena.core.callback import Callback
from entrena.engine import compiling
from entrena.engine.compiling import (
    COMPILE_COSTS,
    REPAY_MARGIN,
    SMALL_MODEL_PARAMETERS,
    compile_decision,
)
from entrena.errors import ConfigError, Interrupted


def test_false_never_compiles_and_true_always_does():
    assert not compile_decision(False, "cuda", 1e9).compile
    assert compile_decision(True, "cuda", 1.0).compile


def test_auto_compiles_only_when_the_saving_repays_the_compile_time():
    cost = COMPILE_COSTS["cuda"]
    needed = REPAY_MARGIN * cost.compile_s / (1 - 1 / cost.speedup)  # planned seconds
    assert not compile_decision("auto", "cuda", needed * 0.9).compile
    decision = compile_decision("auto", "cuda", needed * 1.1)
    assert decision.compile and "pays" in decision.reason and cost.reference in decision.reason
    assert not compile_decision("auto", "cuda", None).compile  # unknown time: eager
    assert not compile_decision("auto", "tpu", 1e9).compile  # not measured there


def test_a_bf16_cpu_has_its_own_measurement(monkeypatch):
    monkeypatch.setattr(compiling.shutil, "which", lambda name: "/usr/bin/c++")
    bf16, fp32 = COMPILE_COSTS["cpu-bf16"], COMPILE_COSTS["cpu"]
    planned = REPAY_MARGIN * bf16.compile_s / (1 - 1 / bf16.speedup) * 1.1
    decision = compile_decision("auto", "cpu", planned, "bf16-mixed")
    assert decision.compile and f"a {bf16.speedup:.2f}x step speed-up" in decision.reason
    fp32_decision = compile_decision("auto", "cpu", planned, "32-true")
    assert f"a {fp32.speedup:.2f}x step speed-up" in fp32_decision.reason
    assert compile_decision("auto", "cuda", planned, "bf16-mixed").reason == \
        compile_decision("auto", "cuda", planned).reason  # no cuda-bf16 entry: cuda's
    # An AMX CPU in bf16 has its own, smaller measurement; in fp32 it is any CPU's.
    amx = COMPILE_COSTS["cpu-amx-bf16"]
    amx_decision = compile_decision("auto", "cpu", planned, "bf16-mixed", {"amx_bf16": True})
    assert f"a {amx.speedup:.2f}x step speed-up" in amx_decision.reason
    assert not amx_decision.compile  # it repays only much longer runs
    assert compile_decision("auto", "cpu", planned, "32-true", {"amx_bf16": True}).reason == \
        fp32_decision.reason
    assert compile_decision("auto", "cpu", planned, "bf16-mixed",
                            {"avx512_bf16": True}).reason == decision.reason


def test_a_small_model_on_a_cpu_is_judged_by_the_small_models_measurement(monkeypatch):
    monkeypatch.setattr(compiling.shutil, "which", lambda name: "/usr/bin/c++")
    # A run long enough for the transformer-sized measurement to compile...
    bf16 = COMPILE_COSTS["cpu-bf16"]
    planned = REPAY_MARGIN * bf16.compile_s / (1 - 1 / bf16.speedup) * 10
    large = compile_decision("auto", "cpu", planned, "bf16-mixed", parameters=22_566_146)
    assert large.compile
    # ...stays eager for a small model (measured: no step speed-up), in any precision.
    for precision in ("bf16-mixed", "32-true"):
        small = compile_decision("auto", "cpu", planned, precision,
                                 parameters=SMALL_MODEL_PARAMETERS - 1)
        assert not small.compile
        assert "cpu-small" in small.reason and "does not pay" in small.reason
    assert not compile_decision("auto", "cpu", 1e9, "32-true", parameters=12_226).compile
    assert compile_decision(True, "cpu", 1.0, parameters=12_226).compile  # true is true
    # The small models' figure is a CPU's: on CUDA the size does not change the entry.
    assert compile_decision("auto", "cuda", planned, parameters=12_226).reason == \
        compile_decision("auto", "cuda", planned).reason


def test_a_cpu_without_a_cpp_compiler(monkeypatch):
    monkeypatch.setattr(compiling.shutil, "which", lambda name: None)
    assert not compile_decision("auto", "cpu", 1e9).compile
    with pytest.raises(ConfigError, match="needs a C\\+\\+ compiler.*train.compile: false"):
        compile_decision(True, "cpu", 1e9)


def test_a_bad_setting_is_a_config_error(tiny_config, config_file):
    config = dict(tiny_config, train={**tiny_config["train"], "compile": "sometimes"})
    with pytest.raises(ConfigError, match="train.compile"):
        entrena.train(config_file(config))


class _SigtermAt(Callback):
    def __init__(self, step: int):
        self.step = step

    def on_batch_end(self, state) -> None:
        if state.step == self.step:
            os.kill(os.getpid(), signal.SIGTERM)


@pytest.mark.slow
def test_a_compiled_fit_checkpoints_resumes_and_predicts(tiny_config, config_file, tmp_path,
                                                         monkeypatch):
    import torch

    from entrena.recipes import training

    # The wiring under test: a module compiled in place (dynamo traces it, graphs break and
    # recompile at new shapes), its checkpoint keys, resume and prediction. Inductor's C++
    # code generation adds 2-5 minutes on 2 cores and is what benchmarks/step_throughput.py
    # --compile measures; here the graphs run through AOT autograd without it.
    def compile_without_codegen(model):
        model.compile(backend="aot_eager")
        return model

    monkeypatch.setattr(training, "compile_model", compile_without_codegen)

    config = dict(tiny_config, train={**tiny_config["train"], "compile": True,
                                      "max_steps": 4, "evals_per_epoch": 1})
    path = config_file(config)
    with pytest.raises(Interrupted):  # SIGTERM after step 2: a checkpoint, compiled weights
        entrena.train(path, callbacks=[_SigtermAt(2)])
    run_dir = Path("runs") / "tiny"
    assert "compile: on (train.compile is true)" in (run_dir / "train.log").read_text()
    saved = torch.load(sorted((run_dir / "checkpoints").glob("step-*.pt"))[-1],
                       map_location="cpu", weights_only=False)
    assert saved["model"] and not any("_orig_mod" in k for k in saved["model"])  # eager keys
    resumed = entrena.train(path)  # the same command: resumes, compiled again
    assert resumed.resumed_from_step == 2 and resumed.metrics["fit"]["steps"] == 4
    rows = tmp_path / "rows.csv"
    rows.write_text("text\ngreat stuff\nawful\n")
    out = entrena.predict(resumed.run_dir, rows, progress=False).output
    assert len(out.read_text().splitlines()) == 3
    assert json.loads((run_dir / "status.json").read_text())["status"] == "finished"
