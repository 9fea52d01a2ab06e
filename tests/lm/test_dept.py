"""DEPT: GLOB ≡ data parallel, TRIM row rules, SPEC privacy/persistence, byte formula, learning,
sharded ≡ vmapped, bad input. Tiny static sizes; one compile per fixture."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core.config import ConfigError
from jaxlab.core.optim import OptimConfig
from jaxlab.core.sharding import MeshConfig, make_mesh
from jaxlab.lm import dept as D
from jaxlab.lm import sources as S
from jaxlab.lm.model import DecoderConfig

T, B = 16, 4
MODEL = DecoderConfig(d_model=16, n_layers=1, n_heads=2, head_dim=8, d_ff=32, max_len=T)


GC = S.GrammarConfig(n_words=24, n_symbols=8)


@pytest.fixture(scope="module")
def texts():
    g = S.make_grammar(GC)
    return [S.render(g, GC, k, 4000) for k in range(4)]


def unigram_ppl(src):
    """exp of each source's unigram entropy (training-stream frequencies, on its held-out ids)."""
    out = []
    for tr, va in zip(src.train, src.val, strict=True):
        p = np.bincount(tr, minlength=src.vocabs.local_size) + 1.0
        p /= p.sum()
        out.append(np.exp(-np.mean(np.log(p[va]))))
    return np.asarray(out)


def _run(dept, state, src, rounds, n, seed=0):
    step = jax.jit(dept.round_step)
    out = []
    for r in range(rounds):
        state, m = step(state, D.round_windows(src.train, seed, r, n, B, T))
        out.append(jax.device_get(m))
    return state, out


@pytest.fixture(scope="module")
def glob_case(texts):
    src = D.tokenize_sources(texts[:3], "glob", 40)
    cfg = D.DeptConfig(variant="glob", sources_per_round=3, local_steps=1)
    optim = D.DeptOptim(
        inner=OptimConfig(name="sgd", lr=0.5), outer=OptimConfig(name="sgd", lr=1.0)
    )
    return src, optim, D.Dept(cfg, MODEL, src.vocabs, optim=optim)


def test_glob_one_step_equals_data_parallel(glob_case):
    src, optim, dept = glob_case
    state = dept.init(jax.random.PRNGKey(0))
    _, dp_init, dp_step = D.make_dp(optim.inner, MODEL, src.vocabs.server_size)
    dp = dp_init(jax.random.PRNGKey(1))
    dp = dp.replace(params=D.merge_params(state.body, state.server_emb))
    dp_step = jax.jit(dp_step)
    step = jax.jit(dept.round_step)
    for r in range(3):
        toks = D.round_windows(src.train, 0, r, 1, B, T)
        state, m = step(state, toks)
        dp, dm = dp_step(dp, toks[:, 0])
        np.testing.assert_allclose(m["loss_first"], dm["loss"], rtol=1e-5)
    ref = jax.tree.leaves(dp.params)
    got = jax.tree.leaves(D.merge_params(state.body, state.server_emb))
    assert len(ref) == len(got)
    for a, b in zip(got, ref, strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)
    init = dept.init(jax.random.PRNGKey(0))
    start = jax.tree.leaves(D.merge_params(init.body, init.server_emb))
    moved = max(float(jnp.abs(a - b).max()) for a, b in zip(got, start, strict=True))
    assert moved > 1e-4  # the comparison is not between two untouched states


def test_glob_learns_and_counts_bytes(glob_case):
    src, cfg, dept = glob_case
    state = dept.init(jax.random.PRNGKey(0))
    val = D.eval_windows(src.val, 8, T)
    ev = jax.jit(dept.evaluate)
    before = np.asarray(ev(state, val))
    state, ms = _run(dept, state, src, 60, 1)
    after = np.asarray(ev(state, val))
    v = src.vocabs.server_size
    # stated bound: per-source perplexity below 40% of the uniform perplexity |V|
    assert np.all(np.exp(after) < 0.4 * v), (np.exp(before), np.exp(after))
    n_body = D.param_count(state.body)
    d = MODEL.d_model
    expected = 3 * 2 * 4 * (n_body + 2 * v * d)  # S·2·b·(|θ_body| + 2|V|d)
    assert D.round_bytes("glob", n_body, d, [v] * 3, v) == expected
    np.testing.assert_allclose(ms[-1]["bytes"], expected, rtol=1e-6)
    assert int(state.rows_sent) == 60 * 3 * v
    # data parallel at equal tokens: N=1 step per round, 3 workers, same payload
    assert D.dp_bytes(n_body, d, v, steps=1, workers=3) == expected
    # plasticity: the trained body continued on a held-out language with fresh embeddings
    held = S.render(S.make_grammar(GC), GC, 3, 4000)
    tok = S.train_bpe([held], 24)
    stream = S.encode(tok, held)
    toks = jnp.asarray(D.round_windows((stream,), 0, 0, 20, B, T)[0])
    losses = np.asarray(
        jax.jit(D.adapt, static_argnums=(2, 3, 4))(
            jax.random.PRNGKey(9),
            state.body,
            MODEL,
            D.DeptOptim().inner,
            tok.get_vocab_size(),
            toks,
            1e-2,
        )
    )
    assert losses.shape == (20,)
    assert losses[0] > np.log(tok.get_vocab_size()) - 0.5  # fresh embeddings: near uniform
    assert losses[-3:].mean() < losses[0] - 0.5, losses


