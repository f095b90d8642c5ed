"""Frozen weights stored in bfloat16 under bf16-mixed (``entrena.engine.frozen``)."""

from __future__ import annotations

import pytest
import torch

from entrena.engine.frozen import store_frozen_weights

ARCH = {"num_hidden_layers": 2, "hidden_size": 32, "num_attention_heads": 4,
        "num_key_value_heads": 2, "intermediate_size": 64, "vocab_size": 97,
        "tie_word_embeddings": True}


def _lora_model(seed: int = 0):
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    base = LlamaForCausalLM(LlamaConfig(**ARCH))
    return get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear",
                                           init_lora_weights=False))


def _loss(model, ids):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(input_ids=ids).logits
    return torch.nn.functional.cross_entropy(logits[:, :-1].float().flatten(0, 1),
                                             ids[:, 1:].flatten())


def test_frozen_weights_become_bf16_and_the_adapters_stay_float32():
    model = _lora_model()
    note = store_frozen_weights(model, "auto", "bf16-mixed")
    assert note and "bfloat16" in note
    for name, param in model.named_parameters():
        assert param.dtype == (torch.float32 if param.requires_grad else torch.bfloat16), name
    for name, buffer in model.named_buffers():  # rotary frequencies keep their precision
        if buffer.is_floating_point():
            assert buffer.dtype == torch.float32, name
    base = model.get_base_model()
    assert base.lm_head.weight is base.model.embed_tokens.weight  # still tied


def test_the_loss_and_adapter_gradients_match_autocast_of_float32_weights():
    """The matrix products see the same bfloat16 weights; only the activations between them
    are rounded to bfloat16: the loss and gradients agree to bfloat16's precision."""
    ids = torch.randint(0, ARCH["vocab_size"], (3, 12),
                        generator=torch.Generator().manual_seed(1))
    results = []
    for cast in (False, True):
        model = _lora_model()
        if cast:
            store_frozen_weights(model, "auto", "bf16-mixed")
        loss = _loss(model, ids)
        loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
        results.append((float(loss.detach()), grads))
    (plain_loss, plain), (cast_loss, cast) = results
    assert cast_loss == pytest.approx(plain_loss, rel=2e-2)
    assert plain.keys() == cast.keys()
    for name in plain:
        assert cast[name].dtype == torch.float32
        cos = torch.nn.functional.cosine_similarity(plain[name].flatten(), cast[name].flatten(),
                                                    dim=0)
        assert cos > 0.98, name


@pytest.mark.parametrize(("setting", "precision"), [("float32", "bf16-mixed"),
                                                    ("auto", "32-true"),
                                                    ("auto", "16-mixed")])
def test_nothing_is_cast_off_bf16_mixed_or_when_asked_not_to(setting, precision):
    model = _lora_model()
    assert store_frozen_weights(model, setting, precision) is None
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_a_fully_trained_or_quantised_model_is_left_alone():
    trained = torch.nn.Linear(4, 4)
    assert store_frozen_weights(trained, "auto", "bf16-mixed") is None
    quantised = torch.nn.Module()
    quantised.packed = torch.nn.Parameter(torch.zeros(4, dtype=torch.uint8), requires_grad=False)
    quantised.norm = torch.nn.Parameter(torch.ones(4), requires_grad=False)
    assert store_frozen_weights(quantised, "auto", "bf16-mixed") is None
    assert quantised.norm.dtype == torch.float32
