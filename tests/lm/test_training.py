"""The LM optimiser (``jaxlab.lm.training.OPTIM``, built by ``jaxlab.core.optim``): warmup and
cosine values of the schedule at given steps, the AdamW update follows it, and the traced learning
rate gives the same update as a constant one."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxlab.core import optim
from jaxlab.lm.training import OPTIM

CFG = dataclasses.replace(OPTIM, lr=1e-2, warmup_steps=10, min_lr_ratio=0.1, weight_decay=0.0)
TOTAL = 110


def make_optimizer(cfg, total, lr=None):
    return optim.make(cfg, total, lr=lr)


def lr_schedule(cfg, total):
    return optim.learning_rate(cfg, total)


def _expected(step: int) -> float:
    if step < 10:
        return 1e-2 * step / 10
    frac = min(step - 10, 100) / 100
    return 1e-2 * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


@pytest.mark.parametrize("step", [0, 1, 5, 10, 35, 60, 85, 110, 200])
def test_schedule_values(step):
    assert float(lr_schedule(CFG, TOTAL)(step)) == pytest.approx(
        _expected(step), rel=1e-5, abs=1e-9
    )
    # the peak, the half-way point of the cosine and the floor, as numbers
    assert _expected(10) == pytest.approx(1e-2) and _expected(60) == pytest.approx(5.5e-3)
    assert _expected(110) == pytest.approx(1e-3)


def test_adamw_update_follows_the_schedule():
    """With a constant gradient of 1 and zero weight decay, Adam's step is -lr_t (bias-corrected
    moments are exactly 1) for every step t."""
    opt = make_optimizer(CFG, TOTAL)
    params = jnp.zeros(1)
    state = opt.init(params)
    for t in range(30):
        upd, state = opt.update(jnp.ones(1), state, params)
        assert float(upd[0]) == pytest.approx(-_expected(t), rel=1e-4, abs=1e-9)


def test_traced_lr_equals_constant_lr():
    g = {"w": jnp.array([0.3, -2.0])}
    p = {"w": jnp.array([1.0, 1.0])}

    def run(opt):
        s = opt.init(p)
        outs = []
        for _ in range(3):
            u, s = opt.update(g, s, p)
            outs.append(u["w"])
        return jnp.stack(outs)

    const = run(make_optimizer(CFG, TOTAL))
    traced = jax.jit(lambda lr: run(make_optimizer(CFG, TOTAL, lr=lr)))(jnp.float32(CFG.lr))
    np.testing.assert_allclose(traced, const, rtol=1e-6)
    assert isinstance(make_optimizer(CFG, TOTAL), optax.GradientTransformation)
