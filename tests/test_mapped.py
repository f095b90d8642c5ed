"""Trained weights copied out of a checkpoint's memory map (``entrena.engine.mapped``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from entrena.engine.mapped import copy_mapped_weights, file_mappings

linux_maps = pytest.mark.skipif(not Path("/proc/self/maps").exists(),
                                reason="needs /proc/self/maps (Linux)")


def _mapped(tensor: torch.Tensor) -> bool:
    return any(start <= tensor.data_ptr() < end for start, end in file_mappings())


class Tied(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(64, 16)
        self.body = torch.nn.Linear(16, 16)
        self.frozen = torch.nn.Linear(16, 16)
        self.head = torch.nn.Linear(16, 64, bias=False)
        self.head.weight = self.embed.weight  # tied, as a language model's output layer


def _loaded_from_safetensors(tmp_path: Path) -> Tied:
    from safetensors.torch import load_file, save_file

    torch.manual_seed(0)
    source = Tied()
    state = {k: v for k, v in source.state_dict().items() if k != "head.weight"}
    save_file(state, tmp_path / "model.safetensors")
    model = Tied()
    model.load_state_dict(load_file(tmp_path / "model.safetensors"), strict=False, assign=True)
    model.head.weight = model.embed.weight
    model.frozen.requires_grad_(False)
    return model


@linux_maps
def test_trained_weights_leave_the_file_mapping_with_their_values(tmp_path: Path):
    model = _loaded_from_safetensors(tmp_path)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    assert all(_mapped(p) for p in model.parameters())  # the loader maps the file

    note = copy_mapped_weights(model)

    assert note and "memory map" in note
    for name, param in model.named_parameters():
        assert torch.equal(param, before[name]), name
        assert _mapped(param) == (not param.requires_grad), name  # frozen ones stay mapped
    assert model.head.weight is model.embed.weight  # still tied
    assert model.body.weight.requires_grad and not model.frozen.weight.requires_grad


@linux_maps
def test_an_optimizer_step_after_the_copy_leaves_the_file_unchanged(tmp_path: Path):
    from safetensors.torch import load_file

    model = _loaded_from_safetensors(tmp_path)
    copy_mapped_weights(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model.body(model.embed(torch.arange(8))).sum().backward()
    optimizer.step()
    on_disk = load_file(tmp_path / "model.safetensors")
    assert not torch.equal(on_disk["body.weight"], model.body.weight.detach())


def test_nothing_to_copy_for_weights_in_anonymous_memory():
    model = torch.nn.Linear(8, 8)  # built from its config: ordinary memory
    assert copy_mapped_weights(model) is None
    assert copy_mapped_weights(model, ranges=[]) is None


def test_file_mappings_reads_only_file_backed_lines(tmp_path: Path):
    table = tmp_path / "maps"
    table.write_text(
        "7f0000001000-7f0000003000 rw-p 00000000 08:01 42   /models/model.safetensors\n"
        "7f0000000000-7f0000001000 r-xp 00000000 08:01 43   /usr/lib/libc.so.6\n"
        "55d000000000-55d000021000 rw-p 00000000 00:00 0    [heap]\n"
        "7f0000004000-7f0000005000 rw-p 00000000 00:00 0\n")
    assert file_mappings(table) == [(0x7F0000000000, 0x7F0000001000),
                                    (0x7F0000001000, 0x7F0000003000)]
    assert file_mappings(tmp_path / "absent") == []


def test_a_parameter_is_copied_only_when_its_address_is_inside_a_mapping():
    model = torch.nn.Linear(4, 4)
    address, bias_address = model.weight.data_ptr(), model.bias.data_ptr()
    before = model.weight.data
    note = copy_mapped_weights(model, ranges=[(address, address + 1)])
    assert note and model.weight.data.data_ptr() != address
    assert torch.equal(model.weight.data, before)
    assert model.bias.data_ptr() == bias_address  # outside the range: left where it is
