"""Progressive distillation on a PCFG masked LM: masking, the n-gram and constituent probes on
hand-computable cases, the checkpoint choice, and a tiny teacher + students whose loss falls."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core.config import ConfigError
from jaxlab.lm import distill, pcfg
from jaxlab.lm import pcfg_distill as pd

TASK = pd.MLMTask(n_terminals=3, max_len=28, mask_rate=0.3)


def test_random_layered_grammar_is_layered_and_deterministic():
    g = pcfg.random_layered_grammar(3, symbols_per_level=(1, 2, 2), rules_per_symbol=2)
    assert g == pcfg.random_layered_grammar(3, symbols_per_level=(1, 2, 2), rules_per_symbol=2)
    assert g.terminals == ("t0", "t1", "t2")
    for lhs, options in g.rules.items():
        level = 0 if lhs == "S" else int(lhs[1])
        below = "N2_" if level == 1 else ("t" if level == 2 else "N1_")
        assert len(options) == 2 and all(len(rhs) in (2, 3) for rhs, _ in options)
        assert all(sym.startswith(below) for rhs, _ in options for sym in rhs), (lhs, options)
    with pytest.raises(ConfigError, match="symbols_per_level"):
        pcfg.random_layered_grammar(0, symbols_per_level=(2, 3))


def test_masking_follows_bert_80_10_10():
    tokens = jnp.zeros((400, 28), jnp.int32) + 1
    lengths = jnp.full((400,), 20)
    b = jax.jit(pd.mask_tokens, static_argnums=3)(jax.random.PRNGKey(0), tokens, lengths, TASK)
    w = np.asarray(b.weights, bool)
    assert not w[:, 20:].any() and np.asarray(b.attend)[:, :20].all()
    assert abs(w.mean() * 28 / 20 - 0.3) < 0.02  # 8000 real tokens, rate 0.3
    picked = np.asarray(b.inputs)[w]
    frac_mask = (picked == TASK.mask_id).mean()
    assert abs(frac_mask - 0.8) < 0.03, frac_mask
    assert ((picked == TASK.mask_id) | (picked < 3)).all()  # random replacements are terminals
    np.testing.assert_array_equal(np.asarray(b.inputs)[~w], np.asarray(tokens)[~w])


def _left_neighbour_model(inputs, attend):
    """At every position: one-hot of the token on the left when it is attended, else uniform."""
    left = jnp.roll(inputs, 1, axis=1)
    seen = jnp.roll(attend, 1, axis=1) & (left < 3)
    one_hot = jax.nn.one_hot(jnp.clip(left, 0, 2), 3)
    return jnp.where(seen[..., None], one_hot, jnp.full_like(one_hot, 1 / 3))


def test_ngram_probe_on_a_hand_computable_model():
    tokens = jnp.array([[0, 1, 2, 0, 1, 2, 3, 3], [2, 2, 1, 3, 3, 3, 3, 3]])
    lengths = jnp.array([6, 3])
    # hiding the 3-gram around p removes the left neighbour: one-hot vs uniform, L1 = 2·(1 − 1/3)
    robust = pd.ngram_probe(_left_neighbour_model, tokens, lengths, (2, 4), 1, 4, mode="robust")
    np.testing.assert_allclose(robust, 4 / 3, rtol=1e-6)
    # keeping only the 3-gram keeps the left neighbour: the prediction does not move
    close = pd.ngram_probe(_left_neighbour_model, tokens, lengths, (2, 4), 1, 4, mode="close")
    np.testing.assert_allclose(close, 0.0, atol=1e-7)
    # a window of 0 hides nothing beyond p itself
    zero = pd.ngram_probe(_left_neighbour_model, tokens, lengths, (2, 4), 0, 4, mode="robust")
    np.testing.assert_allclose(zero, 0.0, atol=1e-7)
    # position 4 is past the second sentence (length 3): only 3 valid pairs, still 4/3
    with pytest.raises(ConfigError, match="mode"):
        pd.ngram_probe(_left_neighbour_model, tokens, lengths, (2,), 1, 4, mode="far")


def _copy_model(inputs, attend):
    """A next-token model that predicts the token it reads: one-hot of the token at each position
    when it is attended, else uniform."""
    one_hot = jax.nn.one_hot(jnp.clip(inputs, 0, 2), 3)
    return jnp.where((attend & (inputs < 3))[..., None], one_hot, jnp.full_like(one_hot, 1 / 3))


def test_ngram_probe_reads_a_next_token_model_one_position_left():
    tokens = jnp.array([[0, 1, 2, 0, 1, 2, 3, 3], [2, 2, 1, 3, 3, 3, 3, 3]])
    lengths = jnp.array([6, 3])

    def probe(mode):
        return pd.ngram_probe(_copy_model, tokens, lengths, (2, 4), 1, 4, mode=mode, read_offset=-1)

    # token p is predicted at p - 1, inside the 3-gram: hiding it leaves the prediction uniform
    np.testing.assert_allclose(probe("robust"), 4 / 3, rtol=1e-6)
    np.testing.assert_allclose(probe("close"), 0.0, atol=1e-7)


def test_next_token_batch_predicts_each_token_from_its_prefix():
    tokens = jnp.array([[0, 1, 2, 3], [2, 1, 0, 1]])  # lengths 3 (pad 3) and 4
    b = pd.next_token_batch(tokens, jnp.array([3, 4]))
    np.testing.assert_array_equal(b.inputs, tokens)
    np.testing.assert_array_equal(b.weights, [[1, 1, 0, 0], [1, 1, 1, 0]])
    np.testing.assert_array_equal(
        np.where(b.weights > 0, b.targets, -1), [[1, 2, -1, -1], [1, 0, 1, -1]]
    )
    np.testing.assert_array_equal(b.attend, [[1, 1, 1, 0], [1, 1, 1, 1]])
    task = pd.MLMTask(n_terminals=3, max_len=4, objective="next_token")
    same = pd.make_batch(jax.random.PRNGKey(0), tokens, jnp.array([3, 4]), task)
    np.testing.assert_array_equal(same.targets, b.targets)
    with pytest.raises(ConfigError, match="'objective'"):
        pd.MLMTask(objective="causal")


def test_causal_model_sees_only_the_prefix():
    tokens = jnp.array([[0, 1, 2, 0, 1, 2, 0, 1], [0, 1, 2, 0, 1, 1, 0, 2]])  # differ from 5 on
    attend = jnp.ones((2, 8), bool)
    model = pd.MaskedLM(5, 3, d_model=16, n_heads=2, head_dim=8, d_ff=32, n_layers=1, causal=True)
    logits = jax.jit(lambda t: model.apply(model.init(jax.random.PRNGKey(0), t, attend), t, attend))
    out = np.asarray(logits(tokens))
    np.testing.assert_array_equal(out[0, :5], out[1, :5])
    assert not np.allclose(out[0, 5:], out[1, 5:])


def test_linear_probe_reads_a_linear_code_and_not_noise():
    key = jax.random.PRNGKey(0)
    labels = jax.random.randint(key, (600,), 0, 3)
    w = jnp.ones(600)
    code = jax.nn.one_hot(labels, 3) + 0.1 * jax.random.normal(key, (600, 3))
    probe = jax.jit(pd.linear_probe_accuracy, static_argnums=4)
    assert float(probe(key, code, labels, w, 3)) > 0.98
    noise = jax.random.normal(jax.random.PRNGKey(1), (600, 3))
    assert float(probe(key, noise, labels, w, 3)) < 0.45


def test_curriculum_checkpoint_is_the_intermediate_peak():
    assert pd.curriculum_checkpoint([0.1, 0.5, 0.3, 0.9]) == 1  # the final one is excluded
    with pytest.raises(ConfigError, match="checkpoint_steps"):
        pd.curriculum_checkpoint([0.4])


SHORT = pd.MLMTask(n_terminals=3, max_len=8, mask_rate=0.3)


def test_teacher_learns_with_checkpoints():
    """A tiny masked-LM teacher on 8-token sentences (every rule binary): its training loss falls
    and its held-out masked-token accuracy rises over the kept checkpoints. (Students and probes on
    a teacher run are exercised, with a falling student loss, by the recipe's pcfg-tiny test.)"""
    g = pcfg.random_layered_grammar(1, symbols_per_level=(1, 2, 2), rhs_lengths=(2,))
    corpus, _ = pd.make_corpus(np.random.default_rng(0), g, 256, SHORT)
    teacher = pd.MaskedLM(SHORT.vocab, 3, d_model=16, n_heads=2, head_dim=8, d_ff=32, n_layers=1)
    spec = distill.TrainSpec(
        steps=120, batch=16, every=40, optim=distill.warmup_cosine(1e-2, 120, b2=0.999)
    )
    run = jax.device_get(
        jax.jit(pd.train_teacher, static_argnums=(1, 3, 4))(
            jax.random.PRNGKey(0), teacher, corpus, SHORT, spec
        )
    )
    losses = np.asarray(run.losses)
    assert losses[-20:].mean() < losses[:10].mean() - 0.1, (losses[:10], losses[-20:])
    held = pd.sample_batch(jax.random.PRNGKey(9), corpus, 64, SHORT)
    loss, acc = jax.jit(pd.checkpoint_metrics, static_argnums=0)(teacher, run, held)
    assert np.asarray(loss).shape == (3,) and float(acc[-1]) > float(acc[0]) + 0.05, (loss, acc)
