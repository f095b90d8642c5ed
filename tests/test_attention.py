"""model.attn_implementation: the per-batch attention kernel of a text encoder on a CPU."""

from __future__ import annotations

import copy
import json

import pytest
import torch
import torch.nn.functional as F

from conftest import TINY_ARCHITECTURE
from entrena.engine import attention
from entrena.engine.attention import (
    ATTENTION_NAME,
    apply_attention,
    eager_attention,
    eager_up_to,
    measure_eager_up_to,
)


def _tiny_classifier():
    from entrena.tasks.text.model import build_classifier

    torch.manual_seed(0)
    return build_classifier(num_labels=2, pretrained=None, architecture=dict(TINY_ARCHITECTURE),
                            vocab_size=100, pad_token_id=0, pooling="mean", dropout=0.0,
                            attention_dropout=0.0)


def _batch(tokens: int, rows: int = 3) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(tokens)
    ids = torch.randint(1, 100, (rows, tokens), generator=generator)
    mask = torch.ones(rows, tokens, dtype=torch.long)
    mask[1, tokens // 2:] = 0  # one padded row
    return {"input_ids": ids * mask, "attention_mask": mask}


@pytest.mark.parametrize("boolean", [True, False])
def test_the_unfused_products_compute_what_sdpa_computes(boolean):
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 7, 8, generator=generator, requires_grad=True)
               for _ in range(3))
    keep = torch.ones(2, 1, 7, 7, dtype=torch.bool)
    keep[1, ..., 4:] = False
    mask = keep if boolean else torch.zeros(2, 1, 7, 7).masked_fill(~keep, float("-inf"))
    fused = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    grads = torch.autograd.grad(fused.square().sum(), (q, k, v))
    unfused = eager_attention(q, k, v, mask)  # (B, T, heads, head_dim)
    assert unfused.shape == (2, 7, 3, 8)
    assert torch.allclose(unfused.transpose(1, 2), fused, atol=1e-5)
    for mine, theirs in zip(torch.autograd.grad(unfused.square().sum(), (q, k, v)), grads,
                            strict=True):
        assert torch.allclose(mine, theirs, atol=1e-4)


def test_the_unfused_products_compute_grouped_and_causal_attention():
    """A decoder's shapes: 4 query heads on 2 key heads; causal without a mask (as sdpa's
    is_causal), and after a cache's keys (5 queries on 7 keys, aligned to the end)."""
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 7, 8, generator=generator, requires_grad=True)
    k, v = (torch.randn(2, 2, 7, 8, generator=generator, requires_grad=True) for _ in range(2))
    fused = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    unfused = eager_attention(q, k, v, None, causal=True).transpose(1, 2)
    assert torch.allclose(unfused, fused, atol=1e-5)
    for mine, theirs in zip(torch.autograd.grad(unfused.square().sum(), (q, k, v)),
                            torch.autograd.grad(fused.square().sum(), (q, k, v)), strict=True):
        assert torch.allclose(mine, theirs, atol=1e-4)
    last = q[:, :, 2:].detach()
    after_cache = torch.ones(5, 7, dtype=torch.bool).tril(2)
    expected = F.scaled_dot_product_attention(last, k, v, attn_mask=after_cache,
                                              enable_gqa=True)
    assert torch.allclose(eager_attention(last, k, v, None, causal=True).transpose(1, 2),
                          expected, atol=1e-5)


def _tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2,
                                        intermediate_size=64, max_position_embeddings=64))


@pytest.mark.parametrize("padded", [True, False])
def test_auto_trains_a_decoder_unfused_too(monkeypatch, tmp_path, padded):
    """A causal LM with grouped-query attention (the llm-sft task's models): measured at its
    own shape, and the same logits and gradients as transformers' sdpa, with a padding mask
    and without one (where transformers passes no mask and sdpa runs is_causal)."""
    measured, calls = [], []
    monkeypatch.setattr(attention, "measure_eager_up_to", lambda *a, **k: (
        measured.append((a, k["kv_heads"], k["causal"])) or (16, [[16, 2.0, 1.0]])))
    real = attention.eager_attention
    monkeypatch.setattr(attention, "eager_attention",
                        lambda *a, **k: calls.append(k["causal"]) or real(*a, **k))
    model = _tiny_llama()
    reference = copy.deepcopy(model)
    note = apply_attention(model, "auto", device="cpu", precision="32-true", batch_size=2,
                           max_length=16, threads=1, cache_dir=tmp_path)
    assert "up to 16 tokens" in note and measured == [((4, 8, torch.float32), 2, True)]
    assert eager_up_to(model, "32-true") == 16
    ids = torch.randint(1, 100, (2, 12), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, 12, dtype=torch.long)
    if padded:
        mask[1, 8:] = 0
    out = model(input_ids=ids, attention_mask=mask).logits
    expected = reference(input_ids=ids, attention_mask=mask).logits
    assert len(calls) == 2  # both layers took the unfused products
    keep = mask.bool()
    assert torch.allclose(out[keep], expected[keep], atol=1e-5)
    out[keep].square().sum().backward()
    expected[keep].square().sum().backward()
    for mine, theirs in zip(model.parameters(), reference.parameters(), strict=True):
        assert torch.allclose(mine.grad, theirs.grad, atol=1e-4)


