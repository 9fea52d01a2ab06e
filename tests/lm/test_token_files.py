"""The user's pre-tokenized corpus (``data.source``): windows, splits, shards, resume, bad files."""

import numpy as np
import pytest

from jaxlab.core.config import resolve
from jaxlab.lm.data import (
    ByteLMDataConfig,
    pack_windows,
    split_windows,
    train_dataset,
    train_iterator,
    validation_iterator,
)
from jaxlab.lm.token_files import is_token_file, split_token_windows, write_token_records
from jaxlab.recipes.lm_tiny import LmTinyConfig

SEQ = 7  # windows of 8 tokens
STREAM = (np.arange(8 * 40) * 7919 % 50_000).astype(np.uint32)  # 40 windows, ids above 2**16 too


@pytest.fixture()
def files(tmp_path):
    npy = tmp_path / "tokens.npy"
    np.save(npy, STREAM)
    binary = tmp_path / "tokens.bin"
    STREAM.tofile(binary)
    records = tmp_path / "tokens.array_record"  # 13-id records: windows straddle records
    write_token_records(STREAM, records, dtype=np.uint32, tokens_per_record=13)
    return npy, binary, records


def _cfg(path, **kw):
    return ByteLMDataConfig(
        seq_len=SEQ, batch_size=4, val_fraction=0.1, seed=5, source=str(path), **kw
    )


def _take(it, n):
    return [next(it)["tokens"].copy() for _ in range(n)]


def test_npy_bin_and_array_record_give_the_batches_of_the_packed_stream(files):
    npy, binary, records = files
    windows = pack_windows(STREAM.astype(np.int32), SEQ + 1)
    expected = _take(iter(train_dataset(windows[:36], batch_size=4, seed=5)), 12)
    from_npy = _take(train_iterator(_cfg(npy)), 12)
    from_bin = _take(train_iterator(_cfg(binary, source_dtype="uint32")), 12)
    from_records = _take(train_iterator(_cfg(records), vocab_size=50_000), 12)
    for e, a, b, c in zip(expected, from_npy, from_bin, from_records, strict=True):
        assert a.dtype == c.dtype == np.int32 and a.shape == c.shape == (4, SEQ + 1)
        np.testing.assert_array_equal(a, e)
        np.testing.assert_array_equal(b, e)
        np.testing.assert_array_equal(c, e)
    for path in (npy, records):
        val = np.concatenate(list(b["tokens"] for b in validation_iterator(_cfg(path))))
        np.testing.assert_array_equal(val, windows[36:])


def test_two_hosts_read_disjoint_shards_covering_the_epoch(files):
    train, _ = split_windows(_cfg(files[0]))
    seen = []
    for host in range(2):
        ds = train_dataset(
            train, batch_size=4, seed=5, num_epochs=1, shard_index=host, shard_count=2
        )
        seen += [row.tobytes() for b in ds for row in b["tokens"]]
    assert len(seen) == len(set(seen)) == len(train) == 36


@pytest.mark.parametrize("which", [0, 2], ids=["npy", "array_record"])
def test_resume_continues_with_the_next_unseen_batch(files, which):
    it = train_iterator(_cfg(files[which]))
    _take(it, 3)
    state = it.get_state()
    after = _take(it, 4)
    resumed = train_iterator(_cfg(files[which]))
    resumed.set_state(state)
    np.testing.assert_array_equal(np.stack(_take(resumed, 4)), np.stack(after))


def test_recipe_data_config_selects_the_file(files):
    cfg = resolve(LmTinyConfig, overrides=[f"data.source={files[1]}", "data.source_dtype=uint32"])
    assert cfg.data.source == str(files[1]) and cfg.data.source_dtype == "uint32"


def test_bad_files_are_named(tmp_path, files):
    with pytest.raises(ValueError, match=r"data.source='.*missing.npy': no such file"):
        split_windows(_cfg(tmp_path / "missing.npy"))
    odd = tmp_path / "odd.bin"
    odd.write_bytes(b"\x00" * 7)
    with pytest.raises(ValueError, match=r"odd\.bin: 7 bytes is not a whole number of uint16"):
        split_windows(_cfg(odd))
    flat = tmp_path / "matrix.npy"
    np.save(flat, np.zeros((4, 4), np.int32))
    with pytest.raises(ValueError, match=r"matrix\.npy: holds a int32 array of shape \(4, 4\)"):
        split_windows(_cfg(flat))
    short = tmp_path / "short.npy"
    np.save(short, np.arange(10))
    with pytest.raises(ValueError, match=r"short\.npy: 10 tokens make 1 windows"):
        split_windows(_cfg(short))
    with pytest.raises(ValueError, match=r"tokens\.npy: holds id 49\d+, expected ids in \[0, "):
        split_token_windows(files[0], seq_len=SEQ, val_fraction=0.1, vocab_size=259)
    with pytest.raises(ValueError, match=r"ByteLMDataConfig.source='corpus.txt'"):
        ByteLMDataConfig(source="corpus.txt")
    with pytest.raises(ValueError, match=r"tokens\.array_record: holds id 49\d+, expected ids in"):
        split_token_windows(files[2], seq_len=SEQ, val_fraction=0.1, vocab_size=259)
    from array_record.python.array_record_module import ArrayRecordWriter

    text = tmp_path / "text.array_record"
    writer = ArrayRecordWriter(str(text), "group_size:1")
    writer.write(b"a document, not ids")
    writer.close()
    with pytest.raises(ValueError, match=r"text\.array_record: record 0 is not a token record"):
        split_windows(_cfg(text))
    assert is_token_file(files[2]) and not is_token_file(text)  # how eval --data tells them apart
