"""The shared optimiser config: schedules, update rules, traced values, validation."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxlab.core import config as config_lib
from jaxlab.core import optim
from jaxlab.core.config import ConfigError


def _rate(cfg, total, step):
    r = optim.learning_rate(cfg, total)
    return float(r(step)) if callable(r) else float(r)


@pytest.mark.parametrize(
    ("schedule", "want"),
    [
        # warm-up 10 steps to lr=2, then to 0.1 * 2 at step 110
        ("constant", [0.0, 1.0, 2.0, 2.0, 2.0, 2.0]),
        ("linear", [0.0, 1.0, 2.0, 1.1, 0.2, 0.2]),
        ("cosine", [0.0, 1.0, 2.0, 1.1, 0.2, 0.2]),
    ],
)
def test_schedules_warm_up_then_decay_to_the_floor(schedule, want):
    cfg = optim.OptimConfig(lr=2.0, schedule=schedule, warmup_steps=10, min_lr_ratio=0.1)
    got = [_rate(cfg, 110, s) for s in (0, 5, 10, 60, 110, 500)]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_constant_rate_without_warmup_is_the_scalar_itself():
    cfg = optim.OptimConfig(lr=0.3)
    assert optim.learning_rate(cfg, 100) == 0.3  # no schedule counter in the optimiser state


def _run(tx, steps=5):
    params = {"w": jnp.array([1.0, -2.0, 3.0])}
    state = tx.init(params)
    for _ in range(steps):
        grads = jax.grad(lambda p: jnp.sum(p["w"] ** 2))(params)
        updates, state = tx.update(grads, state, params)
        params = optax.apply_updates(params, updates)
    return np.asarray(params["w"])


@pytest.mark.parametrize(
    ("cfg", "reference"),
    [
        (
            optim.OptimConfig(name="adamw", lr=0.1, weight_decay=0.5, clip_norm=1.0),
            optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(0.1, weight_decay=0.5)),
        ),
        (
            optim.OptimConfig(name="adam", lr=0.1, weight_decay=0.5),
            optax.chain(optax.add_decayed_weights(0.5), optax.adam(0.1)),
        ),
        (
            optim.OptimConfig(name="sgd", lr=0.1, momentum=0.9, nesterov=True),
            optax.sgd(0.1, momentum=0.9, nesterov=True),
        ),
        (optim.OptimConfig(name="adam", lr=0.1), optax.adam(0.1)),
    ],
    ids=["adamw-clip", "adam-l2", "sgd-nesterov", "adam"],
)
def test_update_rules_equal_optax_chains(cfg, reference):
    np.testing.assert_allclose(_run(optim.make(cfg, 100)), _run(reference), rtol=1e-6)


def test_traced_rate_and_decay_match_constants_and_vmap_over_values():
    cfg = optim.OptimConfig(lr=0.1, weight_decay=0.01, schedule="cosine", warmup_steps=2)
    params = {"w": jnp.array([1.0, -2.0, 3.0])}
    state0 = optim.make(cfg, 10).init(params)

    def steps(hp):
        tx = optim.from_hparams(cfg, 10, hp)
        p, s = params, state0
        for _ in range(4):
            g = jax.grad(lambda q: jnp.sum(q["w"] ** 2))(p)
            u, s = tx.update(g, s, p)
            p = optax.apply_updates(p, u)
        return p["w"]

    lrs = jnp.array([0.1, 0.3])
    hp = {"optim.lr": lrs, "optim.weight_decay": jnp.array([0.01, 0.01])}
    batched = jax.jit(jax.vmap(steps))(hp)
    for i, lr in enumerate([0.1, 0.3]):
        alone = _run(optim.make(dataclasses.replace(cfg, lr=lr), 10), steps=4)
        np.testing.assert_allclose(batched[i], alone, rtol=1e-5)
    assert optim.traced_keys("optim.actor") == ("optim.actor.lr", "optim.actor.weight_decay")
    assert set(optim.hparams(cfg)) == set(optim.traced_keys())


@dataclasses.dataclass(frozen=True)
class _Roles:
    actor: optim.OptimConfig = optim.OptimConfig()
    critic: optim.OptimConfig = optim.OptimConfig()


@dataclasses.dataclass(frozen=True)
class _Cfg:
    optim: _Roles = _Roles()


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("optim.critic.lr=-1", "optim.critic.lr"),
        ("optim.actor.clip_norm=-1", "optim.actor.clip_norm"),
        ("optim.actor.b2=1.0", "optim.actor.b2"),
        ("optim.actor.min_lr_ratio=2", "optim.actor.min_lr_ratio"),
        ("optim.actor.weight_decay=-0.1", "optim.actor.weight_decay"),
        ("optim.actor.schedule=step", "optim.actor.schedule"),
    ],
)
def test_bad_values_name_the_full_dotted_key(override, key):
    with pytest.raises(ConfigError) as e:
        config_lib.resolve(_Cfg, overrides=[override])
    assert f"'{key}'" in str(e.value)


def test_unknown_optim_key_names_the_closest():
    with pytest.raises(ConfigError) as e:
        config_lib.resolve(_Cfg, overrides=["optim.actor.weight_decy=0.1"])
    assert "'optim.actor.weight_decy'" in str(e.value)
    assert "did you mean 'weight_decay'" in str(e.value)


def test_registry_finds_installed_recipes_by_entry_point_and_defaults_their_presets():
    from jaxlab.core import recipe as recipe_lib

    names = recipe_lib.names()
    assert {"kinetix-ppo", "lm-tiny", "sac", "planner"} <= set(names)
    lm = recipe_lib.get("lm-tiny")
    assert lm.presets_dir.name == "lm-tiny" and "tiny" in lm.presets()
    with pytest.raises(ConfigError) as e:
        recipe_lib.get("lm-tiyn")
    assert "did you mean 'lm-tiny'" in str(e.value)


@pytest.mark.parametrize("name", ["adam", "sgd"])
def test_state_structure_follows_which_keys_are_traced_not_their_values(name):
    params = {"w": jnp.ones(3)}
    cfg = optim.OptimConfig(name=name, lr=0.1)  # no decay in the config
    traced = optim.hparams(cfg)  # rate and decay traced
    at_init = jax.tree.structure(optim.from_hparams(cfg, 10, traced).init(params))
    swept = {"optim.lr": jnp.float32(0.2), "optim.weight_decay": jnp.float32(0.5)}
    assert jax.tree.structure(optim.from_hparams(cfg, 10, swept).init(params)) == at_init
    # the traced decay acts (an L2 term on the gradient), and at 0 it is exactly the plain rule
    plain = _run(optim.make(cfg, 10))
    np.testing.assert_array_equal(_run(optim.from_hparams(cfg, 10, traced)), plain)
    decayed = _run(optim.from_hparams(cfg, 10, swept))
    reference = optax.chain(optax.add_decayed_weights(0.5), optim.make(cfg, 10, lr=0.2))
    np.testing.assert_allclose(decayed, _run(reference), rtol=1e-6)
    rate_only = optim.from_hparams(cfg, 10, {"optim.lr": jnp.float32(0.2)})
    assert jax.tree.structure(rate_only.init(params)) == jax.tree.structure(
        optim.make(cfg, 10).init(params)
    )
