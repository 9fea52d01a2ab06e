"""Tests of jaxlab.lm.moe (OLMoE MoE layer) and jaxlab.lm.routing_stats."""

from __future__ import annotations

import dataclasses
import functools
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core.config import ConfigError, from_dict, load_yaml_text
from jaxlab.core.sharding import MeshConfig, make_mesh
from jaxlab.lm import moe
from jaxlab.lm.model import OLMOE_1B_7B, Decoder, DecoderConfig, next_token_loss
from jaxlab.lm.moe.experts import _swiglu_grouped
from jaxlab.lm.moe.kernels import _tiled_swiglu
from jaxlab.lm.moe.router import _token_entropy, _z_loss_from_lse
from jaxlab.lm.moe.sorting import _inverse_permutation, _sort_rows, _unsort_combine
from jaxlab.lm.moe.tiling import _group_tile_loop
from jaxlab.lm.routing_stats import routing_stats, summarize

B, S, D, FF, E, K = 8, 4, 16, 8, 8, 2
T = B * S
ATOL = 1e-5
BASE = moe.MoEConfig(num_experts=E, top_k=K, expert_ff=FF, tile_size=8, init_std=0.3)


@pytest.fixture(scope="module")
def params_x():
    x = jax.random.normal(jax.random.key(1), (B, S, D))
    params = jax.jit(moe.MoEFeedForward(BASE).init)(jax.random.key(0), x)["params"]
    return nn.unbox(params), x


_COT = np.asarray(jax.random.normal(jax.random.key(42), (B, S, D)))


@functools.cache
def _run(cfg):
    """Jitted ``(params, x) -> ((loss, (y, sown)), (dparams, dx))`` for one config (one compile)."""

    def loss(params, x):
        y, sown = moe.MoEFeedForward(cfg).apply(
            {"params": params}, x, mutable=[moe.AUX_LOSS_COLLECTION, moe.STATS_COLLECTION]
        )
        return jnp.sum(y * _COT), (y, sown)

    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))


def dense_reference(params, x, normalize):
    """Every expert on every token, masked by the top-k gate (no sorting, no grouped matmul)."""
    x2 = x.reshape(-1, x.shape[-1])
    probs = jax.nn.softmax(x2 @ params["router"], axis=-1)
    top_p, top_i = jax.lax.top_k(probs, K)
    if normalize:
        top_p = top_p / jnp.sum(top_p, axis=-1, keepdims=True)
    gate = jnp.sum(jax.nn.one_hot(top_i, E) * top_p[..., None], axis=1)
    h = jax.nn.silu(jnp.einsum("td,edf->etf", x2, params["w1"]))
    h = h * jnp.einsum("td,edf->etf", x2, params["w3"])
    y_all = jnp.einsum("etf,efd->etd", h, params["w2"])
    return jnp.einsum("etd,te->td", y_all, gate).reshape(x.shape)


@functools.cache
def _run_dense(normalize):
    def loss(params, x):
        y = dense_reference(params, x, normalize)
        return jnp.sum(y * _COT), y

    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))


def _expert_weights(seed=3, scale=0.3):
    k1, k2, k3 = jax.random.split(jax.random.key(seed), 3)
    return moe.ExpertWeights(
        w1=scale * jax.random.normal(k1, (E, D, FF)),
        w3=scale * jax.random.normal(k2, (E, D, FF)),
        w2=scale * jax.random.normal(k3, (E, FF, D)),
    )


def _assert_tree_close(a, b, atol=ATOL):
    for (path, u), v in zip(
        jax.tree_util.tree_flatten_with_path(a)[0], jax.tree.leaves(b), strict=True
    ):
        np.testing.assert_allclose(
            np.asarray(u), np.asarray(v), atol=atol, rtol=0, err_msg=str(path)
        )


# ---------------------------------------------------------------- grouped matmul


@pytest.mark.parametrize("impl,tile", [("ragged_dot", 8), ("tiled", 4), ("tiled", 8)])
def test_grouped_matmul_matches_numpy_and_masked_reference(impl, tile):
    m, k, n = 29, 5, 6
    sizes = np.array([7, 0, 12, 0, 5], np.int32)  # sum 24 < 29: trailing rows give 0
    lhs = jax.random.normal(jax.random.key(0), (m, k))
    rhs = jax.random.normal(jax.random.key(1), (sizes.size, k, n))
    gs = jnp.asarray(sizes)
    ref = np.zeros((m, n), np.float32)
    offs = np.concatenate([[0], np.cumsum(sizes)])
    for g in range(sizes.size):
        ref[offs[g] : offs[g + 1]] = np.asarray(lhs)[offs[g] : offs[g + 1]] @ np.asarray(rhs)[g]

    def gmm(a, b):
        return moe.grouped_matmul(a, b, gs, impl=impl, tile_size=tile)

    np.testing.assert_allclose(np.asarray(jax.jit(gmm)(lhs, rhs)), ref, atol=ATOL)

    group_of_row = np.searchsorted(offs[1:], np.arange(m), side="right")  # sizes.size = none

    def masked(a, b):
        onehot = jax.nn.one_hot(jnp.asarray(group_of_row), sizes.size)
        return jnp.einsum("mk,gkn,mg->mn", a, b, onehot)

    cot = jax.random.normal(jax.random.key(2), (m, n))
    grads = jax.jit(jax.grad(lambda a, b: jnp.sum(gmm(a, b) * cot), argnums=(0, 1)))(lhs, rhs)
    want = jax.jit(jax.grad(lambda a, b: jnp.sum(masked(a, b) * cot), argnums=(0, 1)))(lhs, rhs)
    _assert_tree_close(grads, want)
    # empty groups and rows past sum(sizes): exactly zero gradient
    assert np.all(np.asarray(grads[1])[sizes == 0] == 0.0)
    assert np.all(np.asarray(grads[0])[offs[-1] :] == 0.0)


