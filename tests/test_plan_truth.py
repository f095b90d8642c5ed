"""The plan on any machine: CPU peaks from flags, measured step memory, the allocator."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from entrena.hardware.catalog import load_catalog
from entrena.planning.memory import training_memory
from entrena.planning.memory_probe import measure_step_memory
from entrena.planning.options import cpu_isa, cpu_peak_flops
from test_planning import machine

AMX = {"avx2": True, "fma": True, "avx512f": True, "avx512_bf16": True, "amx_bf16": True}
ZEN4 = {"avx2": True, "fma": True, "avx512f": True, "avx512_bf16": True}
AVX2 = {"avx2": True, "fma": True}


@pytest.mark.parametrize("features, precision, expected", [
    (AMX, "bf16-mixed", "amx_bf16"), (AMX, "32-true", "avx512"),
    (ZEN4, "bf16-mixed", "avx512_bf16"), (ZEN4, "bf16-true", "avx512_bf16"),
    (ZEN4, "32-true", "avx512"), (AVX2, "bf16-mixed", "avx2_fma"), (AVX2, "32-true", "avx2_fma"),
    ({}, "32-true", "sse")])
def test_the_instruction_set_comes_from_the_flags_and_the_precision(features, precision,
                                                                    expected):
    assert cpu_isa(features, precision)[1] == expected


def test_the_nominal_peak_follows_the_flags_not_the_vendor_name():
    catalog = load_catalog()
    base = machine()
    peaks = {}
    for vendor in ("AMD EPYC 9R14", "Intel(R) Xeon(R) Platinum 8581C"):
        for name, features in (("amx", AMX), ("zen4", ZEN4), ("avx2", AVX2)):
            cpu = replace(base.cpu, model=vendor, features=features, cores=2,
                          frequency_mhz=2000.0)
            for precision in ("32-true", "bf16-mixed"):
                peak, _ = cpu_peak_flops(replace(base, cpu=cpu), catalog, None, precision)
                peaks[vendor, name, precision] = peak
    for (_vendor, name, precision), peak in peaks.items():
        assert peak == peaks["AMD EPYC 9R14", name, precision]  # the name changes nothing
    assert peaks["AMD EPYC 9R14", "avx2", "32-true"] == 2 * 2e9 * 32
    assert peaks["AMD EPYC 9R14", "zen4", "bf16-mixed"] == 2 * 2e9 * 128
    assert peaks["AMD EPYC 9R14", "amx", "bf16-mixed"] == 2 * 2e9 * 1024
    assert peaks["AMD EPYC 9R14", "avx2", "bf16-mixed"] == peaks["AMD EPYC 9R14", "avx2",
                                                                "32-true"]


def test_every_instruction_set_has_an_efficiency_so_bf16_is_not_timed_at_the_fp32_peak():
    catalog = load_catalog()
    for isa in ("avx512", "avx512_bf16", "amx_bf16"):
        assert catalog.efficiency[f"cpu_{isa}"] is not None, isa
    assert catalog.efficiency["cpu_fp32"] is not None


class Wide(torch.nn.Module):
    """Activations of B x 4096 floats per layer: 16 KiB per example and layer."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.Sequential(*(torch.nn.Sequential(torch.nn.Linear(256, 4096),
                                                                torch.nn.GELU(),
                                                                torch.nn.Linear(4096, 256))
                                            for _ in range(3)))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.layers(features)


def _batch(size: int) -> dict[str, torch.Tensor]:
    return {"features": torch.randn(size, 256), "labels": torch.zeros(size, dtype=torch.long)}


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"),
                    reason="the resident-memory peak is reset through /proc (Linux)")
