"""Networks, EDM preconditioning and the training losses."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree

from jaxlab.diffusion import schedules as sc
from jaxlab.diffusion.dit import DiT
from jaxlab.diffusion.gmm import ring_mixture
from jaxlab.diffusion.init import init_params
from jaxlab.diffusion.losses import edm_loss, eps_loss
from jaxlab.diffusion.mlp_denoiser import MLPDenoiser
from jaxlab.diffusion.precond import edm_coefficients, edm_denoise
from jaxlab.diffusion.unet import UNet


def test_image_networks_shapes_zero_init_and_conditioning():
    """U-Net and DiT map (B, 8, 8, 1) to the same shape, output zero at init (zero-initialised
    last layers), and once perturbed depend on the conditioning scalar. (The U-Net is one level
    here; the two-level U-Net trains in the digits recipe test.)"""
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 8, 8, 1))
    c = jnp.array([0.1, 0.9])
    for net in (
        UNet(channels=(8,), attention=True, heads=2, emb_dim=16),
        DiT(width=32, depth=1, heads=2),
    ):

        @jax.jit
        def run(x, c, net=net):
            params = init_params(net, jax.random.PRNGKey(1), x, c)
            # one random draw for the whole flat parameter vector (a threefry draw per leaf
            # costs ~0.3 s of compile each)
            flat, unravel = ravel_pytree(params)
            noisy = unravel(flat + 0.05 * jax.random.normal(jax.random.PRNGKey(2), flat.shape))
            # one (vmapped) forward pass compiles once: (init params, x, c), (perturbed, x, c),
            # (perturbed, x, reversed c)
            both = jax.tree.map(lambda u, v: jnp.stack([u, v, v]), params, noisy)
            xs = jnp.stack([x, x, x])
            cs = jnp.stack([c, c, c[::-1]])
            return jax.vmap(net.apply)(both, xs, cs)

        out, a, b = run(x, c)
        assert out.shape == x.shape
        np.testing.assert_allclose(out, 0.0)
        assert float(jnp.max(jnp.abs(a - b))) > 1e-4


def test_edm_preconditioning():
    """EDM Table 1: c_in^2 (s^2 + sd^2) = 1, c_out^2 (s^2 + sd^2) = s^2 sd^2, c_noise = ln(s)/4;
    with F = 0 the denoiser is c_skip x."""
    sigma = jnp.array([0.01, 0.5, 80.0])
    c_skip, c_out, c_in, c_noise = edm_coefficients(sigma, 0.5)
    np.testing.assert_allclose(c_in**2 * (sigma**2 + 0.25), 1.0, rtol=1e-6)
    np.testing.assert_allclose(c_out**2 * (sigma**2 + 0.25), sigma**2 * 0.25, rtol=1e-6)
    np.testing.assert_allclose(c_noise, jnp.log(sigma) / 4)
    x = jnp.ones((3, 2))
    np.testing.assert_allclose(edm_denoise(lambda xi, c: 0 * xi, x, sigma), c_skip[:, None] * x)


def test_mlp_learns_the_ring_with_both_losses():
    """A few hundred Adam steps with the eps loss (VP-linear) and with the EDM loss: the network's
    eps / denoiser moves much closer to the exact mixture oracle's."""
    ring = ring_mixture()
    vp = sc.VPLinear()
    net = MLPDenoiser(width=64, depth=2, emb_dim=32, time_scale=1000.0)
    net_edm = MLPDenoiser(width=64, depth=2, emb_dim=32)

    def eps_model(p, x, t):
        return net.apply(p, x, t)

    def denoiser(p, x, s):
        return edm_denoise(lambda xi, c: net_edm.apply(p, xi, c), x, s)

    def train(objective, module):
        opt = optax.adam(3e-3)
        p0 = init_params(module, jax.random.PRNGKey(0), jnp.zeros((1, 2)), jnp.ones(1))

        def step(carry, k):
            p, s = carry
            kd, kl = jax.random.split(k)
            g = jax.grad(objective)(p, kl, ring.sample(kd, 256))
            u, s = opt.update(g, s, p)
            return (optax.apply_updates(p, u), s), None

        keys = jax.random.split(jax.random.PRNGKey(1), 400)
        (p, _), _ = jax.lax.scan(step, (p0, opt.init(p0)), keys)
        return p0, p

    def oracle_gap(eps_p, den_p):
        x0 = ring.sample(jax.random.PRNGKey(4), 512)
        noise = jax.random.normal(jax.random.PRNGKey(5), x0.shape)
        t = jnp.linspace(0.05, 0.95, 512)
        xt = vp.alpha(t)[:, None] * x0 + vp.sigma(t)[:, None] * noise
        e = jnp.mean((eps_model(eps_p, xt, t) - ring.eps(xt, vp.alpha(t), vp.sigma(t))) ** 2)
        s = jnp.exp(jnp.linspace(-3.0, 1.0, 512))
        xs = x0 + s[:, None] * noise
        d = jnp.mean((denoiser(den_p, xs, s) - ring.denoise(xs, jnp.ones_like(s), s)) ** 2)
        return e, d

    @jax.jit
    def run():
        e0, e1 = train(lambda p, k, x0: eps_loss(k, lambda x, t: eps_model(p, x, t), x0, vp), net)
        d0, d1 = train(lambda p, k, x0: edm_loss(k, lambda x, s: denoiser(p, x, s), x0), net_edm)
        return oracle_gap(e0, d0), oracle_gap(e1, d1)

    (e_before, d_before), (e_after, d_after) = run()
    print(
        f"eps gap {float(e_before):.4f} -> {float(e_after):.4f}; "
        f"denoiser gap {float(d_before):.4f} -> {float(d_after):.4f}"
    )
    assert float(e_after) < 0.3 * float(e_before)
    assert float(d_after) < 0.3 * float(d_before)
