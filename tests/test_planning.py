"""The planner: meta-device profile, memory terms, batch plan, options, recommendation."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from conftest import TINY_ARCHITECTURE
from entrena.data.batching import group_by_length
from entrena.hardware import CpuInfo, GpuInfo, Machine
from entrena.hardware.catalog import load_catalog
from entrena.planning import (
    epoch_batches,
    largest_batch,
    make_plan,
    profile_model,
    recommend,
    run_shape,
    training_memory,
)
from entrena.planning.model import _measure
from entrena.planning.options import Option
from entrena.planning.recommend import LONG_RUN_S
from entrena.tasks.text.model import build_classifier, meta_classifier
from entrena.units import Budget

GIB = 2**30


@pytest.fixture(scope="module")
def tiny_meta():
    return meta_classifier(num_labels=2, pretrained=None, architecture=TINY_ARCHITECTURE,
                           vocab_size=30522, pad_token_id=0)


@pytest.fixture(scope="module")
def tiny_profile(tiny_meta):
    return profile_model(tiny_meta, 64)


def machine(gpus=(), available=16 * GIB) -> Machine:
    return Machine(
        cpu=CpuInfo(model="Test CPU", cores=4, logical_cores=8, frequency_mhz=3000.0,
                    features={"avx2": True, "fma": True}),
        memory={"total_bytes": 32 * GIB, "available_bytes": available}, gpus=list(gpus),
        gpu_driver={}, mps={"available": False}, tpu={"available": False},
        disk={"path": "/r", "free_bytes": 100 * GIB, "total_bytes": 200 * GIB, "ssd": True},
        torch={"version": "2.14.1", "cuda": None, "build": "cpu", "threads": 4},
        libraries={}, python="3.11", platform="Linux")


def shape_for(profile, n=400, batch_size=16, length=48, **changes):
    rng = np.random.default_rng(0)
    lengths = rng.integers(8, length + 1, size=n)
    kwargs = dict(train_lengths=lengths, eval_lengths=lengths[:100], test_lengths=lengths[:50],
                  profile=profile, batch_size=batch_size, eval_batch_size=2 * batch_size,
                  precision="auto", max_epochs=2, max_steps=None, gradient_accumulation_steps=1,
                  evals_per_epoch=1, devices=1, seed=0, group_by_length=True)
    kwargs.update(changes)
    return run_shape(**kwargs)


# --- the model profile -----------------------------------------------------------------------

def test_meta_model_has_no_storage_and_counts_parameters(tiny_meta, tiny_profile):
    assert all(p.device.type == "meta" for p in tiny_meta.parameters())
    real = build_classifier(num_labels=2, pretrained=None, architecture=TINY_ARCHITECTURE,
                            vocab_size=30522, pad_token_id=0, pooling="mean", dropout=0.1)
    assert tiny_profile.parameters == sum(p.numel() for p in real.parameters())
    assert tiny_profile.trainable_parameters == tiny_profile.parameters
    assert tiny_profile.layers == 2 and tiny_profile.hidden_size == 32


def test_flops_are_linear_plus_quadratic_in_length_with_attention_included(tiny_meta,
                                                                          tiny_profile):
    for tokens in (8, 20, 100):
        measured, _ = _measure(tiny_meta, tokens)
        assert tiny_profile.flops_per_sample(tokens) == pytest.approx(measured, rel=1e-6)
    # Attention's T² term is there, and matches PaLM's 12·L·H·Q per token² (fwd + bwd).
    h = tiny_profile.hidden_size
    assert tiny_profile.flops_quadratic == pytest.approx(12 * tiny_profile.layers * h, rel=1e-6)


def test_meta_saved_bytes_match_a_real_cpu_forward_with_padding(tiny_profile):
    torch.manual_seed(0)
    model = build_classifier(num_labels=2, pretrained=None, architecture=TINY_ARCHITECTURE,
                             vocab_size=30522, pad_token_id=0, pooling="mean", dropout=0.1)
    model.train()
    params = {p.untyped_storage()._cdata for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage._cdata not in params:
            saved[storage._cdata] = storage.nbytes()
        return tensor

    batch, tokens = 4, 40
    ids = torch.randint(1000, 2000, (batch, tokens))
    mask = torch.ones(batch, tokens, dtype=torch.long)
    mask[1:, -5:] = 0  # padded rows, as in real batches
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        model(ids, mask)
    assert sum(saved.values()) == pytest.approx(tiny_profile.cpu_saved_bytes(tokens, batch),
                                                rel=0.01)


# --- memory ------------------------------------------------------------------------------------

def test_model_state_terms_follow_the_precision(tiny_profile):
    p = tiny_profile.parameters
    fp32 = training_memory(tiny_profile, batch_size=8, tokens=32, device="cuda",
                           precision="bf16-mixed")
    assert (fp32.weights_bytes, fp32.gradients_bytes, fp32.optimizer_bytes) == (4 * p, 4 * p,
                                                                                 8 * p)
    pure = training_memory(tiny_profile, batch_size=8, tokens=32, device="cuda",
                           precision="bf16-true")
    assert (pure.weights_bytes, pure.optimizer_bytes) == (2 * p, 4 * p)
    cpu = training_memory(tiny_profile, batch_size=8, tokens=32, device="cpu",
                          precision="32-true", base_bytes=GIB)
    assert cpu.activations_bytes == pytest.approx(tiny_profile.cpu_saved_bytes(32, 8))
    assert cpu.peak_bytes > GIB + cpu.activations_bytes + cpu.optimizer_bytes
    # More samples or longer ones need more memory.
    assert training_memory(tiny_profile, batch_size=16, tokens=32, device="cpu",
                           precision="32-true").peak_bytes > cpu.peak_bytes - GIB


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_divergence_guards_copy_is_counted(tiny_profile, device):
    # One copy of the trainable weights (fp32) and of the AdamW moments: 12 bytes a weight.
    kwargs = dict(batch_size=8, tokens=32, device=device, precision="32-true")
    without = training_memory(tiny_profile, **kwargs)
    with_copy = training_memory(tiny_profile, undo_copy=True, **kwargs)
    extra = 12 * tiny_profile.trainable_parameters
    assert with_copy.peak_bytes - without.peak_bytes == pytest.approx(extra)
    assert with_copy.overhead_bytes - without.overhead_bytes == pytest.approx(extra)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_largest_batch_is_the_boundary(tiny_profile, device):
    capacity = 3 * GIB
    kwargs = dict(tokens=256, device=device, precision="32-true" if device == "cpu"
                  else "bf16-mixed")
    best = largest_batch(tiny_profile, capacity_bytes=capacity, **kwargs)
    assert best > 1
    assert training_memory(tiny_profile, batch_size=best, **kwargs).peak_bytes <= capacity
    assert training_memory(tiny_profile, batch_size=best + 1, **kwargs).peak_bytes > capacity
    assert largest_batch(tiny_profile, capacity_bytes=1, **kwargs) == 0


# --- the batch plan ----------------------------------------------------------------------------

def test_epoch_batches_are_the_loaders_batches():
    lengths = np.random.default_rng(1).integers(4, 200, size=1000)
    plan = epoch_batches(lengths, 32, seed=7)
    assert plan.indices == group_by_length(lengths, 32, 7)
    assert plan.samples == 1000 and plan.longest == int(lengths.max())
    assert plan.tokens.tolist() == [int(lengths[b].max()) for b in plan.indices]
    assert 0 <= plan.padding_fraction < 0.2
    ungrouped = epoch_batches(lengths, 32, seed=7, group_by_length=False)
    assert ungrouped.padding_fraction > plan.padding_fraction


def test_run_shape_counts_epochs_with_max_steps(tiny_profile):
    full = shape_for(tiny_profile)
    assert full.epochs == 2 and full.train.batches == math.ceil(400 / 16)
    capped = shape_for(tiny_profile, max_steps=5)
    assert capped.epochs == pytest.approx(5 / 25)
    assert capped.eval_flops < full.eval_flops


# --- options and recommendation ---------------------------------------------------------------

def test_this_machine_comes_first_and_catalog_offers_follow(tiny_profile):
    catalog = load_catalog(env={})
    shape = shape_for(tiny_profile)
    options, rec = make_plan(profile=tiny_profile, shape=shape, machine=machine(),
                             catalog=catalog, base_rss_bytes=GIB)
    assert options[0].name == "local" and options[0].device == "cpu"
    assert {o.name for o in options[1:]} == set(catalog.offers)
    p5 = next(o for o in options if o.name == "aws-p5.48xlarge")
    assert p5.kind == "cloud" and p5.precision == "bf16-mixed" and p5.count == 8
    assert p5.oversized and any("uses 1 of 8 devices" in n for n in p5.notes)
    assert p5.cost_usd == pytest.approx(p5.total_time_s / 3600 * 55.04)
    t4 = next(o for o in options if o.name == "aws-g4dn.xlarge")
    assert t4.precision == "16-mixed"  # no bf16 on a T4
    gcp = next(o for o in options if o.name == "gcp-t4")
    assert any("host VM is billed on top" in n for n in gcp.notes)
    local_only, _ = make_plan(profile=tiny_profile, shape=shape, machine=machine(),
                              catalog=catalog, local_only=True)
    assert [o.name for o in local_only] == ["local"]


def test_a_local_gpu_is_planned_as_cuda_with_its_catalog_peak(tiny_profile):
    gpu = GpuInfo(index=0, name="NVIDIA H100 80GB HBM3", memory_total_bytes=80 * GIB,
                  memory_free_bytes=79 * GIB, compute_capability="9.0", bf16=True)
    options, _ = make_plan(profile=tiny_profile, shape=shape_for(tiny_profile),
                           machine=machine(gpus=[gpu]), catalog=load_catalog(env={}),
                           local_only=True)
    local = options[0]
    assert local.device == "cuda" and local.precision == "bf16-mixed"
    assert local.total_time_s is not None and "989.40 TFLOP/s" in local.time_source
    on_cpu, _ = make_plan(profile=tiny_profile, shape=shape_for(tiny_profile, accelerator="cpu"),
                          machine=machine(gpus=[gpu]), catalog=load_catalog(env={}),
                          local_only=True)
    assert on_cpu[0].device == "cpu"  # train.accelerator: cpu


def option(name, kind="cloud", fits=True, total=600.0, cost=1.0, spot=None, oversized=False,
           device="cuda"):
    return Option(name=name, kind=kind, description=name, device=device, accelerator=None,
                  count=1, fits=fits, batch_size=32, max_batch_size=64, precision="bf16-mixed",
                  peak_memory_bytes=GIB, memory_capacity_bytes=10 * GIB, memory=None,
                  epoch_time_s=total / 2, total_time_s=total, time_source="test",
                  usd_per_hour=None, usd_per_hour_spot=None, cost_usd=cost, cost_usd_spot=spot,
                  oversized=oversized)


def test_a_cpu_is_enough_when_this_machine_meets_the_deadline():
    local = option("local", kind="local", total=1800, cost=0.0, device="cpu")
    rec = recommend([local, option("gpu-a", total=60, cost=0.5)], deadline_s=3600)
    assert rec.option == "local" and rec.summary == "Train here: a CPU is enough."
    assert any("fastest alternative: gpu-a" in r for r in rec.reasons)


def test_a_tight_deadline_picks_the_cheapest_option_that_meets_it():
    local = option("local", kind="local", total=7200, cost=0.0, device="cpu")
    options = [local, option("slow-cheap", total=5000, cost=0.2),
               option("fast", total=600, cost=2.0), option("faster", total=300, cost=3.0)]
    rec = recommend(options, deadline_s=3600)
    assert rec.option == "fast"
    assert any("this machine would take 2h 00m" in r for r in rec.reasons)


def test_long_runs_get_spot_with_a_checkpoint_interval():
    options = [option("local", kind="local", fits=False, cost=0.0, device="cpu"),
               option("big", total=LONG_RUN_S * 3, cost=30.0, spot=9.0)]
    rec = recommend(options)
    assert rec.option == "big" and rec.spot
    assert any("train.checkpoint.every_minutes: 10" in r for r in rec.reasons)
    assert any("does not fit" in r for r in rec.reasons)


def test_oversized_options_are_skipped_when_a_right_sized_one_qualifies():
    options = [option("local", kind="local", fits=False, cost=0.0, device="cpu"),
               option("huge", total=60, cost=0.05, oversized=True),
               option("right", total=600, cost=0.30)]
    rec = recommend(options)
    assert rec.option == "right"
    assert any("oversized and skipped: huge" in r for r in rec.reasons)


def test_budgets_in_money_or_time_and_nothing_qualifying():
    options = [option("local", kind="local", fits=False, cost=0.0, device="cpu"),
               option("a", total=600, cost=5.0, spot=2.0), option("b", total=300, cost=9.0)]
    assert recommend(options, budget=Budget(usd=3.0)).option == "a"  # spot fits the budget
    assert recommend(options, budget=Budget(seconds=400)).option == "b"
    none = recommend(options, budget=Budget(usd=1.0))
    assert none.option is None and "budget $1.00" in none.summary
    nothing_fits = recommend([replace(o, fits=False) for o in options])
    assert nothing_fits.option is None and nothing_fits.summary.startswith("Nothing fits")
