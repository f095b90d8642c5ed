"""How ``task: llm-sft`` lays out training batches: packing (rows without
cross-contamination: each example attends to itself only; the same loss and gradients as
padded batches; the ``data.packing: auto`` rule) and the shared prompt prefix decoded once
per batch (the same loss and gradients as decoding every row whole)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from entrena.data.batching import pack_rows, packed_padding_fraction, padding_fraction
from test_llm_sft import ARCH, chats, prepare, write_jsonl


@pytest.fixture(scope="session")
def smol_tokenizer(pytestconfig) -> str:
    """SmolLM2's tokenizer, from the same pytest cache folder as ``test_llm_sft``'s."""
    from entrena.tasks.llm_sft.sources import resolve_llm_source

    cache = pytestconfig.cache.mkdir("entrena-llm-tokenizer")
    return resolve_llm_source("smollm2-135m", None, cache, tokenizer_only=True)


def test_pack_rows_is_first_fit_decreasing_and_keeps_every_sequence_once():
    assert pack_rows([5, 2, 3, 1, 4]) == [[0], [4, 3], [2, 1]]
    assert pack_rows([3, 3, 3], capacity=6) == [[0, 1], [2]]
    assert pack_rows([]) == []
    rows = pack_rows([7, 1, 6, 2, 5, 3, 4], capacity=8)
    assert sorted(i for row in rows for i in row) == list(range(7))
    assert all(sum([7, 1, 6, 2, 5, 3, 4][i] for i in row) <= 8 for row in rows)
    with pytest.raises(ValueError, match="does not fit"):
        pack_rows([9], capacity=8)


def test_packed_padding_is_never_more_than_padded():
    lengths = [10, 3, 3, 4, 9, 2]
    batches = [[0, 1, 2, 3], [4, 5]]
    assert padding_fraction(lengths, batches) == pytest.approx(1 - 31 / 58)
    assert packed_padding_fraction(lengths, batches) == pytest.approx(1 - 31 / 38)


def _mixed_lengths(n: int) -> list[dict]:
    """Chats whose prompts differ a lot in length (so that packing combines rows)."""
    rows = chats(n)
    for i, row in enumerate(rows):
        row["messages"][0]["content"] += " and more" * (1 + 25 * (i % 3 == 0))
    return rows


def _training_batches(tmp_path, smol_tokenizer, packing: bool):
    """12 chats of mixed lengths, prepared: ``(loaded, task, prepared, training batches)``."""
    write_jsonl(tmp_path / "train.jsonl", _mixed_lengths(12))
    loaded, task, prepared = prepare(tmp_path, smol_tokenizer,
                                     data={"packing": packing, "validation_fraction": 0.2},
                                     model={"max_length": 160})
    return (loaded, task, prepared,
            task.batches(loaded, prepared, "train", batch_size=6, shuffle=True))


def _loss_and_grads(model, batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The loss per target token of ``batch`` and every parameter's gradient."""
    model.zero_grad()
    out = model(**{k: v for k, v in batch.items() if k != "labels"})
    loss = out[:, 0].sum() / out[:, 1].sum()
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def test_a_packed_batch_gives_each_example_its_unpacked_states_loss_and_gradients(
        tmp_path, smol_tokenizer):
    from entrena.tasks.llm_sft.model import build_sft_model

    loaded, task, prepared, source = _training_batches(tmp_path, smol_tokenizer, True)
    assert source.pack
    indices = source.plan(0)[0]
    packed = source.collate(indices)
    source.pack = False
    padded = source.collate(indices)
    assert packed["input_ids"].shape[0] < padded["input_ids"].shape[0]  # rows were combined
    assert packed["input_ids"].shape[1] == padded["input_ids"].shape[1]
    assert torch.equal(packed["labels"], padded["labels"])
    assert int(packed["target_mask"].sum()) == int(padded["target_mask"].sum())

    torch.manual_seed(0)
    model = build_sft_model(pretrained=None, architecture=ARCH, tokenizer=prepared.tokenizer,
                            finetuning="full", lora={}, dropout=0.0, max_new_tokens=2,
                            gradient_checkpointing=False)
    decoder = model.causal_lm.get_decoder()
    with torch.no_grad():
        rows = decoder(input_ids=packed["input_ids"], position_ids=packed["position_ids"],
                       use_cache=False).last_hidden_state
        alone = decoder(input_ids=padded["input_ids"], attention_mask=padded["attention_mask"],
                        use_cache=False).last_hidden_state
    # Each example's hidden states where it was packed equal its padded row's.
    lengths = [len(prepared.splits.train.input_ids[i]) for i in indices]
    starts = (packed["position_ids"] == 0).nonzero().tolist()
    found = 0
    for row, at in starts:
        ids = packed["input_ids"][row, at:]
        for example, length in enumerate(lengths):
            if packed["attention_mask"][row, at] and torch.equal(
                    ids[:length], padded["input_ids"][example, :length]):
                torch.testing.assert_close(rows[row, at:at + length],
                                           alone[example, :length], rtol=1e-4, atol=1e-5)
                found += 1
                break
    assert found == len(indices)

    loss_packed, grads_packed = _loss_and_grads(model, packed)
    loss_padded, grads_padded = _loss_and_grads(model, padded)
    torch.testing.assert_close(loss_packed, loss_padded, rtol=1e-5, atol=1e-6)
    for name in grads_padded:
        torch.testing.assert_close(grads_packed[name], grads_padded[name], rtol=1e-4,
                                   atol=1e-6, msg=name)


