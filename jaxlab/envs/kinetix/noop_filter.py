"""The no-op level filter of the original (``create_vmapped_filtered_distribution`` in
``kinetix/environment/ued/distributions.py``).

Random levels that solve themselves (the green shape falls onto the blue one) teach nothing. To
draw ``n`` levels the filter samples ``ratio * n`` (default 2n) candidates, runs the no-op action
on each for ``n_steps`` (64) env steps, and draws ``n`` of them without replacement with weights

    w_i = solved_weight (0.001) if the no-op solves level i, else 1,

where "solves" means the first step that ends the episode (terminated or truncated) has reward
``> 0.5`` (the green-blue contact; a red contact gives -1). Drawing without replacement with
weights ``w`` uses Gumbel top-k, the distribution of ``jax.random.choice(..., replace=False,
p=w / sum(w))``.

Everything is one jit-able function; the env step runs inside a ``lax.scan`` over steps, vmapped
over the candidates.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray

from jaxlab.core.compile import jit
from jaxlab.envs.kinetix.env import KinetixEnv
from jaxlab.envs.kinetix.generator import GeneratorParams, sample_level
from jaxlab.envs.kinetix.state import EnvParams, EnvState, StaticEnvParams


def _check_int(name: str, value, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name}={value!r}; expected a Python int >= {low}")
    return value


@functools.lru_cache(maxsize=16)
def _noop_env(static_params: StaticEnvParams) -> KinetixEnv:
    # The filter only steps states it is given; the env's own reset distribution is never used.
    return KinetixEnv(
        static_params,
        reset_fn=_never_reset,
        observation_type="symbolic_flat",
        auto_reset=False,
    )


def _never_reset(key: PRNGKeyArray) -> EnvState:
    raise ValueError("the no-op filter env never resets")


def noop_solved(
    levels: EnvState,
    static_params: StaticEnvParams,
    env_params: EnvParams | None = None,
    *,
    n_steps: int = 64,
) -> Bool[Array, " n"]:
    """Whether the no-op action solves each level within ``n_steps`` env steps.

    Args:
        levels: a batch of levels (leading axis n).
        static_params: sizes (static).
        env_params: env parameters (reward, episode length, physics).
        n_steps: env steps to simulate.

    Returns:
        [n] bool: the first step with ``terminated | truncated`` has reward ``> 0.5``.
    """
    env = _noop_env(static_params)
    params = EnvParams() if env_params is None else env_params
    action = env.noop_action()
    key = jax.random.key(0)  # the env step ignores its key

    def one(state):
        def body(carry, _):
            state, done, solved = carry
            _, state, reward, terminated, truncated, _ = env.step_env(key, state, action, params)
            end = terminated | truncated
            solved = jnp.where(done, solved, end & (reward > 0.5))
            return (state, done | end, solved), None

        (_, _, solved), _ = jax.lax.scan(
            body, (state, jnp.asarray(False), jnp.asarray(False)), None, length=n_steps
        )
        return solved

    return jax.vmap(one)(levels)


def filter_levels(
    key: PRNGKeyArray,
    candidates: EnvState,
    n: int,
    static_params: StaticEnvParams,
    env_params: EnvParams | None = None,
    *,
    n_steps: int = 64,
    solved_weight: float | Float[Array, ""] = 0.001,
) -> tuple[EnvState, Int[Array, " n"], Bool[Array, " m"]]:
    """Pick ``n`` of the ``m`` candidates without replacement, down-weighting no-op-solved ones.

    Args:
        key: PRNG key of the draw.
        candidates: a batch of ``m >= n`` levels.
        n: levels to keep (static).
        static_params: sizes (static).
        env_params: env parameters.
        n_steps: no-op steps per candidate (static).
        solved_weight: weight of candidates the no-op solves (others weigh 1).

    Returns:
        ``(levels [n], picked [n], solved [m])``: the picked levels, their candidate indices and
        whether the no-op solves each candidate.
    """
    m = jax.tree.leaves(candidates)[0].shape[0]
    if n > m:
        raise ValueError(f"n={n} > {m} candidates; expected n <= the number of candidates")
    solved = noop_solved(candidates, static_params, env_params, n_steps=n_steps)
    weights = jnp.where(solved, solved_weight, 1.0)
    gumbel = jax.random.gumbel(key, weights.shape)
    _, picked = jax.lax.top_k(jnp.log(weights) + gumbel, n)
    return jax.tree.map(lambda x: x[picked], candidates), picked, solved


def sample_filtered_levels(
    key: PRNGKeyArray,
    n: int,
    static_params: StaticEnvParams,
    params: GeneratorParams | None = None,
    env_params: EnvParams | None = None,
    *,
    ratio: int = 2,
    n_steps: int = 64,
    solved_weight: float | Float[Array, ""] = 0.001,
) -> EnvState:
    """``n`` random levels after the no-op filter (``ratio * n`` generated, ``n`` kept).

    Args:
        key: PRNG key.
        n: levels to return (static).
        static_params: sizes (static).
        params: the level distribution (default ``GeneratorParams()``).
        env_params: env parameters.
        ratio: candidates per returned level (static, >= 1; the original's 2).
        n_steps: no-op steps per candidate (static; the original's 64).
        solved_weight: sampling weight of no-op-solved candidates (others weigh 1).

    Returns:
        A batch of ``n`` levels (leading axis n).
    """
    _check_int("n", n, 1)
    _check_int("ratio", ratio, 1)
    _check_int("n_steps", n_steps, 1)
    if not isinstance(static_params, StaticEnvParams):
        raise ValueError(f"static_params={static_params!r}; expected a StaticEnvParams")
    gp = GeneratorParams() if params is None else params
    ep = EnvParams() if env_params is None else env_params
    return _sample_filtered_jit(key, n, static_params, gp, ep, ratio, n_steps, solved_weight)[0]


def _sample_filtered(key, n, static_params, params, env_params, ratio, n_steps, solved_weight):
    k_gen, k_pick = jax.random.split(key)
    candidates = jax.vmap(sample_level, in_axes=(0, None, None, None))(
        jax.random.split(k_gen, ratio * n), static_params, params, env_params
    )
    return filter_levels(
        k_pick,
        candidates,
        n,
        static_params,
        env_params,
        n_steps=n_steps,
        solved_weight=solved_weight,
    )


_sample_filtered_jit = jit(
    _sample_filtered, static_argnames=("n", "static_params", "ratio", "n_steps")
)


def make_filtered_sampler(
    static_params: StaticEnvParams,
    params: GeneratorParams | None = None,
    env_params: EnvParams | None = None,
    *,
    ratio: int = 2,
    n_steps: int = 64,
    solved_weight: float = 0.001,
):
    """A jit-able ``sampler(key, n) -> EnvState [n]`` (``n`` static) with the no-op filter."""
    if not isinstance(static_params, StaticEnvParams):
        raise ValueError(f"static_params={static_params!r}; expected a StaticEnvParams")
    _check_int("ratio", ratio, 1)
    _check_int("n_steps", n_steps, 1)
    gp = GeneratorParams() if params is None else params
    ep = EnvParams() if env_params is None else env_params

    def sampler(key: PRNGKeyArray, n: int) -> EnvState:
        return _sample_filtered(key, n, static_params, gp, ep, ratio, n_steps, solved_weight)[0]

    return sampler