@pytest.mark.parametrize(
    "rows,tile", [(29, 16), (29, 4), (6, 16), (29, (12, 4, 2)), (1500, (512, 16, 8))]
)
def test_group_tile_loop_covers_each_grouped_row_exactly_once(rows, tile):
    """Every row of every group is handed to exactly one tile as valid, with its own group;
    rows past ``sum(sizes)`` never are (incl. the tile moved back to end at ``rows``), also with
    three tile levels and with a big level that rounds half up (300 rows: one 512-row tile; 700:
    512 + 16s + 8s; 260: one 512-row tile moved back to end at ``rows``)."""
    sizes = {29: [7, 0, 12, 0, 9], 6: [0, 4, 2], 1500: [300, 0, 700, 200, 260]}[rows]
    gs = jnp.asarray(sizes, jnp.int32)
    levels = tile if isinstance(tile, tuple) else moe.tile_levels(rows, tile)

    def tile_fn(g, r0, valid, t, carry, acc):
        visits, owner = carry
        r = r0 + jnp.arange(t)
        visits = visits.at[r].add(valid.astype(jnp.int32))
        owner = owner.at[r].set(jnp.where(valid, g, owner[r]))
        return (visits, owner), acc + jnp.sum(valid)

    init = (jnp.zeros(rows, jnp.int32), jnp.full(rows, -1, jnp.int32))
    (visits, owner), per_group = jax.jit(
        lambda gs: _group_tile_loop(gs, rows, levels, init, tile_fn, jnp.zeros((), jnp.int32))
    )(gs)
    want_owner = np.full(rows, -1)
    want_owner[: sum(sizes)] = np.repeat(np.arange(len(sizes)), sizes)
    np.testing.assert_array_equal(np.asarray(visits), (want_owner >= 0).astype(np.int32))
    np.testing.assert_array_equal(np.asarray(owner), want_owner)
    np.testing.assert_array_equal(np.asarray(per_group), sizes)


def test_tile_levels():
    assert moe.tile_levels(4096, 128) == (128, 8)
    assert moe.tile_levels(4096, 128, 32) == (128, 32)
    assert moe.tile_levels(4096, 4) == (4,)
    assert moe.tile_levels(5, 128) == (5,)
    # a big level (>= 512 rows: the mean group's power of two) only when groups are large
    assert moe.tile_levels(32768, 128, num_groups=8) == (4096, 128, 8)
    assert moe.tile_levels(131072, 128, 32, num_groups=64) == (2048, 128, 32)
    assert moe.tile_levels(4096, 128, num_groups=8) == (512, 128, 8)
    assert moe.tile_levels(16384, 128, num_groups=64) == (128, 8)  # 256 rows per group
    assert moe.tile_levels(2048, 128, num_groups=8) == (128, 8)
    assert moe.tile_levels(8192, 512, num_groups=4) == (2048, 512, 8)  # >= 2 tile_size
    assert moe.tile_levels(2048, 512, num_groups=4) == (512, 8)


def test_top_k_by_max_equals_lax_top_k():
    """Values, indices, order, tie-breaking and gradient of ``lax.top_k``."""
    p = jax.nn.softmax(jax.random.normal(jax.random.key(3), (64, 16)), axis=-1)
    ties = jnp.asarray([[0.1, 0.3, 0.3, 0.2, 0.1], [0.2, 0.2, 0.2, 0.2, 0.2]])
    cot = jax.random.normal(jax.random.key(4), (64, 16))
    for x in (p, ties):
        for k in (1, 2, 3, x.shape[1]):
            got, want = moe.top_k_by_max(x, k), jax.lax.top_k(x, k)
            np.testing.assert_array_equal(np.asarray(got[1]), np.asarray(want[1]))
            np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(want[0]))
    np.testing.assert_array_equal(np.asarray(moe.top_k_by_max(ties, 3)[1]), [[1, 2, 3], [0, 1, 2]])
    for k in (1, 3):

        def loss(x, f, k=k):
            v = f(x, k)[0]
            return jnp.sum(v * cot[:, :k])

        np.testing.assert_array_equal(
            np.asarray(jax.grad(loss)(p, moe.top_k_by_max)),
            np.asarray(jax.grad(loss)(p, jax.lax.top_k)),
        )
    tied_grad = jax.grad(lambda x: jnp.sum(moe.top_k_by_max(x, 1)[0]))(ties)
    np.testing.assert_array_equal(np.asarray(tied_grad), [[0, 1, 0, 0, 0], [1, 0, 0, 0, 0]])