def test_the_probe_measures_more_memory_for_a_bigger_batch_and_leaves_the_weights():
    from entrena.hardware.allocator import configure_allocator

    configure_allocator()
    torch.manual_seed(0)
    model = Wide()
    before = [p.detach().clone() for p in model.parameters()]
    small = measure_step_memory(model, _batch(64), _batch(128), device="cpu",
                                precision="32-true")
    large = measure_step_memory(model, _batch(1024), _batch(2048), device="cpu",
                                precision="32-true")
    # 960 more examples x 3 layers x (4096 GELU input + 4096 GELU output) x 4 bytes ~ 90 MiB
    # of saved activations; the gradients (~25 MiB) are in both.
    assert large["train_step_bytes"] - small["train_step_bytes"] > 60 * 2**20
    assert large["eval_step_bytes"] > small["eval_step_bytes"]
    assert large["train_step_bytes"] > large["eval_step_bytes"]  # no graph kept in evaluation
    assert large["train_shape"] == [1024, 1] and large["eval_shape"] == [2048, 1]
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert all(p.grad is None for p in model.parameters())


def test_a_measured_step_replaces_the_modelled_terms_on_a_cpu(tiny_profile):
    kwargs = dict(batch_size=16, tokens=64, device="cpu", precision="32-true",
                  base_bytes=1e9, weights_in_base=True)
    modelled = training_memory(tiny_profile, **kwargs)
    measured = training_memory(tiny_profile, measured=(3e8, 5e8), **kwargs)
    states = measured.weights_bytes + measured.optimizer_bytes
    # the process, the best-weights copy, AdamW's states and the larger measured rise
    assert measured.peak_bytes == pytest.approx(1e9 + states + 5e8)
    assert measured.peak_bytes != modelled.peak_bytes


def test_an_earlier_fits_peak_raises_the_measured_plan_never_lowers_it(tiny_profile):
    kwargs = dict(batch_size=16, tokens=64, device="cpu", precision="32-true",
                  base_bytes=1e9, weights_in_base=True, measured=(3e8, 5e8))
    step = training_memory(tiny_profile, **kwargs)
    grown = training_memory(tiny_profile, fit_above_base=2e9, **kwargs)
    assert grown.peak_bytes == pytest.approx(1e9 + 2e9)
    assert grown.overhead_bytes - step.overhead_bytes == pytest.approx(grown.peak_bytes
                                                                       - step.peak_bytes)
    small = training_memory(tiny_profile, fit_above_base=1e6, **kwargs)
    assert small.peak_bytes == step.peak_bytes and small.overhead_bytes == step.overhead_bytes


def test_the_fits_peak_is_kept_beside_the_cached_step_memory(tmp_path):
    import json

    from entrena.planning.caches import cached_memory, record_fit_peak

    path = tmp_path / "memory-x.json"
    path.write_text(json.dumps({"train_step_bytes": 1.0, "eval_step_bytes": 2.0,
                                "memory_shapes": {"train": [2, 8], "eval": None}}))
    assert cached_memory(path, "cpu", "32-true", 5.0).fit_peak_above_base_bytes is None
    record_fit_peak(path, 300.0)
    record_fit_peak(path, 100.0)  # a smaller fit keeps the larger figure
    cached = cached_memory(path, "cpu", "32-true", 5.0)
    assert cached.fit_peak_above_base_bytes == 300.0 and cached.train_step_bytes == 1.0
    record_fit_peak(tmp_path / "absent.json", 1.0)  # no entry: nothing written, no error
    assert not (tmp_path / "absent.json").exists()


@pytest.fixture(scope="module")
def tiny_profile():
    from conftest import TINY_ARCHITECTURE
    from entrena.planning.model import profile_model
    from entrena.tasks.text.model import meta_classifier

    return profile_model(meta_classifier(num_labels=2, pretrained=None,
                                         architecture=TINY_ARCHITECTURE, vocab_size=30522,
                                         pad_token_id=0), 64)


def test_the_allocator_setting_takes_on_glibc_linux():
    import platform

    from entrena.hardware.allocator import configure_allocator

    expected = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"
    assert configure_allocator() is expected
