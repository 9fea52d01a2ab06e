"""Routing analysis (OLMoE §4): router saturation and expert co-activation on hand-made top-k
assignments."""

import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.lm import routing_analysis


def test_saturation_and_coactivation_analytic():
    a = jnp.array([[0, 1], [2, 3], [4, 5]])
    b = jnp.array([[1, 0], [2, 7], [6, 7]])
    # per token: 2/2, 1/2, 0/2
    assert float(routing_analysis.router_saturation(a, b)) == pytest.approx(0.5)
    assert float(routing_analysis.router_saturation(a, a)) == 1.0
    co = np.asarray(routing_analysis.coactivation(jnp.array([[0, 1], [0, 2], [0, 1], [3, 1]]), 4))
    # expert 0 is used by 3 tokens, with 1 twice and 2 once
    np.testing.assert_allclose(co[0], [0, 2 / 3, 1 / 3, 0])
    np.testing.assert_allclose(co[1], [2 / 3, 0, 0, 1 / 3])
    assert co[2, 0] == 1.0


def test_moe_objective_weights_come_from_the_traced_values():
    """``L = CE + w_LB L_LB + w_RZ L_RZ`` with the weights of ``hparams`` (the config's when
    absent), so a sweep over them changes the loss of one compiled program."""
    import jax

    from jaxlab.lm import olmoe as olmoe_lib
    from jaxlab.lm.model import Decoder, DecoderConfig
    from jaxlab.lm.moe import MoEConfig

    cfg = DecoderConfig(
        d_model=16, n_layers=1, n_heads=2, head_dim=8, d_ff=32, max_len=8,
        moe=MoEConfig(num_experts=4, top_k=2, expert_ff=16),
    )  # fmt: skip
    model = Decoder(cfg)
    tokens = jax.random.randint(jax.random.PRNGKey(0), (2, 9), 0, cfg.vocab_size)
    params = jax.jit(model.init)(jax.random.PRNGKey(1), tokens[:, :-1])  # one program
    loss = jax.jit(lambda hp: olmoe_lib.moe_objective(model, params, tokens, hp))
    default, m = loss({})
    ce, lb, z = m["ce_loss"], m["moe/lb_loss"], m["moe/z_loss"]
    np.testing.assert_allclose(default, ce + 0.01 * lb + 0.001 * z, rtol=1e-6)
    hp = {"model.moe.lb_loss_weight": jnp.float32(0.5), "model.moe.z_loss_weight": jnp.float32(0)}
    np.testing.assert_allclose(loss(hp)[0], ce + 0.5 * lb, rtol=1e-6)