def test_a_decoder_under_autocast_takes_the_unfused_products(monkeypatch, tmp_path):
    """Under bf16 autocast a decoder's rotary embedding hands fp32 queries and keys with bf16
    values to attention: the choice follows autocast's dtype (the measured one), not the
    queries' (which once sent every batch of the LLM demo to sdpa)."""
    monkeypatch.setattr(attention, "measure_eager_up_to", lambda *a, **k: (16, []))
    calls = []
    real = attention.eager_attention
    monkeypatch.setattr(attention, "eager_attention",
                        lambda *a, **k: calls.append(a[0].dtype) or real(*a, **k))
    model = _tiny_llama()
    reference = copy.deepcopy(model)
    apply_attention(model, "auto", device="cpu", precision="bf16-mixed", batch_size=2,
                    max_length=16, threads=1, cache_dir=tmp_path)
    ids = torch.randint(1, 100, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(input_ids=ids).logits
        expected = reference(input_ids=ids).logits
    assert calls == [torch.float32] * 2  # both layers, though the queries are fp32
    assert torch.allclose(out.float(), expected.float(), atol=0.05)


def test_auto_trains_short_batches_unfused_and_the_rest_fused(monkeypatch, tmp_path):
    monkeypatch.setattr(attention, "measure_eager_up_to",
                        lambda *a, **k: (16, [[16, 2.0, 1.0], [32, 2.0, 3.0]]))
    calls = []
    real = attention.eager_attention
    monkeypatch.setattr(attention, "eager_attention",
                        lambda *a, **k: calls.append(a[0].shape[-2]) or real(*a, **k))
    model = _tiny_classifier()
    reference = copy.deepcopy(model)  # transformers' default: sdpa
    note = apply_attention(model, "auto", device="cpu", precision="32-true", batch_size=3,
                           max_length=32, threads=1, cache_dir=tmp_path)
    assert "up to 16 tokens" in note
    assert model.encoder.config._attn_implementation == ATTENTION_NAME
    assert reference.encoder.config._attn_implementation == "sdpa"
    assert eager_up_to(model, "32-true") == 16 and eager_up_to(reference, "32-true") == 0
    assert eager_up_to(model, "bf16-mixed") == 0  # measured in fp32 only

    short, long = _batch(12), _batch(24)
    model.eval(), reference.eval()  # no hidden-state dropout; gradients stay on
    out, expected = model(**short), reference(**short)
    assert calls == [12] * TINY_ARCHITECTURE["num_hidden_layers"]
    assert torch.allclose(out, expected, atol=1e-5)
    out.sum().backward()
    expected.sum().backward()
    for mine, theirs in zip(model.parameters(), reference.parameters(), strict=True):
        assert torch.allclose(mine.grad, theirs.grad, atol=1e-4)
    calls.clear()
    model(**long)  # longer than measured: sdpa
    with torch.no_grad():
        model(**short)  # no gradients (evaluation, prediction): sdpa
    assert calls == []


def test_the_measurement_is_cached_per_machine_and_shape(monkeypatch, tmp_path):
    measured = []

    def fake(heads, head_dim, dtype, *, batch, lengths, kv_heads, causal):
        assert kv_heads == heads and not causal  # BERT: one key head a query head, no mask
        measured.append((heads, head_dim, batch, lengths))
        return 64, [[32, 2.0, 1.0], [64, 2.0, 1.0], [96, 1.0, 2.0]]

    monkeypatch.setattr(attention, "measure_eager_up_to", fake)
    for _ in range(2):
        apply_attention(_tiny_classifier(), "auto", device="cpu", precision="bf16-mixed",
                        batch_size=64, max_length=100, threads=2, cache_dir=tmp_path)
    assert measured == [(2, 16, 32, (32, 48, 64, 96, 100))]  # batch capped, once
    entry, = json.loads((tmp_path / attention.CACHE_FILE).read_text()).values()
    assert entry["eager_up_to"] == 64 and entry["timings_ms"][2] == [96, 1.0, 2.0]
    apply_attention(_tiny_classifier(), "auto", device="cpu", precision="32-true",
                    batch_size=64, max_length=100, threads=2, cache_dir=tmp_path)
    assert len(measured) == 2  # another dtype is another measurement


def test_the_measurement_stops_where_the_fused_kernel_wins(monkeypatch):
    times = {32: (2.0, 1.0), 64: (2.0, 1.7), 128: (2.0, 1.9), 256: (2.0, 1.0)}
    seen = []

    def fake(q, k, v, mask, grad):
        seen.append(q.shape[-2])
        assert q.dtype == torch.float32 and q.shape == (2, 2, q.shape[-2], 4)
        assert mask.shape == (2, 1, q.shape[-2], q.shape[-2]) and not mask[..., -1].any()
        return times[q.shape[-2]]

    monkeypatch.setattr(attention, "_time_both", fake)
    up_to, rows = measure_eager_up_to(2, 4, torch.float32, batch=2, lengths=(32, 64, 128, 256))
    assert up_to == 64  # 128: within the 10% margin, so the fused kernel keeps it
    assert seen == [32, 64, 128] and rows == [[32, 2.0, 1.0], [64, 2.0, 1.7], [128, 2.0, 1.9]]


def test_the_measurement_really_times_both_kernels():
    up_to, rows = measure_eager_up_to(2, 8, torch.float32, batch=2, lengths=(16,))
    assert up_to in (0, 16) and rows[0][0] == 16 and rows[0][1] > 0 and rows[0][2] > 0


def test_named_settings_and_other_devices(tmp_path, monkeypatch):
    monkeypatch.setattr(attention, "measure_eager_up_to",
                        lambda *a, **k: pytest.fail("measured off a CPU"))
    model = _tiny_classifier()
    assert apply_attention(model, "auto", device="cuda", precision="bf16-mixed", batch_size=8,
                           max_length=64, threads=1, cache_dir=tmp_path).endswith("off a CPU)")
    assert model.encoder.config._attn_implementation == "sdpa"
    apply_attention(model, "eager", device="cpu", precision="32-true", batch_size=8,
                    max_length=64, threads=1, cache_dir=tmp_path)
    assert model.encoder.config._attn_implementation == "eager"
    assert apply_attention(torch.nn.Linear(2, 2), "auto", device="cpu", precision="32-true",
                           batch_size=8, max_length=64, threads=1, cache_dir=tmp_path) is None


def test_a_saved_model_loads_with_transformers_default(monkeypatch, tmp_path):
    from transformers import AutoModel

    monkeypatch.setattr(attention, "measure_eager_up_to", lambda *a, **k: (16, []))
    model = _tiny_classifier()
    apply_attention(model, "auto", device="cpu", precision="32-true", batch_size=3,
                    max_length=32, threads=1, cache_dir=tmp_path)
    model.encoder.save_pretrained(tmp_path / "saved")
    saved = json.loads((tmp_path / "saved" / "config.json").read_text())
    assert not [key for key in saved if "attn" in key]
    assert AutoModel.from_pretrained(tmp_path / "saved").config._attn_implementation == "sdpa"


def test_the_memory_probe_also_measures_the_longest_unfused_batch(monkeypatch):
    from entrena.planning import memory_probe

    model = _tiny_classifier()
    shapes, rises = [], iter([100, 250])

    def fake_rise(device, run):
        run()
        return next(rises)

    original = model.forward
    monkeypatch.setattr(model, "forward", lambda **inputs: shapes.append(
        tuple(inputs["input_ids"].shape)) or original(**inputs))
    monkeypatch.setattr(memory_probe, "_rise", fake_rise)
    batch = {**_batch(40), "labels": torch.tensor([0, 1, 0])}
    measured = memory_probe.measure_step_memory(model, batch, None, device="cpu",
                                                precision="32-true", also_at_tokens=16)
    assert shapes == [(3, 40), (3, 16)]
    assert measured["train_step_bytes"] == 250 and measured["train_shape"] == [3, 16]


@pytest.mark.parametrize("compiled", [False, True])
def test_a_fit_trains_with_the_measured_kernels(tiny_config, config_file, monkeypatch,
                                                compiled):
    """`entrena train` applies the choice before planning; a compiled model traces through
    the per-length dispatch (dynamo; AOT autograd without inductor's code generation)."""
    from pathlib import Path

    import entrena
    from entrena.recipes import training

    monkeypatch.setattr(attention, "measure_eager_up_to", lambda *a, **k: (24, [[24, 2, 1]]))
    calls = []
    real = attention.eager_attention
    monkeypatch.setattr(attention, "eager_attention",
                        lambda *a, **k: calls.append(a[0].shape[-2]) or real(*a, **k))
    monkeypatch.setattr(training, "compile_model",
                        lambda model: model.compile(backend="aot_eager") or model)
    config = dict(tiny_config, train={**tiny_config["train"], "max_steps": 4,
                                      "precision": "32-true", "compile": compiled})
    result = entrena.train(config_file(config))
    log = (Path("runs") / "tiny" / "train.log").read_text()
    assert "unfused products for training batches up to 24 tokens" in log
    assert result.metrics["fit"]["steps"] == 4
    assert calls and all(tokens <= 24 for tokens in calls)  # traced or run: short ones only
