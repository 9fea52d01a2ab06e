"""The runtime type checker of the suite (``tests/typecheck.py``): a wrong shape passed to an
annotated jaxlab function fails; the numeric tower; pytree and config dataclasses keep their own
validation (a bad config field is still the house ConfigError naming it)."""

import dataclasses
import os

import jax
import jax.numpy as jnp
import pytest
from beartype import beartype
from jaxtyping import Array, Float, TypeCheckError, jaxtyped

from jaxlab.core.config import ConfigError
from jaxlab.envs.game24 import Game24State
from jaxlab.lm.model import next_token_loss
from jaxlab.rl.ppo import PPOConfig
from tests import conftest
from tests.typecheck import checker, unchecked

LOGITS = jnp.zeros((2, 5, 7))


def test_a_wrong_shape_fails_an_annotated_function():
    """``next_token_loss(logits [b, s, v], targets [b, s])`` with 4 target positions for 5
    logit positions: a TypeCheckError naming ``targets``; the right shape passes."""
    checked = jaxtyped(typechecker=checker)(unchecked(next_token_loss))
    wrong = jnp.zeros((2, 4), jnp.int32)
    with pytest.raises(TypeCheckError, match="targets"):
        checked(LOGITS, wrong)
    assert checked(LOGITS, jnp.zeros((2, 5), jnp.int32)).shape == ()
    # the suite runs checked (CI included) unless JAXLAB_TYPECHECK=0 asks otherwise: then the
    # hook wraps the library function itself
    if os.environ.get("JAXLAB_TYPECHECK", "1") != "0":
        assert conftest.TYPECHECK
        with pytest.raises(TypeCheckError, match="targets"):
            next_token_loss(LOGITS, wrong)


def test_numeric_tower_and_the_dataclasses_that_validate_themselves():
    @jaxtyped(typechecker=checker)
    def scale(x: Float[Array, " n"], s: float) -> Float[Array, " n"]:
        return x * s

    assert scale(jnp.ones(3), 2).shape == (3,)  # an int is a float (PEP 484 tower)
    with pytest.raises(TypeCheckError):
        scale(jnp.ones(3), "2")

    # a config dataclass: the house error names the field, not the checker's
    cfg_cls = jaxtyped(typechecker=checker)(PPOConfig)
    with pytest.raises(ConfigError, match="num_minibatches"):
        cfg_cls(num_envs=4, num_steps=3, num_minibatches=5)

    # a pytree dataclass is rebuilt by JAX through __init__ with batched leaves (here a stack of
    # two [4] states): not checked, while plain beartype would refuse the [2, 4] field
    state = Game24State(jnp.arange(4.0), jnp.ones(4, bool), jnp.int32(0))
    two = lambda cls: jax.tree.map(  # noqa: E731
        lambda a: jnp.stack([a, a]), cls(state.numbers, state.alive, state.t)
    )
    assert two(jaxtyped(typechecker=checker)(Game24State)).numbers.shape == (2, 4)
    plain = jaxtyped(typechecker=beartype)(
        dataclasses.make_dataclass("Plain", [("numbers", Float[Array, " 4"])], frozen=True)
    )
    with pytest.raises(TypeCheckError, match="numbers"):
        plain(jnp.zeros((2, 4)))