@pytest.mark.parametrize("packing", [False, True])
def test_batches_padded_to_a_multiple_give_the_same_loss_and_gradients(
        tmp_path, smol_tokenizer, packing):
    from entrena.tasks.llm_sft.model import build_sft_model

    loaded, task, prepared, source = _training_batches(tmp_path, smol_tokenizer, packing)
    multiple = loaded.config.data.pad_to_multiple_of
    assert multiple > 1 and source.multiple == multiple  # the default pads to a multiple
    indices = source.plan(0)[0]
    wide = source.collate(indices)
    source.multiple = 1
    tight = source.collate(indices)
    longest = max(len(prepared.splits.train.input_ids[i]) for i in indices)
    assert tight["input_ids"].shape[1] == longest and longest % multiple
    assert wide["input_ids"].shape[1] == -(-longest // multiple) * multiple
    for key in ("input_ids", "attention_mask", "target_mask", "position_ids"):
        if key in tight:  # the added columns are padding: masked, no targets
            assert torch.equal(wide[key][:, :longest], tight[key])
    assert not wide["attention_mask"][:, longest:].any()
    assert not wide["target_mask"][:, longest:].any()

    torch.manual_seed(0)
    model = build_sft_model(pretrained=None, architecture=ARCH, tokenizer=prepared.tokenizer,
                            finetuning="full", lora={}, dropout=0.0, max_new_tokens=2,
                            gradient_checkpointing=False)
    loss_wide, grads_wide = _loss_and_grads(model, wide)
    loss_tight, grads_tight = _loss_and_grads(model, tight)
    torch.testing.assert_close(loss_wide, loss_tight, rtol=1e-5, atol=1e-6)
    for name in grads_tight:
        torch.testing.assert_close(grads_wide[name], grads_tight[name], rtol=1e-4, atol=1e-6,
                                   msg=name)


def test_packing_auto_packs_only_when_it_saves_slots(tmp_path, smol_tokenizer):
    from entrena.tasks.llm_sft.task import PACKING_MIN_SAVING, packing_decision

    write_jsonl(tmp_path / "train.jsonl", _mixed_lengths(24))
    loaded, task, prepared = prepare(tmp_path, smol_tokenizer,
                                     data={"validation_fraction": 0.2},
                                     model={"max_length": 160})
    lengths = prepared.splits.train.lengths
    for group in (True, False):
        loaded.config.train.group_by_length = group
        source = task.batches(loaded, prepared, "train", batch_size=6, shuffle=True)
        plan = source.plan(0)
        saving = 1 - (1 - padding_fraction(lengths, plan)) / (
            1 - packed_padding_fraction(lengths, plan))
        assert source.pack == (saving >= PACKING_MIN_SAVING)
    # Random batches of mixed lengths pack; identical lengths never do.
    assert packing_decision("auto", lengths, [list(range(len(lengths)))])
    assert not packing_decision("auto", np.full(8, 30), [[0, 1, 2, 3], [4, 5, 6, 7]])
    assert not packing_decision(False, lengths, [list(range(len(lengths)))])
    assert not task.batches(loaded, prepared, "validation", batch_size=6, shuffle=False).pack


def test_the_shared_prompt_prefix_decoded_once_gives_the_same_loss_and_gradients(
        tmp_path, smol_tokenizer):
    from entrena.tasks.llm_sft.model import build_sft_model, shared_prefix_length

    _, _, prepared, source = _training_batches(tmp_path, smol_tokenizer, False)
    batch = source.collate(source.plan(0)[0])
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    prefix = shared_prefix_length(batch["input_ids"], batch["target_mask"])
    # The chat template's system turn and "Review: the coffee was", not the varying words.
    assert 20 < prefix < int(batch["target_mask"].argmax(1).min())
    single = {k: v[:1] for k, v in inputs.items()}
    assert shared_prefix_length(single["input_ids"], single["target_mask"]) == 0

    torch.manual_seed(0)
    model = build_sft_model(pretrained=None, architecture=ARCH, tokenizer=prepared.tokenizer,
                            finetuning="lora", lora={"r": 4, "alpha": 8, "dropout": 0.0,
                                                     "target_modules": "all-linear"},
                            dropout=0.0, max_new_tokens=2, gradient_checkpointing=False)
    results = []
    for share in (True, False):
        model.share_prefix = share
        model.zero_grad()
        out = model(**inputs)
        (out[:, 0].sum() / out[:, 1].sum()).backward()
        results.append((out.detach(), {n: p.grad.clone() for n, p in model.named_parameters()
                                       if p.grad is not None}))
    (shared, shared_grads), (whole, whole_grads) = results
    torch.testing.assert_close(shared, whole, rtol=1e-5, atol=1e-5)
    assert shared_grads.keys() == whole_grads.keys() and shared_grads
    for name in whole_grads:
        torch.testing.assert_close(shared_grads[name], whole_grads[name], rtol=1e-4,
                                   atol=1e-6, msg=name)

    # Evaluation (teacher-forced losses, then greedy generation of the rows whose argmax
    # left the reference) and greedy generation from the prompts alone share it too.
    from entrena.tasks.llm_sft.model import _common_prefix, greedy_generate

    model.eval()
    evaluated = []
    for share in (True, False):
        model.share_prefix = share
        with torch.no_grad():
            evaluated.append(model(**inputs))
    torch.testing.assert_close(evaluated[0][:, :2], evaluated[1][:, :2], rtol=1e-5, atol=1e-5)
    assert torch.equal(evaluated[0][:, 2:], evaluated[1][:, 2:])
    prompts = [row[:int(start)] for row, start in
               zip(inputs["input_ids"], inputs["target_mask"].argmax(1), strict=True)]
    assert _common_prefix(prompts) == prefix and _common_prefix(prompts[:1]) == 0
    generated = [greedy_generate(model.lm, prompts, max_new_tokens=4,
                                 eos_token_id=model.eos_token_id,
                                 pad_token_id=model.pad_token_id, share_prefix=share)
                 for share in (True, False)]
    assert torch.equal(generated[0], generated[1])


# --- the task's plan uses the LLM formulas and agrees with `entrena plan --llm` --------------

def test_the_llm_sft_plan_and_plan_llm_agree_for_the_same_settings(tmp_path, smol_tokenizer):
    import json

    from entrena.api import plan_llm
    from entrena.api.planning import plan
    from entrena.tasks.llm_sft.tokenizer import build_tokenizer
    from test_llm_sft import config

    write_jsonl(tmp_path / "train.jsonl", _mixed_lengths(24))
    document = plan(config(tmp_path, smol_tokenizer, model={"max_length": 160}),
                    local_only=True).as_dict()
    assert document["model"]["kind"] == "llm"
    llm = document["llm"]
    settings = llm["settings"]
    assert settings["activation_bytes"] == 4 and settings["logits_positions"] > 0
    shape = {**ARCH, "vocab_size": len(build_tokenizer(smol_tokenizer)), "model_type": "llama",
             "tie_word_embeddings": True}
    (tmp_path / "config.json").write_text(json.dumps(shape), encoding="utf-8")
    same = plan_llm(tmp_path / "config.json", mode=settings["mode"],
                    context=settings["context"], batch_size=settings["batch_size"],
                    lora_rank=settings["lora_rank"],
                    gradient_checkpointing=settings["gradient_checkpointing"],
                    activation_bytes=settings["activation_bytes"],
                    logits_positions=settings["logits_positions"],
                    lora_dropout=settings["lora_dropout"]).as_dict()
    assert same["memory"] == llm["memory"]
    # This machine's plan holds the same activations, weights and adapter states at the
    # longest batch (its other terms are the process, the best-weights copy, temporaries).
    local = document["options"][0]["memory"]
    assert local["tokens"] == settings["context"]
    assert local["activations_bytes"] == pytest.approx(llm["memory"]["activations_bytes"])
    assert (local["weights_bytes"] + local["gradients_bytes"] + local["optimizer_bytes"]
            == pytest.approx(llm["memory"]["weights_bytes"]
                             + llm["memory"]["adapter_and_optimizer_bytes"]))
