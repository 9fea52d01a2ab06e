"""DiTBlock: key padding mask, cross-attention (residual and the original's non-residual form)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from jaxlab.diffusion.dit import DiTBlock

B, N, C, W = 2, 5, 4, 16


@pytest.fixture(scope="module")
def inputs():
    """Inputs and one perturbed parameter set (shared: both cross forms have the same tree)."""
    k = jax.random.split(jax.random.PRNGKey(2), 3)
    x = jax.random.normal(k[0], (B, N, W))
    emb = jax.random.normal(k[1], (B, W))
    ctx = jax.random.normal(k[2], (B, C, 8))

    @jax.jit
    def init(key):
        params = DiTBlock(W, 2).init(key, x, emb, context=ctx)
        flat, unravel = ravel_pytree(params)
        return unravel(flat + 0.1 * jax.random.normal(jax.random.PRNGKey(1), flat.shape))

    return x, emb, ctx, init(jax.random.PRNGKey(0))


def test_padding_mask_hides_padded_tokens(inputs):
    """Real tokens' outputs do not depend on the padded tokens' values."""
    x, emb, _, p = inputs
    mask = jnp.array([[True, True, True, False, False]] * B)
    blk = DiTBlock(W, 2)
    f = jax.jit(lambda x: blk.apply(p, x, emb, mask=mask))
    x2 = x.at[:, 3:].set(100.0)
    np.testing.assert_allclose(f(x)[:, :3], f(x2)[:, :3], rtol=1e-5, atol=1e-5)
    assert float(jnp.max(jnp.abs(f(x)[:, 3:] - f(x2)[:, 3:]))) > 1e-3


@pytest.mark.parametrize("residual", [False, True], ids=["original", "residual"])
def test_cross_attention_forms(inputs, residual):
    """With identical context tokens cross-attention returns the same vector for every query, so
    the non-residual block (x <- XAttn(...); x <- MLP2(LN4(x))) outputs one vector for all
    tokens while the residual block keeps the tokens apart. A masked context token is ignored."""
    x, emb, ctx, p = inputs
    blk = DiTBlock(W, 2, cross_residual=residual)
    same = jnp.broadcast_to(ctx[:, :1], ctx.shape)
    out = jax.jit(lambda x, c: blk.apply(p, x, emb, context=c))(x, same)
    spread = float(jnp.max(jnp.abs(out - out[:, :1])))
    if residual:
        assert spread > 1e-2
    else:
        assert spread < 1e-5
    cmask = jnp.array([[True, True, True, False]] * B)
    f = jax.jit(lambda c: blk.apply(p, x, emb, context=c, context_mask=cmask))
    np.testing.assert_allclose(f(ctx), f(ctx.at[:, 3].set(50.0)), rtol=1e-5, atol=1e-5)


def test_no_context_has_no_cross_parameters(inputs):
    x, emb, _, p = inputs
    params = jax.eval_shape(lambda k: DiTBlock(W, 2).init(k, x, emb), jax.random.PRNGKey(0))
    assert set(params["params"]) == {"ada", "attn", "mlp"}
    with pytest.raises(ValueError, match="context_mask"):
        DiTBlock(W, 2).apply(p, x, emb, context_mask=jnp.ones((B, C), bool))
