"""The distillation pipeline's teacher state: snapshots every ``every`` steps, the trajectory as a
TeacherRun, and the refusal of a run without intermediate checkpoints."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core import optim
from jaxlab.core.config import ConfigError
from jaxlab.core.optim import OptimConfig
from jaxlab.lm import distill
from jaxlab.lm import distill_pipeline as dp

SPEC = distill.TrainSpec(steps=6, batch=1, every=2, optim=OptimConfig(name="sgd", lr=0.5))


def test_teacher_keeps_a_snapshot_every_checkpoint_and_its_losses():
    """On ``loss = w²/2`` SGD at 0.5 halves ``w`` each step: snapshots after steps 2, 4, 6 hold
    ``w₀ / 2^step`` and the losses are those before each step."""
    opt = optim.make(SPEC.optim, SPEC.steps)
    state = dp.init_teacher({"w": jnp.array(8.0)}, opt, jax.random.PRNGKey(0), SPEC, {})
    step = jax.jit(lambda s: dp.teacher_update(s, lambda p: 0.5 * p["w"] ** 2, opt, SPEC))
    with pytest.raises(ConfigError, match="checkpoint_steps"):
        dp.teacher_run(step(state)[0], SPEC)  # one step: no checkpoint yet
    for _ in range(SPEC.steps):
        state, metrics = step(state)
    run = dp.teacher_run(jax.device_get(state), SPEC)
    np.testing.assert_array_equal(run.steps, [2, 4, 6])
    np.testing.assert_allclose(run.params["w"], [2.0, 0.5, 0.125])
    np.testing.assert_allclose(run.losses, [0.5 * (8.0 / 2**t) ** 2 for t in range(6)])
