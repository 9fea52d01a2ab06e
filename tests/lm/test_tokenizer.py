"""Byte tokenizer: round trip, special ids, errors."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxlab.lm.tokenizer import BOS_ID, EOS_ID, PAD_ID, VOCAB_SIZE, ByteTokenizer
from tests.typecheck import unchecked

TOK = ByteTokenizer()


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_round_trip_any_string(text):
    ids = TOK.encode(text, add_bos=True, add_eos=True)
    assert ids.dtype == np.int32
    assert ids[0] == BOS_ID and ids[-1] == EOS_ID
    assert ids.size == len(text.encode("utf-8")) + 2
    assert ((ids[1:-1] >= 0) & (ids[1:-1] < 256)).all()
    assert TOK.decode(ids) == text


def test_ids_are_utf8_bytes_and_specials_are_dropped():
    np.testing.assert_array_equal(TOK.encode("aé"), [97, 0xC3, 0xA9])
    assert TOK.decode(np.array([BOS_ID, 104, 105, PAD_ID, EOS_ID, 33])) == "hi!"
    assert TOK.decode([104, 105, EOS_ID, 33], stop_at_eos=True) == "hi"
    assert TOK.vocab_size == VOCAB_SIZE == 259
    assert TOK.decode([0xC3]) == "\ufffd"  # invalid UTF-8 from sampling is replaced


def test_bad_input_raises():
    with pytest.raises(ValueError, match="ids range"):
        TOK.decode([1, VOCAB_SIZE])
    with pytest.raises(ValueError, match="ids.shape"):
        unchecked(ByteTokenizer.decode)(TOK, np.zeros((2, 2), np.int32))  # its own validation
    with pytest.raises(ValueError, match="text=bytes"):
        unchecked(ByteTokenizer.encode)(TOK, b"abc")