@pytest.mark.parametrize("levels", [None, ((12, 4, 2), (12, 4))], ids=["default", "3-levels"])
@pytest.mark.parametrize("sizes", [[7, 0, 12, 0, 5], [0, 0, 29, 0, 0], [3, 9, 4, 8, 5]])
def test_fused_tiled_swiglu_matches_masked_reference(sizes, levels):
    """The fused tiled SwiGLU (in-place forward, fused backward) equals per-group SwiGLUs,
    values and gradients; rows past ``sum(sizes)`` give 0 and get 0 gradient, empty groups get
    exactly zero weight gradients."""
    m, d, ff = 29, 6, 5
    sizes = np.asarray(sizes, np.int32)
    offs = np.concatenate([[0], np.cumsum(sizes)])
    group_of_row = np.searchsorted(offs[1:], np.arange(m), side="right")
    onehot = jax.nn.one_hot(jnp.asarray(group_of_row), sizes.size)  # rows past the sum: all 0
    ks = jax.random.split(jax.random.key(7), 5)
    xs = jax.random.normal(ks[0], (m, d))
    ew = moe.ExpertWeights(
        w1=jax.random.normal(ks[1], (sizes.size, d, ff)),
        w3=jax.random.normal(ks[2], (sizes.size, d, ff)),
        w2=jax.random.normal(ks[3], (sizes.size, ff, d)),
    )
    cot = jax.random.normal(ks[4], (m, d))

    def fused(xs, ew):
        if levels is not None:  # a big-tile ladder as tile_levels builds for large groups
            return _tiled_swiglu(xs, ew.w1, ew.w3, ew.w2, jnp.asarray(sizes), levels)
        return _swiglu_grouped(xs, ew, jnp.asarray(sizes), impl="tiled", tile_size=8)

    def masked(xs, ew):
        h = jax.nn.silu(jnp.einsum("md,gdf->gmf", xs, ew.w1))
        h = h * jnp.einsum("md,gdf->gmf", xs, ew.w3)
        return jnp.einsum("gmf,gfd,mg->md", h, ew.w2, onehot)

    np.testing.assert_allclose(
        np.asarray(jax.jit(fused)(xs, ew)), np.asarray(masked(xs, ew)), atol=1e-4
    )
    assert np.all(np.asarray(jax.jit(fused)(xs, ew))[offs[-1] :] == 0.0)

    def grads(f):
        return jax.jit(jax.grad(lambda xs, ew: jnp.sum(f(xs, ew) * cot), argnums=(0, 1)))(xs, ew)

    got, want = grads(fused), grads(masked)
    _assert_tree_close(got, want, atol=1e-4)
    assert np.all(np.asarray(got[0])[offs[-1] :] == 0.0)
    for g in jax.tree.leaves(got[1]):
        assert np.all(np.asarray(g)[sizes == 0] == 0.0)


def test_fused_tiled_swiglu_with_big_rounded_tiles():
    """The fused kernel with a big level that rounds half up (tiles reaching into the next group
    and past ``rows``) equals per-group SwiGLUs, values and gradients."""
    sizes = np.asarray([300, 0, 700, 37, 500], np.int32)  # 1537 of 1600 rows
    m, d, ff = 1600, 4, 3
    offs = np.concatenate([[0], np.cumsum(sizes)])
    group_of_row = np.searchsorted(offs[1:], np.arange(m), side="right")
    onehot = jax.nn.one_hot(jnp.asarray(group_of_row), sizes.size)
    ks = jax.random.split(jax.random.key(8), 5)
    xs = jax.random.normal(ks[0], (m, d))
    w = [jax.random.normal(ks[i], (sizes.size, *s)) for i, s in ((1, (d, ff)), (2, (d, ff)))]
    w.append(jax.random.normal(ks[3], (sizes.size, ff, d)))
    cot = jax.random.normal(ks[4], (m, d))
    levels = ((512, 128, 8), (512, 128, 32))

    def fused(xs, w):
        return _tiled_swiglu(xs, *w, jnp.asarray(sizes), levels)

    def masked(xs, w):
        h = jax.nn.silu(jnp.einsum("md,gdf->gmf", xs, w[0])) * jnp.einsum("md,gdf->gmf", xs, w[1])
        return jnp.einsum("gmf,gfd,mg->md", h, w[2], onehot)

    def grads(f):
        return jax.jit(jax.grad(lambda xs, w: jnp.sum(f(xs, w) * cot), argnums=(0, 1)))(xs, w)

    np.testing.assert_allclose(np.asarray(jax.jit(fused)(xs, w)), masked(xs, w), atol=1e-4)
    for got, want in zip(
        jax.tree.leaves(grads(fused)), jax.tree.leaves(grads(masked)), strict=True
    ):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-4)


