"""Shared, compiled-once helpers for the env tests (imported as ``env_probes``).

Compiling a Kinetix step is the expensive part of these tests (the physics engine), so every
test that needs simulated steps goes through ``probe(name)``: one env per registered name (built
with its ``test_options``) and one jitted batched rollout per *equal* env (``KinetixEnv``s with
the same configuration compare equal, so e.g. ``kinetix-level`` on the demo S level shares
``kinetix-s``'s compiled program). Rollouts take initial states, so the same program serves the
contract tests, hand-built reward scenes and padded levels of the same size.
"""

from __future__ import annotations

import dataclasses
import functools
import tempfile
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab import envs

B = 2  # batch of every compiled rollout
T = 8  # steps of every compiled rollout


def rollout_one(env, state, actions, keys, params):
    """``T`` auto-resetting steps from ``state``: per-step (obs, state, reward, terminated,
    truncated, info), stacked."""

    def body(s, xs):
        a, k = xs
        obs, s2, r, term, trunc, info = env.step(k, s, a, params)
        return s2, (obs, s2, r, term, trunc, info)

    _, out = jax.lax.scan(body, state, (actions, keys))
    return out


@functools.partial(jax.jit, static_argnums=0)
def batched_rollout(env, states, actions, keys, params):
    """``rollout_one`` over a batch (``vmap``), compiled once per equal env."""
    return jax.vmap(rollout_one, in_axes=(None, 0, 0, 0, None))(env, states, actions, keys, params)


@dataclasses.dataclass
class Probe:
    name: str
    env: Any
    params: Any

    def __post_init__(self):
        self.reset = jax.jit(self.env.reset)
        self.get_obs = jax.jit(self.env.get_obs)
        self._reset_batch = jax.jit(jax.vmap(self.env.reset, in_axes=(0, None)))

    def reset_batch(self, seed: int = 0):
        """Resets of ``B`` envs (keys split from ``seed``), stacked (jitted)."""
        return self._reset_batch(jax.random.split(jax.random.key(seed), B), self.params)

    def actions(self, seed: int = 1):
        """``[B, T]`` actions sampled from the action space."""
        space = self.env.action_space(self.params)
        keys = jax.random.split(jax.random.key(seed), B * T)
        acts = [space.sample(k) for k in keys]
        return jax.tree.map(lambda *x: jnp.stack(x).reshape((B, T) + x[0].shape), *acts)

    def step_keys(self, seed: int = 2):
        return jax.random.split(jax.random.key(seed), B * T).reshape(B, T)

    def rollout(self, states, actions, keys=None, params=None):
        keys = self.step_keys() if keys is None else keys
        params = self.params if params is None else params
        return batched_rollout(self.env, states, actions, keys, params)


_TMP = Path(tempfile.mkdtemp(prefix="jaxlab-envs-tests-"))


def resolve_options(options: dict) -> dict:
    """Replace the ``"@demo-<size>"`` level placeholder by a written demo level file."""
    from jaxlab.envs.kinetix import StaticEnvParams, demo_level, save_level

    out = dict(options)
    level = out.get("level")
    if isinstance(level, str) and level.startswith("@demo-"):
        size = level.removeprefix("@demo-")
        path = _TMP / f"demo_{size}.json"
        if not path.exists():
            sp = StaticEnvParams.from_size(size)
            save_level(path, demo_level(sp), sp)
        out["level"] = str(path)
    return out


@functools.cache
def probe(name: str) -> Probe:
    """The env registered as ``name`` built with its test options (cached)."""
    env, params = envs.make(name, **resolve_options(dict(envs.spec(name).test_options)))
    return Probe(name, env, params)


@functools.cache
def kinetix_probe(size: str) -> Probe:
    """``probe('kinetix-<size>')`` (flat obs, multi-discrete actions, max_timesteps 4)."""
    return probe(f"kinetix-{size}")


def tree_allclose(a, b, *, rtol=1e-5, atol=1e-5) -> bool:
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    if len(la) != len(lb):
        return False
    for x, y in zip(la, lb, strict=True):
        x, y = np.asarray(x), np.asarray(y)
        if x.shape != y.shape:
            return False
        if x.dtype == bool or np.issubdtype(x.dtype, np.integer):
            if not np.array_equal(x, y):
                return False
        elif not np.allclose(x, y, rtol=rtol, atol=atol, equal_nan=True):
            return False
    return True