@pytest.fixture(scope="module")
def trim_case(texts):
    src = D.tokenize_sources(texts[:3], "trim", 40)
    cfg = D.DeptConfig(variant="trim", sources_per_round=2, local_steps=3)
    return src, cfg, D.Dept(cfg, MODEL, src.vocabs)


def test_trim_rows(trim_case):
    src, cfg, dept = trim_case
    mu = dept.optim.outer.momentum
    state0 = dept.init(jax.random.PRNGKey(2))
    lr0 = {"optim.outer.lr": jnp.float32(1 / (1 + mu))}
    state0 = state0.replace(hparams={**state0.hparams, **lr0})
    toks = D.round_windows(src.train, 3, 0, cfg.local_steps, B, T)
    state1, m = jax.jit(dept.round_step)(state0, toks)
    idx = np.asarray(dept.sample(jax.random.split(state0.key)[1]))
    assert len(set(idx.tolist())) == 2
    rows = src.vocabs.rows[idx]
    valid = src.vocabs.valid[idx]
    holders = np.zeros(src.vocabs.server_size, int)
    for r, vv in zip(rows, valid, strict=True):
        holders[r[vv]] += 1
    assert (holders == 0).any() and (holders == 1).any()
    for name in ("embed", "head"):
        old, new = np.asarray(state0.server_emb[name]), np.asarray(state1.server_emb[name])
        np.testing.assert_array_equal(new[holders == 0], old[holders == 0])
        assert np.abs(new[holders > 0] - old[holders > 0]).max() > 1e-5
    # a row held by one sampled source: the first Nesterov step with lr 1/(1+μ) lands on the
    # client's own row (Δ_v = E_v − E_{k,v})
    emb0 = jax.tree.map(lambda e: jnp.take(e, rows[0], axis=0, mode="fill", fill_value=0),
                        state0.server_emb)  # fmt: skip
    _, emb_k, _ = jax.jit(dept.local_train)(
        state0.hparams, state0.body, emb0, toks[idx[0]], valid[0]
    )
    only = valid[0] & (holders[rows[0].clip(max=src.vocabs.server_size - 1)] == 1)
    assert only.any()
    for name in ("embed", "head"):
        np.testing.assert_allclose(
            np.asarray(state1.server_emb[name])[rows[0][only]],
            np.asarray(emb_k[name])[only],
            rtol=1e-4,
            atol=1e-6,
        )
    # a row held by both sampled sources lands on the mean of their two rows (averaged, not
    # summed, over its holders)
    emb1 = jax.tree.map(lambda e: jnp.take(e, rows[1], axis=0, mode="fill", fill_value=0),
                        state0.server_emb)  # fmt: skip
    _, emb_k1, _ = jax.jit(dept.local_train)(
        state0.hparams, state0.body, emb1, toks[idx[1]], valid[1]
    )
    shared = np.nonzero(holders == 2)[0]
    assert shared.size > 0
    pos = [{int(r): p for p, r in enumerate(rows[k]) if valid[k][p]} for k in (0, 1)]
    for name in ("embed", "head"):
        mean = np.stack(
            [(np.asarray(emb_k[name])[pos[0][r]] + np.asarray(emb_k1[name])[pos[1][r]]) / 2
             for r in shared]
        )  # fmt: skip
        np.testing.assert_allclose(
            np.asarray(state1.server_emb[name])[shared], mean, rtol=1e-4, atol=1e-6
        )
    sizes = src.vocabs.sizes[idx]
    n_body = D.param_count(state0.body)
    expected = sum(2 * 4 * (n_body + 2 * int(vk) * MODEL.d_model) for vk in sizes)
    assert D.round_bytes("trim", n_body, MODEL.d_model, sizes, src.vocabs.server_size) == expected
    np.testing.assert_allclose(m["bytes"], expected, rtol=1e-6)
    # TRIM holds fewer embedding rows per client than the global vocabulary
    counts = dept.counts()
    assert counts["client_embedding_params_max"] < counts["server_embedding_params"]
    # it learns: 30 more rounds (DiLoCo outer lr 0.7, Nesterov 0.9; same compiled step);
    # stated bound: per-source perplexity below 90% of the source's unigram perplexity
    step = jax.jit(dept.round_step)
    state = state1.replace(hparams={**state1.hparams, "optim.outer.lr": jnp.float32(0.7)})
    for r in range(1, 31):
        state, _ = step(state, D.round_windows(src.train, 3, r, cfg.local_steps, B, T))
    ppl = np.exp(np.asarray(jax.jit(dept.evaluate)(state, D.eval_windows(src.val, 8, T))))
    uni = unigram_ppl(src)
    assert np.all(ppl < 0.9 * uni), (ppl, uni)