def test_sort_and_unsort_custom_gradients_match_autodiff():
    """The gather-based transposes of the sort (``_sort_rows``) and of the un-sort + combine
    (``_unsort_combine``) equal JAX's autodiff of the plain gather / einsum formulation."""
    experts = jax.random.randint(jax.random.key(1), (T, K), 0, E)
    x = jax.random.normal(jax.random.key(2), (T, D))
    w = jax.random.uniform(jax.random.key(3), (T, K))
    cot = jax.random.normal(jax.random.key(4), (T, D))
    order = jnp.argsort(experts.reshape(-1), stable=True).astype(jnp.int32)
    slots = _inverse_permutation(order).reshape(T, K)
    np.testing.assert_array_equal(
        np.asarray(order)[np.asarray(slots)].reshape(-1), np.arange(T * K)
    )

    def custom(x, w):
        xs = _sort_rows(x, order // K, slots)
        return _unsort_combine(jnp.tanh(xs), w, order, slots)

    def plain(x, w):
        xs = x[order // K]
        return jnp.einsum("tkd,tk->td", jnp.tanh(xs)[slots.reshape(-1)].reshape(T, K, D), w)

    np.testing.assert_allclose(
        np.asarray(jax.jit(custom)(x, w)), np.asarray(plain(x, w)), atol=ATOL
    )
    got = jax.jit(jax.grad(lambda x, w: jnp.sum(custom(x, w) * cot), argnums=(0, 1)))(x, w)
    want = jax.grad(lambda x, w: jnp.sum(plain(x, w) * cot), argnums=(0, 1))(x, w)
    _assert_tree_close(got, want)


# ---------------------------------------------------------------- dropless layer


@pytest.mark.parametrize(
    "impl,normalize",
    [("ragged_dot", False), ("auto", False), ("auto", True)],
    ids=["ragged_dot-olmoe", "tiled-olmoe", "tiled-renorm"],
)
def test_dropless_layer_equals_dense_reference(params_x, impl, normalize):
    params, x = params_x
    cfg = dataclasses.replace(BASE, grouped_matmul=impl, normalize_topk=normalize)
    (v1, (y1, sown)), g1 = _run(cfg)(params, x)
    (v2, y2), g2 = _run_dense(normalize)(params, x)
    np.testing.assert_allclose(np.asarray(y1), np.asarray(y2), atol=ATOL)
    np.testing.assert_allclose(float(v1), float(v2), atol=1e-4)
    _assert_tree_close(g1, g2)
    assert int(sown[moe.STATS_COLLECTION]["routing"][0].dropped) == 0


@pytest.mark.parametrize("impl", ["ragged_dot", "tiled"])
def test_experts_without_tokens_get_exactly_zero_gradient(impl):
    num_used = 5
    x = jax.random.normal(jax.random.key(0), (T, D))
    experts = jax.random.randint(jax.random.key(1), (T, K), 0, num_used)
    weights = jax.random.uniform(jax.random.key(2), (T, K))
    ew = _expert_weights()
    grads = jax.jit(
        jax.grad(
            lambda ew: jnp.sum(
                moe.dropless_experts(x, experts, weights, ew, impl=impl, tile_size=8) ** 2
            )
        )
    )(ew)
    for g in jax.tree.leaves(grads):
        g = np.asarray(g)
        assert np.all(g[num_used:] == 0.0)
        used = np.unique(np.asarray(experts))
        assert np.all(np.abs(g[used]).reshape(len(used), -1).max(axis=1) > 0)


def test_dropless_vmap_matches_loop():
    x = jax.random.normal(jax.random.key(0), (2, T, D))
    experts = jax.random.randint(jax.random.key(1), (2, T, K), 0, E)
    weights = jax.random.uniform(jax.random.key(2), (2, T, K))
    ew = _expert_weights()
    fn = jax.jit(  # vmap of the data-dependent while loops of the tiled grouped matmul
        jax.vmap(lambda x, e, w: moe.dropless_experts(x, e, w, ew, impl="tiled", tile_size=8))
    )
    got = fn(x, experts, weights)
    for i in range(2):
        want = jax.jit(moe.dropless_experts, static_argnames="impl")(
            x[i], experts[i], weights[i], ew, impl="ragged_dot"
        )
        np.testing.assert_allclose(np.asarray(got[i]), np.asarray(want), atol=ATOL)


# ---------------------------------------------------------------- router losses and stats


@pytest.mark.parametrize("e,k", [(8, 1), (8, 2), (64, 8)])
def test_load_balancing_loss_analytic_values(e, k):
    t = 64

    @jax.jit
    def losses(key):
        k1, k2 = jax.random.split(key)
        # uniform probabilities: L_LB = 1 whatever the routing
        uniform = jnp.full((t, e), 1.0 / e)
        random_experts = jax.random.randint(k1, (t, k), 0, e)
        # uniform counts (round robin): L_LB = 1 whatever the probabilities
        rr = (jnp.arange(t)[:, None] * k + jnp.arange(k)[None, :]) % e
        rand_probs = jax.nn.softmax(jax.random.normal(k2, (t, e)), axis=-1)
        # all tokens on the same k experts with probability 1/k each: L_LB = E / k
        chosen = jnp.zeros((e,), bool).at[jnp.array([3 * i % e for i in range(k)])].set(True)
        r = moe.route(jnp.where(chosen[None, :], 0.0, -1e9) * jnp.ones((t, 1)), top_k=k)
        return (
            moe.load_balancing_loss(uniform, random_experts),
            moe.load_balancing_loss(rand_probs, rr),
            moe.load_balancing_loss(r.probs, r.experts),
            r.weights,
        )

    lb_uniform_p, lb_uniform_f, lb_collapsed, weights = losses(jax.random.key(0))
    np.testing.assert_allclose(float(lb_uniform_p), 1.0, rtol=1e-6)
    np.testing.assert_allclose(float(lb_uniform_f), 1.0, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(weights), 1.0 / k, rtol=1e-6)
    np.testing.assert_allclose(float(lb_collapsed), e / k, rtol=1e-6)


def test_load_balancing_loss_gradient_flows_through_probs_only():
    logits = jax.random.normal(jax.random.key(0), (T, E))

    def lb(z):
        r = moe.route(z, top_k=K)
        return moe.load_balancing_loss(r.probs, r.experts)

    r = moe.route(logits, top_k=K)
    f = np.bincount(np.asarray(r.experts).ravel(), minlength=E) / (T * K)
    p = np.asarray(r.probs)
    # d/dz_tj of E sum_i f_i mean_t p_ti = (E/T) p_tj (f_j - sum_i f_i p_ti)
    want = (E / T) * p * (f[None, :] - (p @ f)[:, None])
    np.testing.assert_allclose(np.asarray(jax.jit(jax.grad(lb))(logits)), want, atol=1e-6)


def test_router_z_loss_matches_formula():
    z = 3.0 * np.asarray(jax.random.normal(jax.random.key(0), (T, E)))
    m = z.max(axis=1, keepdims=True)
    lse = (m + np.log(np.exp(z - m).sum(axis=1, keepdims=True)))[:, 0]
    got = jax.jit(moe.router_z_loss)(jnp.asarray(z))
    np.testing.assert_allclose(float(got), np.mean(lse**2), rtol=1e-5)


def test_route_top_k_and_renormalisation():
    logits = jax.random.normal(jax.random.key(0), (T, E))
    p = np.asarray(jax.nn.softmax(logits, axis=-1))
    route = jax.jit(moe.route, static_argnames=("top_k", "normalize"))
    r = route(logits, top_k=3)
    idx = np.argsort(-p, axis=1)[:, :3]
    np.testing.assert_array_equal(np.asarray(r.experts), idx)
    np.testing.assert_allclose(np.asarray(r.weights), np.take_along_axis(p, idx, 1), rtol=1e-6)
    rn = route(logits, top_k=3, normalize=True)
    np.testing.assert_allclose(np.asarray(rn.weights).sum(1), 1.0, rtol=1e-6)
    # one softmax pass gives p, lse (for L_RZ) and the token entropies, values and gradients
    big = 30.0 * logits  # large logits: the max shift must be right
    rb = route(big, top_k=2)
    np.testing.assert_allclose(np.asarray(rb.probs), jax.nn.softmax(big, -1), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(np.asarray(rb.lse), jax.nn.logsumexp(big, -1), rtol=1e-6)
    want_h = jnp.sum(jax.scipy.special.entr(jax.nn.softmax(big, -1)), -1)
    np.testing.assert_allclose(np.asarray(_token_entropy(rb)), want_h, rtol=1e-4, atol=1e-5)

    def z_grad(f):
        return jax.jit(jax.grad(f))(logits)

    np.testing.assert_allclose(
        z_grad(lambda z: _z_loss_from_lse(moe.route(z, top_k=2).lse)),
        z_grad(moe.router_z_loss),
        rtol=1e-5,
        atol=1e-8,
    )


def test_sort_by_expert_is_the_stable_argsort():
    """The packed-key sort and its int32-overflow fallback equal ``argsort(stable=True)``."""
    flat = jax.random.randint(jax.random.key(5), (3000,), 0, 7)
    want = np.argsort(np.asarray(flat), kind="stable")
    np.testing.assert_array_equal(
        np.asarray(jax.jit(moe.sort_by_expert, static_argnums=1)(flat, 7)), want
    )
    # 2^20 "experts" x 3000 rows > 2^31: the stable argsort path
    np.testing.assert_array_equal(np.asarray(moe.sort_by_expert(flat, 2**20)), want)


def test_routing_stats_values():
    probs = jax.nn.softmax(jax.random.normal(jax.random.key(0), (T, E)), axis=-1)
    experts = jax.random.randint(jax.random.key(1), (T, K), 0, E)
    st = jax.jit(routing_stats)(probs, experts, dropped=3)
    load = np.bincount(np.asarray(experts).ravel(), minlength=E) / (T * K)
    np.testing.assert_allclose(np.asarray(st.load), load, rtol=1e-6)
    nz = load[load > 0]
    np.testing.assert_allclose(float(st.usage_entropy), -(nz * np.log(nz)).sum(), rtol=1e-5)
    p = np.asarray(probs)
    np.testing.assert_allclose(float(st.router_entropy), -(p * np.log(p)).sum(1).mean(), rtol=1e-5)
    np.testing.assert_allclose(float(st.max_load_ratio), E * load.max(), rtol=1e-6)
    np.testing.assert_allclose(float(st.dropped_fraction), 3 / (T * K), rtol=1e-6)
    balanced = jax.jit(routing_stats)(
        jnp.full((T, E), 1.0 / E), (jnp.arange(T * K) % E).reshape(T, K)
    )
    np.testing.assert_allclose(float(balanced.usage_entropy_ratio), 1.0, rtol=1e-6)
    np.testing.assert_allclose(float(balanced.router_entropy), math.log(E), rtol=1e-6)
    assert set(summarize(st)) >= {"moe/usage_entropy", "moe/dropped_fraction"}


# ---------------------------------------------------------------- capacity variant


def _numpy_capacity_layer(params, x, cfg, capacity):
    """Loop reference: assignments served first-choice-first, in token order, until full."""
    x2 = np.asarray(x, np.float64).reshape(-1, D)
    z = x2 @ np.asarray(params["router"], np.float64)
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    top = np.argsort(-p, axis=1, kind="stable")[:, : cfg.top_k]
    w1, w3, w2 = (np.asarray(params[n], np.float64) for n in ("w1", "w3", "w2"))
    fill = np.zeros(cfg.num_experts, int)
    y = np.zeros_like(x2)
    dropped = 0
    for j in range(cfg.top_k):
        for t in range(x2.shape[0]):
            e = top[t, j]
            if fill[e] >= capacity:
                dropped += 1
                continue
            fill[e] += 1
            a = x2[t] @ w1[e]
            h = a / (1 + np.exp(-a)) * (x2[t] @ w3[e])
            y[t] += p[t, e] * (h @ w2[e])
    return y.reshape(x.shape), dropped, top


def test_capacity_equals_dropless_when_capacity_is_large(params_x):
    params, x = params_x
    cfg = dataclasses.replace(BASE, dispatch="capacity", capacity_factor=E / K)
    assert moe.expert_capacity(T, num_experts=E, top_k=K, capacity_factor=E / K) == T
    (_, (y, sown)), g1 = _run(cfg)(params, x)
    (_, (y_ref, _)), g2 = _run(BASE)(params, x)
    np.testing.assert_allclose(np.asarray(y), np.asarray(y_ref), atol=ATOL)
    assert int(sown[moe.STATS_COLLECTION]["routing"][0].dropped) == 0
    _assert_tree_close(g1, g2)


def test_capacity_drops_tokens_and_counts_them(params_x):
    params, x = params_x
    cf = 0.5
    cfg = dataclasses.replace(BASE, dispatch="capacity", capacity_factor=cf)
    capacity = moe.expert_capacity(T, num_experts=E, top_k=K, capacity_factor=cf)
    assert capacity == math.ceil(cf * T * K / E)
    (_, (y, state)), _ = _run(cfg)(params, x)
    y_ref, dropped_ref, top = _numpy_capacity_layer(params, x, cfg, capacity)
    counts = np.bincount(top.ravel(), minlength=E)
    assert dropped_ref == np.maximum(counts - capacity, 0).sum() > 0
    st = state[moe.STATS_COLLECTION]["routing"][0]
    assert int(st.dropped) == dropped_ref
    np.testing.assert_allclose(float(st.dropped_fraction), dropped_ref / (T * K), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(y), y_ref, atol=ATOL)


# ---------------------------------------------------------------- expert parallelism


@pytest.fixture(scope="module")
def ep_mesh():
    assert jax.device_count() == 8
    return make_mesh(MeshConfig(data=2, expert=4))


@pytest.mark.parametrize(
    "dispatch,impl",
    [("dropless", "tiled"), ("dropless", "ragged_dot"), ("capacity", "auto")],
)
def test_expert_parallel_equals_single_device(params_x, ep_mesh, dispatch, impl):
    params, x = params_x
    cfg = BASE if dispatch == "dropless" else dataclasses.replace(BASE, dispatch=dispatch)
    cfg = dataclasses.replace(cfg, capacity_factor=E / K, grouped_matmul=impl)
    ep_cfg = dataclasses.replace(cfg, expert_parallel=True)
    (v1, (y1, sown1)), g1 = _run(cfg)(params, x)
    with jax.set_mesh(ep_mesh):
        (v2, (y2, sown2)), g2 = _run(ep_cfg)(params, x)
        hlo = _run(ep_cfg).lower(params, x).as_text()
    assert hlo.count("all_to_all") >= 4  # rows out and back, forward and backward
    np.testing.assert_allclose(np.asarray(y2), np.asarray(y1), atol=ATOL)
    np.testing.assert_allclose(float(v1), float(v2), atol=1e-4)
    _assert_tree_close(g1, g2)
    _assert_tree_close(sown1, sown2)


def test_expert_parallel_capacity_drops_per_device_group(params_x, ep_mesh):
    params, x = params_x
    cf = 0.5
    cfg = dataclasses.replace(BASE, dispatch="capacity", capacity_factor=cf, expert_parallel=True)
    with jax.set_mesh(ep_mesh):
        (_, (_, state)), _ = _run(cfg)(params, x)
    # 8 token groups (data x expert) of B/8 sequences; each group has its own capacity
    probs = jax.nn.softmax(x.reshape(-1, D) @ params["router"], axis=-1)
    top = np.asarray(jax.lax.top_k(probs, K)[1]).reshape(8, -1, K)
    cap = moe.expert_capacity(top.shape[1], num_experts=E, top_k=K, capacity_factor=cf)
    want = sum(np.maximum(np.bincount(g.ravel(), minlength=E) - cap, 0).sum() for g in top)
    assert want > 0
    assert int(state[moe.STATS_COLLECTION]["routing"][0].dropped) == want


def test_expert_parallel_rejects_explicit_mesh(params_x):
    params, x = params_x
    ep_cfg = dataclasses.replace(BASE, expert_parallel=True)
    mesh = jax.make_mesh(
        (2, 4), ("data", "expert"), axis_types=(jax.sharding.AxisType.Explicit,) * 2
    )
    with jax.set_mesh(mesh), pytest.raises(ValueError, match="expert_parallel.*Explicit"):
        jax.eval_shape(moe.MoEFeedForward(ep_cfg).apply, {"params": params}, x)


# ---------------------------------------------------------------- aux losses via sow


def test_module_sows_losses_and_aux_loss_averages_layers(params_x):
    params, x = params_x
    (_, (_, sown)), _ = _run(BASE)(params, x)
    aux = sown[moe.AUX_LOSS_COLLECTION]
    routing = moe.route(x.reshape(-1, D) @ params["router"], top_k=K)
    lb = float(moe.load_balancing_loss(routing.probs, routing.experts))
    z = float(moe.router_z_loss(routing.logits))
    np.testing.assert_allclose(float(aux["lb_loss"][0]), lb, rtol=1e-5)
    np.testing.assert_allclose(float(aux["z_loss"][0]), z, rtol=1e-5)
    st = sown[moe.STATS_COLLECTION]["routing"][0]
    np.testing.assert_allclose(
        float(st.router_entropy),
        float(routing_stats(routing.probs, routing.experts).router_entropy),
        rtol=1e-5,
    )
    # two layers (and a scanned [L] stack) are averaged, then weighted (OLMoE 0.01 / 0.001)
    layers = {"l0": aux, "l1": {"lb_loss": (jnp.array(3.0),), "z_loss": (jnp.array(5.0),)}}
    total, metrics = moe.aux_loss(layers, lb_loss_weight=0.01, z_loss_weight=0.001)
    np.testing.assert_allclose(float(total), 0.01 * (lb + 3) / 2 + 0.001 * (z + 5) / 2, rtol=1e-5)
    np.testing.assert_allclose(float(metrics["moe/lb_loss"]), (lb + 3) / 2, rtol=1e-5)
    stacked = {"scan": {"lb_loss": (jnp.array([lb, 3.0]),), "z_loss": (jnp.array([z, 5.0]),)}}
    np.testing.assert_allclose(
        float(moe.aux_loss(stacked, lb_loss_weight=0.01, z_loss_weight=0.001)[0]),
        float(total),
        rtol=1e-6,
    )


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "field,kwargs",
    [
        ("top_k", dict(num_experts=4, top_k=5)),
        ("num_experts", dict(num_experts=0)),
        ("capacity_factor", dict(capacity_factor=0.0)),
        ("dispatch", dict(dispatch="dense")),
        ("grouped_matmul", dict(grouped_matmul="gmm")),
    ],
)
def test_bad_config_names_field(field, kwargs):
    with pytest.raises(ConfigError, match=field):
        moe.MoEConfig(**kwargs)


def test_bad_expert_parallel_layouts_raise_before_compilation(ep_mesh):
    x = jnp.ones((B, S, D))
    with jax.set_mesh(ep_mesh):
        bad_e = dataclasses.replace(BASE, num_experts=6, expert_parallel=True)
        with pytest.raises(ValueError, match="num_experts"):
            jax.eval_shape(moe.MoEFeedForward(bad_e).init, jax.random.key(0), x)
        good = dataclasses.replace(BASE, expert_parallel=True)
        with pytest.raises(ValueError, match="batch"):
            jax.eval_shape(moe.MoEFeedForward(good).init, jax.random.key(0), jnp.ones((6, S, D)))
    with pytest.raises(ValueError, match="expert_parallel"):
        jax.eval_shape(
            moe.MoEFeedForward(dataclasses.replace(BASE, expert_parallel=True)).init,
            jax.random.key(0),
            x,
        )


# ---------------------------------------------------------------- the MoE decoder (phase 2)

DEC = DecoderConfig(
    vocab_size=64, d_model=32, n_layers=2, n_heads=2, head_dim=16, d_ff=64, max_len=16
)
DEC_MOE = dataclasses.replace(
    DEC, moe=moe.MoEConfig(num_experts=4, top_k=2, expert_ff=16, tile_size=8)
)


def test_decoder_config_switches_ffn_per_layer():
    tokens = jnp.zeros((8, 16), jnp.int32)

    def ffn_params(cfg):
        params = jax.eval_shape(Decoder(cfg).init, jax.random.key(0), tokens)["params"]
        return [set(params[f"blocks_{i}"]["ffn"]) for i in range(cfg.n_layers)]

    moe_names, dense_names = {"router", "w1", "w3", "w2"}, {"wi_gate", "wi_up", "wo"}
    assert ffn_params(DEC) == [dense_names, dense_names]
    assert ffn_params(DEC_MOE) == [moe_names, moe_names]  # OLMoE: every layer
    assert ffn_params(dataclasses.replace(DEC_MOE, moe_layers=(1,))) == [dense_names, moe_names]
    with pytest.raises(ValueError, match="moe_layers"):
        dataclasses.replace(DEC_MOE, moe_layers=(0, 2))
    with pytest.raises(ValueError, match="moe_layers"):
        dataclasses.replace(DEC, moe_layers=(0,))


@pytest.fixture(scope="module")
def moe_lm():
    tokens = jax.random.randint(jax.random.key(0), (8, 16), 0, DEC_MOE.vocab_size)
    model = Decoder(DEC_MOE)
    params = jax.jit(model.init)(jax.random.key(1), tokens)["params"]
    return model, nn.unbox(params), tokens


def _lm_loss(model, cfg):
    def loss(params, tokens):
        logits, sown = model.apply(
            {"params": params},
            tokens[:, :-1],
            mutable=[moe.AUX_LOSS_COLLECTION, moe.STATS_COLLECTION],
        )
        ce = next_token_loss(logits, tokens[:, 1:])
        aux, metrics = moe.aux_loss(
            sown[moe.AUX_LOSS_COLLECTION],
            lb_loss_weight=cfg.moe.lb_loss_weight,
            z_loss_weight=cfg.moe.z_loss_weight,
        )
        return ce + aux, (ce, aux, metrics, logits, sown)

    return loss


def test_decoder_moe_aux_losses_and_gradients(moe_lm):
    model, params, tokens = moe_lm
    (total, (ce, aux, metrics, _, sown)), grads = jax.jit(
        jax.value_and_grad(_lm_loss(model, DEC_MOE), has_aux=True)
    )(params, tokens)
    lbs = [float(sown[moe.AUX_LOSS_COLLECTION][f"blocks_{i}"]["ffn"]["lb_loss"][0]) for i in (0, 1)]
    zs = [float(sown[moe.AUX_LOSS_COLLECTION][f"blocks_{i}"]["ffn"]["z_loss"][0]) for i in (0, 1)]
    np.testing.assert_allclose(float(aux), 0.01 * np.mean(lbs) + 0.001 * np.mean(zs), rtol=1e-5)
    np.testing.assert_allclose(float(total), float(ce) + float(aux), rtol=1e-6)
    assert abs(float(ce) - math.log(DEC_MOE.vocab_size)) < 0.5  # untrained: near uniform
    stats = sown[moe.STATS_COLLECTION]["blocks_1"]["ffn"]["routing"][0]
    np.testing.assert_allclose(float(jnp.sum(stats.load)), 1.0, rtol=1e-6)
    for leaf in jax.tree.leaves(grads):
        assert np.all(np.isfinite(np.asarray(leaf)))
    for i in (0, 1):
        ffn = grads[f"blocks_{i}"]["ffn"]
        assert all(float(jnp.abs(ffn[n]).max()) > 0 for n in ("router", "w1", "w3", "w2"))


def test_decoder_with_expert_parallel_moe_equals_single_device(moe_lm, ep_mesh):
    model, params, tokens = moe_lm
    ep_cfg = dataclasses.replace(
        DEC_MOE, moe=dataclasses.replace(DEC_MOE.moe, expert_parallel=True)
    )
    logits = jax.jit(model.apply)({"params": params}, tokens)
    with jax.set_mesh(ep_mesh):
        logits_ep = jax.jit(Decoder(ep_cfg).apply)({"params": params}, tokens)
    np.testing.assert_allclose(np.asarray(logits_ep), np.asarray(logits), atol=1e-5)


def test_olmoe_1b_7b_preset_sizes_and_yaml():
    cfg = OLMOE_1B_7B
    assert (cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.vocab_size) == (2048, 16, 16, 50304)
    assert (cfg.moe.num_experts, cfg.moe.top_k, cfg.moe.expert_ff) == (64, 8, 1024)
    assert not cfg.moe.normalize_topk and all(cfg.is_moe_layer(i) for i in range(16))
    shapes = jax.eval_shape(
        Decoder(cfg).init, jax.random.key(0), jax.ShapeDtypeStruct((1, 8), jnp.int32)
    )["params"]
    sizes = {
        jax.tree_util.keystr(path): math.prod(leaf.shape)
        for path, leaf in jax.tree_util.tree_flatten_with_path(nn.unbox(shapes))[0]
    }
    total = sum(sizes.values())
    expert = sum(v for k, v in sizes.items() if k.endswith(("['w1']", "['w2']", "['w3']")))
    active = total - expert + expert * cfg.moe.top_k // cfg.moe.num_experts
    assert 6.8e9 < total < 7.0e9  # "7B total"
    assert 1.2e9 < active < 1.35e9  # "1B active" (1.3B)
    preset = load_yaml_text(
        "vocab_size: 50304\nd_model: 2048\nn_layers: 16\nn_heads: 16\nhead_dim: 128\n"
        "d_ff: 1024\nmax_len: 4096\nqk_norm: true\n"
        "moe: {num_experts: 64, top_k: 8, expert_ff: 1024}\n"
    )
    assert from_dict(DecoderConfig, preset) == cfg
