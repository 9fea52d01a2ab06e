"""jaxlab.nn.conv: the im2col convolutions equal flax's (values and gradients), take leading
axes, reject bad settings by name, and keep convolutions out of a scanned training step."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.nn.conv import Conv, ConvTranspose, conv_pads
from tests.typecheck import checks_off

# (side, kernel, stride, padding): odd and even sides, kernels smaller, equal to and larger
# than the stride (the pixel encoder's 8x8/4, the decoder's 4x4/2), both paddings
CASES = [
    (32, 8, 4, "SAME"),
    (15, 4, 2, "SAME"),
    (8, 3, 1, "SAME"),
    (9, 3, 2, "SAME"),
    (7, 1, 1, "SAME"),
    (16, 4, 2, "VALID"),
    (11, 5, 3, "VALID"),
    (6, 2, 3, "SAME"),
]


def _pairs(x):
    """Ours and flax's outputs and kernel gradients, every case and both kinds, in one program."""
    out = []
    for i, (n, k, s, pad) in enumerate(CASES):
        side = x[:, :n, : n + 1]
        for mine, ref in (
            (Conv(5, k, s, pad), nn.Conv(5, (k, k), (s, s), padding=pad)),
            (ConvTranspose(5, k, s, pad), nn.ConvTranspose(5, (k, k), (s, s), padding=pad)),
        ):
            kernel = jax.random.normal(jax.random.key(i), (k, k, 3, 5))
            p = {"params": {"kernel": kernel, "bias": jnp.linspace(-1, 1, 5)}}
            loss = lambda p, m, side=side: jnp.sum(jnp.sin(m.apply(p, side)))
            out.append(
                (
                    (mine.apply(p, side), jax.grad(loss)(p, mine)["params"]["kernel"]),
                    (ref.apply(p, side), jax.grad(loss)(p, ref)["params"]["kernel"]),
                )
            )
    return out


def test_conv_and_transpose_equal_flax_values_and_kernel_gradients():
    x = jax.random.normal(jax.random.key(9), (2, 32, 33, 3))
    results = jax.jit(_pairs)(x)
    names = [(c, kind) for c in CASES for kind in ("Conv", "ConvTranspose")]
    for (case, kind), ((y, g), (y_ref, g_ref)) in zip(names, results, strict=True):
        assert y.shape == y_ref.shape, (kind, case)
        np.testing.assert_allclose(y, y_ref, atol=2e-5, err_msg=f"{kind} {case}")
        np.testing.assert_allclose(g, g_ref, rtol=1e-4, atol=2e-4, err_msg=f"{kind} {case} grad")


def test_parameters_are_flax_shaped_and_leading_axes_are_batch_axes():
    x = jax.random.normal(jax.random.key(0), (2, 3, 9, 9, 4))
    for mine, ref in ((Conv(6, 3, 2), nn.Conv(6, (3, 3), (2, 2))),
                      (ConvTranspose(6, 4, 2), nn.ConvTranspose(6, (4, 4), (2, 2)))):  # fmt: skip
        p = mine.init(jax.random.key(1), x)
        p_ref = ref.init(jax.random.key(1), x[0])
        shapes = jax.tree.map(jnp.shape, (p, p_ref))
        assert shapes[0] == shapes[1]
        np.testing.assert_array_equal(p["params"]["kernel"], p_ref["params"]["kernel"])
        y = mine.apply(p, x)
        y_flat = mine.apply(p, x.reshape((6, 9, 9, 4)))
        np.testing.assert_allclose(y, y_flat.reshape(y.shape), atol=1e-6)


def test_scanned_training_step_compiles_without_convolutions():
    """What the module is for: XLA:CPU runs a convolution's weight gradient inside a while loop
    10-20x slower; the scanned step of an encoder-decoder must lower to dots, not convolutions
    (flax's layers in the same program do lower to convolutions: the check can fail)."""

    def hlo(enc, dec):
        class AE(nn.Module):
            enc: nn.Module
            dec: nn.Module

            def __call__(self, x):
                return self.dec(nn.relu(self.enc(x)))

        m = AE(enc, dec)
        x = jnp.ones((2, 16, 16, 3))
        p = m.init(jax.random.key(0), x)

        def step(p, _):
            g = jax.grad(lambda p: jnp.mean((m.apply(p, x) - x) ** 2))(p)
            return jax.tree.map(lambda a, b: a - 0.1 * b, p, g), None

        run = jax.jit(lambda p: jax.lax.scan(step, p, None, 2)[0])
        return run.lower(p).compile().as_text()

    mine = hlo(Conv(4, 4, 2), ConvTranspose(3, 4, 2))
    flax_ = hlo(nn.Conv(4, (4, 4), (2, 2)), nn.ConvTranspose(3, (4, 4), (2, 2)))
    assert " convolution(" in flax_
    assert " convolution(" not in mine


def test_bad_settings_name_the_field():
    x = jnp.ones((1, 8, 8, 2))
    with pytest.raises(ValueError, match="padding='CIRCULAR'"):
        Conv(3, 3, padding="CIRCULAR").init(jax.random.key(0), x)
    with pytest.raises(ValueError, match="strides=0"):
        ConvTranspose(3, 3, strides=0).init(jax.random.key(0), x)
    with pytest.raises(ValueError, match="kernel_size=\\(3, 3, 3\\)"), checks_off():
        Conv(3, (3, 3, 3)).init(jax.random.key(0), x)  # the layer's own message, as users see it
    assert conv_pads(9, 3, 2, "SAME") == (1, 1, 5)
