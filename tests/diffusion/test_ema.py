"""The weights' moving average: the warm-up decay ``min(max_decay, (1 + k) / (10 + k))``."""

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.diffusion.ema import ema_update


def test_warm_up_then_the_cap():
    """Step 0 keeps 1/10 of the old average, step 90 keeps 91/100, and a cap below the warm-up
    value wins; a traced cap gives the same numbers under jit."""
    p, e = {"w": jnp.asarray([1.0, 3.0])}, {"w": jnp.asarray([0.0, -1.0])}
    for step, cap, decay in ((0, 0.999, 0.1), (90, 0.999, 0.91), (90, 0.5, 0.5)):
        got = jax.jit(ema_update)(p, e, jnp.int32(step), jnp.float32(cap))["w"]
        want = decay * np.asarray(e["w"]) + (1 - decay) * np.asarray(p["w"])
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)
