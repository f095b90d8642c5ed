"""Length-grouped batching, per-batch padding, the ``auto`` length and the encoding cache."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from entrena.config.models import resolve_model_name
from entrena.data.batching import (
    group_by_length,
    pad_batch,
    padded_width,
    padding_fraction,
    random_batches,
    sequential_batches,
)
from entrena.data.encoding import choose_max_length, encode_texts
from entrena.data.loaders import TextBatches


def skewed_lengths(n: int = 1000, seed: int = 0) -> list[int]:
    """Token lengths like real reviews: mostly short, a long tail."""
    rng = np.random.default_rng(seed)
    return (rng.lognormal(mean=4.0, sigma=0.8, size=n).astype(int) + 3).tolist()


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(resolve_model_name("minilm-l6"))


# --- group_by_length -----------------------------------------------------------------------

@pytest.mark.parametrize(("n", "batch_size", "factor"), [(1000, 32, 50), (101, 8, 2), (5, 8, 50),
                                                         (0, 4, 50)])
def test_group_by_length_uses_every_index_exactly_once(n, batch_size, factor):
    lengths = skewed_lengths(n)
    batches = group_by_length(lengths, batch_size, seed=0, megabatch_factor=factor)
    flat = [i for batch in batches for i in batch]
    assert sorted(flat) == list(range(n))
    assert all(1 <= len(batch) <= batch_size for batch in batches)


def test_group_by_length_is_seeded():
    lengths = skewed_lengths()
    assert group_by_length(lengths, 16, seed=3) == group_by_length(lengths, 16, seed=3)
    assert group_by_length(lengths, 16, seed=3) != group_by_length(lengths, 16, seed=4)


def test_group_by_length_pads_less_than_random_batches():
    lengths = skewed_lengths()
    grouped = padding_fraction(lengths, group_by_length(lengths, 32, seed=0))
    shuffled = padding_fraction(lengths, random_batches(len(lengths), 32, seed=0))
    assert shuffled > 0.3
    assert grouped < shuffled / 4


def test_group_by_length_shuffles_batch_order():
    lengths = list(range(1, 641))
    batches = group_by_length(lengths, 8, seed=0, megabatch_factor=80)  # one mega-batch
    longest = [max(lengths[i] for i in batch) for batch in batches]
    assert longest != sorted(longest, reverse=True)


def test_group_by_length_rejects_zero_batch_size():
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        group_by_length([3, 4], 0, seed=0)


def test_padding_fraction_by_hand():
    assert padding_fraction([2, 4, 4, 4], [[0, 1], [2, 3]]) == pytest.approx(1 - 14 / 16)
    assert padding_fraction([3, 3], [[0, 1]]) == 0.0
    assert padding_fraction([], []) == 0.0


def test_sequential_batches_sorted_longest_first():
    batches = sequential_batches([1, 5, 3, 4, 2], 2)
    assert batches == [[1, 3], [2, 4], [0]]
    assert sequential_batches([1, 5, 3], 2, sort_by_length=False) == [[0, 1], [2]]


# --- padding -------------------------------------------------------------------------------

def test_pad_batch_shapes_and_mask():
    ids, mask = pad_batch([np.array([5, 6, 7]), np.array([8]), np.array([9, 10])], pad_id=0)
    assert ids.shape == mask.shape == (3, 3)
    assert ids.dtype == mask.dtype == np.int64
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0], [9, 10, 0]]
    assert mask.tolist() == [[1, 1, 1], [1, 0, 0], [1, 1, 0]]


def test_pad_batch_uses_the_pad_id():
    ids, mask = pad_batch([np.array([1, 2]), np.array([3])], pad_id=99)
    assert ids[1, 1] == 99 and mask[1, 1] == 0


def test_pad_batch_rounds_the_width_up_to_a_multiple():
    ids, mask = pad_batch([np.array([5, 6, 7]), np.array([8])], pad_id=0, multiple=4)
    assert ids.tolist() == [[5, 6, 7, 0], [8, 0, 0, 0]]
    assert mask.tolist() == [[1, 1, 1, 0], [1, 0, 0, 0]]
    assert pad_batch([np.arange(8)], pad_id=0, multiple=4)[0].shape == (1, 8)  # already one
    assert [padded_width(n, 32) for n in (1, 32, 33, 64)] == [32, 32, 64, 64]
    assert padded_width(7, 1) == 7


def test_padded_width_never_exceeds_the_limit_nor_cuts_a_sequence():
    assert [padded_width(n, 16, 40) for n in (1, 17, 33, 40)] == [16, 32, 40, 40]
    assert padded_width(45, 16, 40) == 45  # longer than the limit: never cut
    assert padded_width(np.array([1, 17, 33]), 16, 40).tolist() == [16, 32, 40]
    ids, mask = pad_batch([np.arange(1, 34)], pad_id=0, multiple=16, limit=40)
    assert ids.shape == (1, 40) and int(mask.sum()) == 33


# --- choose_max_length ---------------------------------------------------------------------

def test_choose_max_length_rounds_quantile_up_to_multiple_of_8():
    lengths = np.arange(1, 101)  # 95th percentile: 95.05 -> 96
    assert choose_max_length(lengths, model_limit=512) == 96
    assert choose_max_length(np.full(10, 17), model_limit=512) == 24


def test_choose_max_length_is_capped_and_floored():
    assert choose_max_length(np.full(10, 2000), model_limit=512) == 512
    assert choose_max_length(np.full(10, 2), model_limit=512) == 8
    assert choose_max_length(np.array([], dtype=int), model_limit=512) == 128
    assert choose_max_length(np.array([], dtype=int), model_limit=64) == 64


# --- the encoding cache and truncation -----------------------------------------------------

TEXTS = ["great coffee, would buy again", "stale", "the box arrived broken and the bag was "
         "torn open, so half of the coffee was all over the other items in the order"]


def test_encoding_cache_second_call_reads_the_cache(tokenizer, tmp_path):
    first, cached = encode_texts(TEXTS, tokenizer, 512, tmp_path / "cache")
    assert cached is False
    assert len(list((tmp_path / "cache").glob("*.arrow"))) == 1
    second, cached = encode_texts(TEXTS, tokenizer, 512, tmp_path / "cache")
    assert cached is True
    assert len(second) == len(TEXTS)
    for i in range(len(TEXTS)):
        assert second.get(i).tolist() == first.get(i).tolist()
    expected = tokenizer(TEXTS[0])["input_ids"]
    assert first.get(0).tolist() == expected


def test_encoding_cache_key_changes_with_texts(tokenizer, tmp_path):
    encode_texts(TEXTS, tokenizer, 512, tmp_path)
    _, cached = encode_texts(TEXTS[:2], tokenizer, 512, tmp_path)
    assert cached is False


def test_damaged_cache_file_is_rebuilt(tokenizer, tmp_path):
    encode_texts(TEXTS, tokenizer, 512, tmp_path)
    (file,) = tmp_path.glob("*.arrow")
    file.write_bytes(b"not an arrow file")
    encoded, cached = encode_texts(TEXTS, tokenizer, 512, tmp_path)
    assert cached is False and len(encoded) == 3


def test_truncation_keeps_the_final_sep(tokenizer):
    encoded, _ = encode_texts(TEXTS, tokenizer, 512, None)
    full = encoded.get(2)
    assert len(full) > 10
    cut = encoded.get(2, max_length=8)
    assert len(cut) == 8
    assert cut[0] == tokenizer.cls_token_id
    assert cut[-1] == tokenizer.sep_token_id
    assert cut[:7].tolist() == full[:7].tolist()
    assert encoded.get(1, max_length=8).tolist() == encoded.get(1).tolist()  # short: unchanged
    assert encoded.lengths(8).tolist() == [min(8, n) for n in encoded.lengths().tolist()]


def test_text_batches_collate_pads_to_longest_in_batch(tokenizer):
    encoded, _ = encode_texts(TEXTS, tokenizer, 512, None)
    source = TextBatches(encoded, np.array([1, 0, 0]), max_length=12, batch_size=2,
                         pad_id=tokenizer.pad_token_id, shuffle=False)
    plan = source.plan(0)
    assert plan == [[2, 0], [1]]  # evaluation order: longest first
    batch = source.collate([0, 1])
    assert batch["input_ids"].shape == batch["attention_mask"].shape
    assert batch["input_ids"].shape[1] == len(encoded.get(0))  # padded to the longer one only
    assert batch["labels"].tolist() == [1, 0]
    assert batch["input_ids"].dtype == torch.int64
    assert int(batch["attention_mask"][1].sum()) == len(encoded.get(1))
    assert source.collate([2])["input_ids"].shape == (1, 12)


def test_training_plan_changes_each_epoch_but_is_reproducible(tokenizer):
    texts = [" ".join(["word"] * (i % 17 + 1)) for i in range(64)]
    encoded, _ = encode_texts(texts, tokenizer, 512, None)

    def source():
        return TextBatches(encoded, np.zeros(64), max_length=32, batch_size=8, pad_id=0,
                           shuffle=True, seed=5)

    assert source().plan(0) != source().plan(1)
    assert source().plan(1) == source().plan(1)


def test_text_batches_pad_to_a_multiple_up_to_max_length(tokenizer):
    encoded, _ = encode_texts(TEXTS, tokenizer, 512, None)
    source = TextBatches(encoded, np.array([1, 0, 0]), max_length=12, batch_size=2,
                         pad_id=tokenizer.pad_token_id, shuffle=False, pad_to_multiple_of=8)
    assert len(encoded.get(1)) < 8 and source.collate([1])["input_ids"].shape == (1, 8)
    assert len(encoded.get(0)) == 8 and source.collate([0, 1])["input_ids"].shape == (2, 8)
    assert source.collate([2])["input_ids"].shape == (1, 12)  # 16 capped at max_length


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_text_batches_padded_to_a_multiple_give_the_same_loss_and_gradients(tokenizer,
                                                                             pooling):
    from conftest import TINY_ARCHITECTURE
    from entrena.tasks.text.model import build_classifier

    texts = [" ".join(["word"] * n) for n in (3, 9, 14, 5)]
    encoded, _ = encode_texts(texts, tokenizer, 512, None)
    kwargs = dict(max_length=64, batch_size=4, pad_id=tokenizer.pad_token_id, shuffle=False)
    tight = TextBatches(encoded, np.array([0, 1, 1, 0]), **kwargs).collate([0, 1, 2, 3])
    wide = TextBatches(encoded, np.array([0, 1, 1, 0]), pad_to_multiple_of=32,
                       **kwargs).collate([0, 1, 2, 3])
    assert tight["input_ids"].shape[1] % 32 and wide["input_ids"].shape[1] == 32
    torch.manual_seed(0)
    model = build_classifier(num_labels=2, pretrained=None,
                             architecture=dict(TINY_ARCHITECTURE),
                             vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                             pooling=pooling, dropout=0.0, attention_dropout=0.0)
    model.eval()  # hidden-state dropout draws one mask per shape; gradients flow all the same

    def loss_and_grads(batch):
        model.zero_grad()
        logits = model(batch["input_ids"], batch["attention_mask"])
        loss = torch.nn.functional.cross_entropy(logits, batch["labels"])
        loss.backward()
        return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()
                                 if p.grad is not None}

    logits_tight, grads_tight = loss_and_grads(tight)
    logits_wide, grads_wide = loss_and_grads(wide)
    torch.testing.assert_close(logits_wide, logits_tight, rtol=1e-5, atol=1e-6)
    for name, grad in grads_tight.items():
        torch.testing.assert_close(grads_wide[name], grad, rtol=1e-4, atol=1e-6, msg=name)