@pytest.fixture(scope="module")
def texts8():
    gc = S.GrammarConfig(n_words=24, n_symbols=8)
    g = S.make_grammar(gc)
    return [S.render(g, gc, k, 2500) for k in range(8)]


def test_spec_private_persistent_and_sharded(texts8):
    src = D.tokenize_sources(texts8, "spec", 24)
    cfg = D.DeptConfig(variant="spec", sources_per_round=4, local_steps=2)
    one = D.Dept(cfg, MODEL, src.vocabs)
    state0 = one.init(jax.random.PRNGKey(4))
    assert state0.server_emb == {}
    server_leaves = jax.tree.leaves((state0.body, state0.server_emb, state0.outer_opt))
    emb_shapes = {x.shape for x in jax.tree.leaves(state0.client_emb)}
    assert not any(x.shape[-2:] == s[-2:] for x in server_leaves for s in emb_shapes)
    n_body = D.param_count(state0.body)
    assert sum(x.size for x in jax.tree.leaves(state0.outer_opt)) <= 2 * n_body + 2
    step = jax.jit(one.round_step)
    toks = D.round_windows(src.train, 0, 0, cfg.local_steps, B, T)
    state1, m_one = step(state0, toks)
    idx = np.asarray(one.sample(jax.random.split(state0.key)[1]))
    state2, _ = step(state1, D.round_windows(src.train, 0, 1, cfg.local_steps, B, T))
    idx2 = np.asarray(one.sample(jax.random.split(state1.key)[1]))
    assert len(set(idx.tolist())) == 4 and set(range(8)) - set(idx2.tolist())
    for name in ("embed", "head"):
        e0, e1, e2 = (np.asarray(s.client_emb[name]) for s in (state0, state1, state2))
        for k in range(8):
            if k in idx:
                assert np.abs(e1[k] - e0[k]).max() > 1e-5
            else:  # sat out: unchanged
                np.testing.assert_array_equal(e1[k], e0[k])
            if k not in idx2:  # persists across the round it sat out
                np.testing.assert_array_equal(e2[k], e1[k])
    assert float(m_one["bytes"]) == D.round_bytes("spec", n_body, MODEL.d_model, [0] * 4, 0)
    assert float(m_one["bytes"]) == 4 * 2 * 4 * n_body
    # it learns (stated bound: per-source perplexity below 90% of its unigram perplexity)
    state = state2
    for r in range(2, 26):
        state, _ = step(state, D.round_windows(src.train, 0, r, cfg.local_steps, B, T))
    ppl = np.exp(np.asarray(jax.jit(one.evaluate)(state, D.eval_windows(src.val, 4, T))))
    uni = unigram_ppl(src)
    assert np.all(ppl < 0.9 * uni), (ppl, uni)

    # sharded (the 4 sampled clients over 4 simulated devices) equals vmapped on one device
    mesh = make_mesh(MeshConfig(data=4), jax.devices()[:4])
    many = D.Dept(cfg, MODEL, src.vocabs, mesh=mesh)
    s_many, m_many = jax.jit(many.round_step)(state0, toks)
    np.testing.assert_allclose(m_many["loss"], m_one["loss"], rtol=1e-5)
    for a, b in zip(jax.tree.leaves(s_many), jax.tree.leaves(state1), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def test_bad_input(texts):
    with pytest.raises(ConfigError, match="sources\\[1\\]"):
        D.tokenize_sources([texts[0], ""], "spec", 40)
    with pytest.raises(ConfigError, match="'variant'"):
        D.DeptConfig(variant="global")
    with pytest.raises(ConfigError, match="variant"):
        D.tokenize_sources(texts[:2], "trimmed", 40)
    src = D.tokenize_sources(texts[:2], "glob", 40)
    with pytest.raises(ConfigError, match="dept.sources_per_round"):
        D.Dept(D.DeptConfig(sources_per_round=3), MODEL, src.vocabs)
    with pytest.raises(ConfigError, match="vocab_size"):
        D.tokenize_sources(texts[:2], "glob", 5)


def test_corpus_domains_are_heterogeneous_sources():
    texts = S.corpus_domains(3)
    assert len(set(texts)) == 3 and all(len(t) > 10_000 for t in texts)
    src = D.tokenize_sources(texts, "trim", 256)
    used = [set(r[v].tolist()) for r, v in zip(src.vocabs.rows, src.vocabs.valid, strict=True)]
    assert used[0] != used[1] and all(len(u) < 256 for u in used)
    assert used[0] - used[1] - used[2]  # a row only the first domain holds
    with pytest.raises(ConfigError, match="n_sources"):
        S.corpus_domains(10_000)
