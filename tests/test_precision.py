"""`train.precision: auto` on a CPU: bf16 autocast for large models on CPUs with native bf16."""

from __future__ import annotations

import io
import json
from dataclasses import replace

import pytest
import torch
from rich.console import Console

import entrena
from conftest import build_config, review_rows, write_csv
from entrena.engine.backend import auto_cpu_bf16
from entrena.hardware import detection
from entrena.hardware.detection import CPU_BF16_MIN_LINEAR_PARAMETERS, CpuInfo, cpu_bf16_pays
from entrena.hardware.precision import resolve_precision

BF16_CPU = CpuInfo(model="Test CPU with AVX-512 BF16", cores=2, logical_cores=2,
                   features={"avx512f": True, "avx512_bf16": True}, bf16_fast=True)


def test_auto_is_bf16_mixed_on_a_cpu_only_when_asked_and_explicit_values_stay():
    assert resolve_precision("auto", "cpu", bf16=False) == "32-true"
    assert resolve_precision("auto", "cpu", bf16=True) == "bf16-mixed"
    assert resolve_precision("32-true", "cpu", bf16=True) == "32-true"
    assert resolve_precision("16-mixed", "cpu", bf16=True) == "16-mixed"
    assert resolve_precision("auto", "tpu", bf16=False) == "bf16-mixed"


def test_auto_precision_per_device():
    """One rule for the backend and the planner (hardware/precision.py); MPS is 16-mixed."""
    assert [resolve_precision("auto", d, bf16=b) for d in ("cuda", "mps", "tpu", "cpu")
            for b in (False, True)] == ["16-mixed", "bf16-mixed", "16-mixed", "16-mixed",
                                        "bf16-mixed", "bf16-mixed", "32-true", "bf16-mixed"]


def test_bf16_pays_from_the_measured_size_and_only_with_native_bf16():
    edge = CPU_BF16_MIN_LINEAR_PARAMETERS
    assert cpu_bf16_pays(True, edge) and not cpu_bf16_pays(True, edge - 1)
    assert not cpu_bf16_pays(False, 10 * edge)


def test_the_model_decides_through_its_linear_weights(monkeypatch):
    monkeypatch.setattr(detection, "detect_cpu", lambda: BF16_CPU)
    large = torch.nn.Sequential(torch.nn.Embedding(50_000, 64), torch.nn.Linear(1024, 1024))
    small = torch.nn.Sequential(torch.nn.Embedding(50_000, 64), torch.nn.Linear(64, 64))
    assert auto_cpu_bf16(large, "auto")  # 1,048,576 linear weights
    assert not auto_cpu_bf16(small, "auto")  # 3.2 M parameters, but in an embedding
    assert not auto_cpu_bf16(large, "32-true")
    monkeypatch.setattr(detection, "detect_cpu", lambda: replace(BF16_CPU, bf16_fast=False))
    assert not auto_cpu_bf16(large, "auto")


def _train(tmp_path, name):
    write_csv(tmp_path / "train.csv", review_rows(64, seed=1))
    config = build_config({"train.max_steps": 2, "train.log_every_steps": 1}, name=name,
                          train=str(tmp_path / "train.csv"), test=None)
    result = entrena.train(config, run_dir=tmp_path / name,
                           console=Console(file=io.StringIO(), width=200))
    return result.metrics


def test_a_fit_on_a_bf16_cpu_keeps_fp32_for_the_tiny_model_and_uses_bf16_when_it_pays(
        tmp_path, monkeypatch):
    monkeypatch.setattr(detection, "detect_cpu", lambda: BF16_CPU)
    small = _train(tmp_path, "small")
    assert small["efficiency"]["precision"] == "32-true"  # 17 k linear weights
    monkeypatch.setattr(detection, "CPU_BF16_MIN_LINEAR_PARAMETERS", 1)
    large = _train(tmp_path, "large")
    assert large["efficiency"]["precision"] == "bf16-mixed"
    assert "bf16" in large["efficiency"]["peak_source"]  # the MFU denominator follows
    plan = json.loads((tmp_path / "large" / "plan.json").read_text())
    local = next(o for o in plan["options"] if o["kind"] == "local")
    assert local["precision"] == "bf16-mixed"  # the plan of the fit says what the fit does


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_the_cpu_peak_is_measured_and_cached_per_dtype(tmp_path, dtype):
    from entrena.hardware.peak import cpu_peak_flops_measured

    peak, source = cpu_peak_flops_measured(tmp_path, 1, dtype)
    assert peak > 0 and source.startswith(f"measured: {dtype} ")
    assert cpu_peak_flops_measured(tmp_path, 1, dtype) == (peak, source)


@pytest.mark.parametrize(("environ", "limit"), [
    ({"ONEDNN_MAX_CPU_ISA": "AVX2"}, "avx2"),
    ({"DNNL_MAX_CPU_ISA": "avx512_core_bf16"}, "avx512_core_bf16"),
    ({"ONEDNN_MAX_CPU_ISA": "AVX10_1_512_AMX", "DNNL_MAX_CPU_ISA": "AVX2"}, "avx10_1_512_amx"),
    ({"ONEDNN_MAX_CPU_ISA": "DEFAULT"}, None),
    ({"ONEDNN_MAX_CPU_ISA": "AVX9000"}, None),
    ({}, None),
])
def test_the_onednn_isa_limit_is_read_from_the_environment(environ, limit):
    assert detection.onednn_isa_limit(environ) == limit


def test_a_onednn_limit_hides_the_bf16_kernels_it_forbids():
    amx_cpu = {"avx2": True, "fma": True, "avx512f": True, "avx512_bf16": True,
               "avx512_vnni": True, "amx_tile": True, "amx_bf16": True, "amx_int8": True}
    assert detection.limit_features(amx_cpu, None) == amx_cpu
    under_avx2 = detection.limit_features(amx_cpu, "avx2")
    assert [k for k, v in under_avx2.items() if v] == ["avx2", "fma"]
    under_bf16 = detection.limit_features(amx_cpu, "avx512_core_bf16")
    assert under_bf16["avx512_bf16"] and not under_bf16["amx_bf16"]
    assert detection.limit_features(amx_cpu, "avx512_core_amx") == amx_cpu
    # a limit never turns on what the CPU lacks
    assert not detection.limit_features({"amx_bf16": False}, "avx512_core_amx")["amx_bf16"]


def test_under_onednn_avx2_this_cpu_has_no_fast_bf16(monkeypatch):
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    cpu = detection.detect_cpu()
    assert cpu.isa_limit == "avx2" and not cpu.bf16_fast
    assert not any(cpu.features.get(k) for k in ("avx512f", "avx512_bf16", "amx_bf16"))
