"""Byte-level data pipeline: corpus, split, packing, determinism, checkpointable iterator state."""

import collections
import math

import numpy as np
import pytest

from jaxlab.lm.data import (
    ByteLMDataConfig,
    document_split,
    load_corpus,
    pack_windows,
    split_windows,
    token_streams,
    train_dataset,
    train_iterator,
    unigram_entropy,
    validation_iterator,
)
from jaxlab.lm.tokenizer import BOS_ID, EOS_ID, PAD_ID, ByteTokenizer

SEQ = 32
CFG = ByteLMDataConfig(seq_len=SEQ, batch_size=8, val_fraction=0.05, seed=3)


def _take(iterator, n):
    return [next(iterator)["tokens"].copy() for _ in range(n)]


def test_shipped_corpus_loads():
    docs = load_corpus()
    assert len(docs) == 1963
    size = sum(len(d.encode("utf-8")) for d in docs)
    assert 300_000 < size < 600_000
    assert docs[0].startswith("typing\n")
    assert all(d and "\x1e" not in d for d in docs)


def test_batches_are_full_packed_windows():
    it = train_iterator(CFG)
    train_windows, _ = split_windows(CFG)
    rows = {w.tobytes() for w in train_windows}
    for tokens in _take(it, 5):
        assert tokens.shape == (8, SEQ + 1) and tokens.dtype == np.int32
        assert not (tokens == PAD_ID).any()
        assert ((tokens >= 0) & (tokens < 258)).all()
        assert all(row.tobytes() in rows for row in tokens)


def test_pack_windows_is_contiguous_and_drops_the_remainder():
    stream = np.arange(100, dtype=np.int32)
    windows = pack_windows(stream, 33)
    assert windows.shape == (3, 33)
    np.testing.assert_array_equal(windows.reshape(-1), stream[:99])


def test_same_seed_same_batches_other_seed_other_batches():
    a = _take(train_iterator(CFG), 4)
    b = _take(train_iterator(CFG), 4)
    c = _take(train_iterator(ByteLMDataConfig(seq_len=SEQ, batch_size=8, seed=4)), 4)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
    assert any(not np.array_equal(x, z) for x, z in zip(a, c, strict=True))


def test_state_save_restore_resumes_at_the_same_batch():
    it = train_iterator(CFG)
    _take(it, 3)
    state = it.get_state()
    expected = _take(it, 3)
    fresh = train_iterator(CFG)
    fresh.set_state(state)
    for x, y in zip(_take(fresh, 3), expected, strict=True):
        np.testing.assert_array_equal(x, y)


def test_epochs_are_reshuffled_permutations_and_state_crosses_epochs():
    windows = np.arange(10 * 5, dtype=np.int32).reshape(10, 5)
    ds = train_dataset(windows, batch_size=2, seed=0)
    it = iter(ds)
    epochs = [np.concatenate(_take(it, 5))[:, 0] for _ in range(2)]
    for epoch in epochs:
        np.testing.assert_array_equal(np.sort(epoch), windows[:, 0])
    assert not np.array_equal(epochs[0], epochs[1])
    it = iter(ds)
    _take(it, 4)
    state = it.get_state()
    expected = _take(it, 3)  # crosses into the second epoch
    resumed = iter(ds)
    resumed.set_state(state)
    for x, y in zip(_take(resumed, 3), expected, strict=True):
        np.testing.assert_array_equal(x, y)


def test_finite_epochs_stop():
    windows = np.arange(6 * 3, dtype=np.int32).reshape(6, 3)
    assert len(list(train_dataset(windows, batch_size=2, seed=0, num_epochs=2))) == 6


def test_document_split_is_disjoint_and_complete():
    docs = load_corpus()
    train_idx, val_idx = document_split(len(docs), val_fraction=0.05, seed=0)
    assert len(np.intersect1d(train_idx, val_idx)) == 0
    np.testing.assert_array_equal(np.union1d(train_idx, val_idx), np.arange(len(docs)))
    assert len(val_idx) == round(0.05 * len(docs))
    train, val = token_streams(docs, split="document", val_fraction=0.05, split_seed=0)
    tok = ByteTokenizer()
    expected_val = np.concatenate(
        [tok.encode(docs[i], add_bos=True, add_eos=True) for i in val_idx]
    )
    np.testing.assert_array_equal(val, expected_val)
    assert train.size + val.size == sum(len(d.encode("utf-8")) + 2 for d in docs)
    assert (train == BOS_ID).sum() == len(train_idx) and (val == EOS_ID).sum() == len(val_idx)


def test_region_split_is_disjoint_and_complete():
    docs = load_corpus()[:200]
    train, val = token_streams(docs, split="region", val_fraction=0.1)
    full = np.concatenate([ByteTokenizer().encode(d, add_bos=True, add_eos=True) for d in docs])
    np.testing.assert_array_equal(np.concatenate([train, val]), full)
    assert val.size == full.size - math.floor(0.9 * full.size)


def test_validation_iterator_is_deterministic_and_from_the_val_split():
    first = [b["tokens"] for b in validation_iterator(CFG)]
    second = [b["tokens"] for b in validation_iterator(CFG)]
    _, val_windows = split_windows(CFG)
    assert len(first) == len(val_windows) // 8 > 0
    for x, y in zip(first, second, strict=True):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(np.concatenate(first), val_windows[: len(first) * 8])


def test_host_shards_are_disjoint_halves():
    shards = [
        np.concatenate(_take(train_iterator(CFG, shard_index=i, shard_count=2), 4)) for i in (0, 1)
    ]
    assert shards[0].shape == (16, SEQ + 1)
    rows = [{r.tobytes() for r in s} for s in shards]
    train_windows, _ = split_windows(CFG)
    index = {w.tobytes(): i for i, w in enumerate(train_windows)}
    assert {index[r] % 2 for r in rows[0]} == {0} and {index[r] % 2 for r in rows[1]} == {1}


def test_unigram_entropy_matches_direct_count():
    docs = load_corpus()
    counts = collections.Counter("".join(docs).encode("utf-8"))
    total = sum(counts.values())
    direct = -sum(c / total * math.log(c / total) for c in counts.values())
    assert unigram_entropy(docs) == pytest.approx(direct, rel=1e-12)
    assert 2.5 < direct < math.log(256)
    assert unigram_entropy("abcd" * 10) == pytest.approx(math.log(4))
    assert unigram_entropy(b"aaaa") == 0.0


@pytest.mark.parametrize(
    "field,value",
    [("seq_len", 0), ("batch_size", -1), ("val_fraction", 1.0), ("split", "random"), ("seed", -1)],
)
def test_config_validation_names_the_field(field, value):
    with pytest.raises(ValueError, match=f"ByteLMDataConfig.{field}="):
        ByteLMDataConfig(**{field: value})


def test_bad_batching_raises():
    with pytest.raises(ValueError, match="batch_size=3"):
        train_iterator(ByteLMDataConfig(seq_len=SEQ, batch_size=3), shard_count=2)
    with pytest.raises(ValueError, match="batch_size=100"):
        train_dataset(np.zeros((10, 4), np.int32), batch_size=100, seed=0)
    with pytest.raises(ValueError, match="corpus is empty"):
        unigram_entropy("")
