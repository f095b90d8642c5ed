"""AdamW as entrena builds it: no decay on 1-D tensors, fused on a CPU."""

from __future__ import annotations

import copy

import torch

from entrena.recipes.training import build_optimizer, fused_optimizer


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16),
                               torch.nn.Linear(16, 2))


def test_fused_adamw_on_a_cpu_takes_the_same_steps_as_the_default():
    assert fused_optimizer("cpu") and not fused_optimizer("cuda") and not fused_optimizer("tpu")
    models = [_model(), None]
    models[1] = copy.deepcopy(models[0])
    optimizers = [build_optimizer(models[0], 1e-2, 0.01, fused=True),
                  build_optimizer(models[1], 1e-2, 0.01)]
    assert optimizers[0].defaults["fused"] is True and not optimizers[1].defaults["fused"]
    decay, no_decay = optimizers[0].param_groups
    assert all(p.ndim == 2 for p in decay["params"]) and no_decay["weight_decay"] == 0.0
    inputs, labels = torch.randn(32, 8), torch.randint(0, 2, (32,))
    for _ in range(5):
        for model, optimizer in zip(models, optimizers, strict=True):
            torch.nn.functional.cross_entropy(model(inputs), labels).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    for fused, plain in zip(models[0].parameters(), models[1].parameters(), strict=True):
        torch.testing.assert_close(fused, plain, rtol=1e-5, atol=1e-6)
    # the state a checkpoint keeps loads into the other implementation
    optimizers[1].load_state_dict(optimizers[0].state_dict())
