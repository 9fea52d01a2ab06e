"""PCFG corpus: derivations are consistent, rule choices follow the probabilities, batches."""

import numpy as np
import pytest

from jaxlab.core.config import ConfigError
from jaxlab.lm import pcfg


def test_derivations_are_consistent_and_rules_follow_probabilities():
    g = pcfg.layered_grammar()
    assert g.terminals == ("a", "b", "c")
    sents = pcfg.sample(np.random.default_rng(0), g, 3000)
    for s in sents[:200]:
        assert 8 <= len(s.tokens) <= 27
        start, end, sym = s.constituents[0]
        assert (start, end, sym) == (0, len(s.tokens), "S")
        for a, b, _ in s.constituents:
            assert 0 <= a < b <= len(s.tokens)
        assert len(s.rules) == len(s.constituents)
    # the first choice is S's production: chi-square against (0.4, 0.35, 0.25), 2 dof (p=0.001)
    counts = np.bincount([s.rules[0] for s in sents], minlength=3)
    expected = 3000 * np.array([0.4, 0.35, 0.25])
    assert ((counts - expected) ** 2 / expected).sum() < 13.8


def test_arrays_and_batches():
    g = pcfg.layered_grammar()
    sents = pcfg.sample(np.random.default_rng(1), g, 16)
    tokens, lengths = pcfg.to_arrays(sents, 32, pad_id=3)
    assert tokens.shape == (16, 32) and (tokens[0, lengths[0] :] == 3).all()
    bounds = pcfg.boundary_labels(sents, 32, ("X1", "X2", "X3"))
    # every sentence has 2 or 3 level-2 constituents, so 2 or 3 boundaries
    assert set((bounds > 0).sum(1)) <= {2, 3}
    assert (bounds[np.arange(16), lengths - 1] > 0).all()  # the last one ends the sentence
    inputs, masked = pcfg.mlm_batch(np.random.default_rng(2), tokens, lengths, mask_id=4, rate=0.5)
    assert (inputs[masked] == 4).all() and not masked[tokens == 3].any()
    x, y, w = pcfg.autoregressive_batch(tokens, lengths)
    assert x.shape == y.shape == w.shape == (16, 31) and w.sum() == (lengths - 1).sum()


def test_bad_input():
    with pytest.raises(ConfigError, match="rules.S"):
        pcfg.PCFG(rules={"S": ((("a",), 0.5),)})
    with pytest.raises(ConfigError, match="max_len"):
        pcfg.to_arrays(pcfg.sample(np.random.default_rng(0), pcfg.layered_grammar(), 50), 4, 0)
