"""Game of 24: combine four numbers with + - * / into 24 (the D-TSN known-model task).

A state holds four number slots and an ``alive`` mask. Action ``a in {0, ..., 47}`` picks an
ordered pair of distinct slots ``(i, j) = PAIRS[a // 4]`` and an operator ``op = a % 4`` in
``(+, -, *, /)``; slot ``i`` becomes ``x_i op x_j`` and slot ``j`` dies. An action is *valid* when
both slots are alive and it is not a division by zero. After three valid actions one number is
left and the episode terminates with reward ``1`` if it equals 24 (``|x - 24| < 1e-4``), else
``0``. An invalid action terminates the episode with reward ``0`` (a failed attempt).

Observation ``float32[8]``: the four numbers (0 in dead slots) then the alive mask. Resets draw
an instance uniformly from ``params.instances`` (default: every solvable multiset of four numbers
in 1..13, computed once by the exhaustive oracle below). Registered as ``"game24"``.

Oracle: :func:`solvable` decides by exhaustive enumeration of the remaining (at most 48^3)
action sequences, as one jit-able, vmappable program; :func:`oracle_action` returns an action
whose successor is still solvable (the demonstration policy).
"""

from __future__ import annotations

import functools
import itertools
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray

from jaxlab.core.config import ConfigError
from jaxlab.envs.base import Environment
from jaxlab.envs.spaces import Box, Discrete

NUM_SLOTS = 4
PAIRS = np.array([(i, j) for i in range(NUM_SLOTS) for j in range(NUM_SLOTS) if i != j], np.int32)
NUM_OPS = 4
NUM_ACTIONS = len(PAIRS) * NUM_OPS  # 48
TARGET = 24.0
TOLERANCE = 1e-4
MIN_NUMBER, MAX_NUMBER = 1, 13
OP_SYMBOLS = "+-*/"


@struct.dataclass
class Game24State:
    """Attributes: ``numbers`` slot values, ``alive`` live slots, ``t`` actions taken."""

    numbers: Float[Array, " 4"]
    alive: Bool[Array, " 4"]
    t: Int[Array, ""]


@struct.dataclass
class Game24Params:
    """Traced parameters: ``instances`` int32[P, 4], the pool resets draw from uniformly."""

    instances: Int[Array, "P 4"]


def apply_action(
    numbers: Float[Array, " 4"], alive: Bool[Array, " 4"], action: Int[Array, ""]
) -> tuple[Float[Array, " 4"], Bool[Array, " 4"], Bool[Array, ""]]:
    """The successor ``(numbers, alive)`` of one action and whether the action is valid.

    An invalid action leaves ``(numbers, alive)`` unchanged.
    """
    action = jnp.asarray(action, jnp.int32)
    pair = jnp.asarray(PAIRS)[action // NUM_OPS]
    op = action % NUM_OPS
    i, j = pair[0], pair[1]
    x, y = numbers[i], numbers[j]
    safe_y = jnp.where(y == 0, 1.0, y)
    result = jnp.select([op == 0, op == 1, op == 2], [x + y, x - y, x * y], x / safe_y)
    valid = alive[i] & alive[j] & ~((op == 3) & (y == 0))
    new_numbers = jnp.where(valid, numbers.at[i].set(result).at[j].set(0.0), numbers)
    new_alive = jnp.where(valid, alive.at[j].set(False), alive)
    return new_numbers, new_alive, valid


def is_success(numbers: Float[Array, " 4"], alive: Bool[Array, " 4"]) -> Bool[Array, ""]:
    """One number left and it is 24."""
    last = jnp.sum(jnp.where(alive, numbers, 0.0))
    return (jnp.sum(alive) == 1) & (jnp.abs(last - TARGET) < TOLERANCE)


def solvable(numbers: Float[Array, " 4"], alive: Bool[Array, " 4"]) -> Bool[Array, ""]:
    """Whether some sequence of valid actions from ``(numbers, alive)`` reaches 24 (exhaustive)."""

    def rec(nums, live, depth):
        done = is_success(nums, live)
        if depth == 0:
            return done
        nxt_n, nxt_a, valid = jax.vmap(apply_action, in_axes=(None, None, 0))(
            nums, live, jnp.arange(NUM_ACTIONS)
        )
        below = jax.vmap(lambda n, a: rec(n, a, depth - 1))(nxt_n, nxt_a)
        return done | jnp.any(valid & below)

    return rec(numbers, alive, NUM_SLOTS - 1)


def oracle_action(numbers: Float[Array, " 4"], alive: Bool[Array, " 4"]) -> Int[Array, ""]:
    """The first valid action (in index order) whose successor is solvable (0 if none)."""
    nxt_n, nxt_a, valid = jax.vmap(apply_action, in_axes=(None, None, 0))(
        numbers, alive, jnp.arange(NUM_ACTIONS)
    )
    good = valid & jax.vmap(solvable)(nxt_n, nxt_a)
    return jnp.argmax(good).astype(jnp.int32)


def oracle_value(
    numbers: Float[Array, " 4"], alive: Bool[Array, " 4"], gamma: float
) -> Float[Array, ""]:
    """``V*(s)``: ``gamma^(n_alive - 2)`` if solvable (reward 1 after ``n_alive - 1`` actions), else 0.

    Terminal states (one number left) have value 0.
    """
    steps = jnp.sum(alive) - 1
    v = jnp.where(solvable(numbers, alive), jnp.asarray(gamma, jnp.float32) ** (steps - 1), 0.0)
    return jnp.where(steps >= 1, v, 0.0).astype(jnp.float32)


def first_solution(numbers: Float[Array, " 4"]) -> tuple[Int[Array, " 3"], Bool[Array, ""]]:
    """The first (in action-index order) 3-action sequence solving a 4-number start, and whether
    one exists (exhaustive over 48^3 sequences)."""
    alive = jnp.ones((NUM_SLOTS,), bool)
    acts = jnp.arange(NUM_ACTIONS)

    def level(nums, live):
        return jax.vmap(apply_action, in_axes=(None, None, 0))(nums, live, acts)

    def win(n1, l1, v1):
        n2, l2, v2 = level(n1, l1)

        def last(n, live, v):
            n3, l3, v3 = level(n, live)
            return v & v3 & jax.vmap(is_success)(n3, l3)

        return v1 & jax.vmap(last)(n2, l2, v2)

    n1, l1, v1 = level(numbers, alive)
    ok = jax.vmap(win)(n1, l1, v1).reshape(-1)
    idx = jnp.argmax(ok)
    seq = jnp.stack([idx // NUM_ACTIONS**2, (idx // NUM_ACTIONS) % NUM_ACTIONS, idx % NUM_ACTIONS])
    return seq.astype(jnp.int32), jnp.any(ok)


def validate_instances(instances) -> np.ndarray:
    """``instances`` as int32[P, 4] with every number in 1..13; else a ConfigError naming it."""
    arr = np.asarray(instances)
    if arr.ndim == 1:
        arr = arr[None]
    if arr.ndim != 2 or arr.shape[1] != NUM_SLOTS or arr.shape[0] == 0:
        raise ConfigError("instances", instances, "a non-empty list of 4-number lists")
    if not np.issubdtype(arr.dtype, np.integer) and not np.all(arr == np.round(arr)):
        raise ConfigError("instances", instances, "integers")
    bad = (arr < MIN_NUMBER) | (arr > MAX_NUMBER)
    if np.any(bad):
        raise ConfigError(
            "instances",
            arr[np.any(bad, axis=1)][0].tolist(),
            f"four integers in {MIN_NUMBER}..{MAX_NUMBER}",
        )
    return arr.astype(np.int32)


@functools.cache
def all_multisets() -> np.ndarray:
    """Every multiset of four numbers in 1..13, sorted, int32[1820, 4]."""
    combos = itertools.combinations_with_replacement(range(MIN_NUMBER, MAX_NUMBER + 1), NUM_SLOTS)
    return np.array(list(combos), np.int32)


@jax.jit
def _solvable_batch(instances: Int[Array, "P 4"]) -> Bool[Array, " P"]:
    nums = instances.astype(jnp.float32)
    alive = jnp.ones(nums.shape, bool)
    return jax.lax.map(lambda x: solvable(*x), (nums, alive), batch_size=64)


SOLVABLE_FILE = Path(__file__).with_name("game24_solvable.npz")


def compute_solvable_instances() -> np.ndarray:
    """The solvable multisets among :func:`all_multisets`, by the oracle (about 6 s on a CPU)."""
    inst = all_multisets()
    return inst[np.asarray(_solvable_batch(jnp.asarray(inst)))]


@functools.cache
def solvable_instances() -> np.ndarray:
    """The 1362 solvable multisets, int32[1362, 4], as stored by
    ``compute_solvable_instances`` in ``game24_solvable.npz`` (a test re-derives a sample)."""
    with np.load(SOLVABLE_FILE) as f:
        return f["instances"].astype(np.int32)


@functools.cache
def stored_solutions() -> np.ndarray:
    """One solution (3 actions, :func:`first_solution`) per row of :func:`solvable_instances`,
    int32[1362, 3], stored next to them (the demonstrations replay them; a test checks a sample
    reaches 24)."""
    with np.load(SOLVABLE_FILE) as f:
        return f["solutions"].astype(np.int32)


def split_instances(instances: np.ndarray, holdout_fraction: float, seed: int = 0):
    """A fixed random ``(train, held_out)`` split of an instance pool (rows)."""
    if not 0.0 < holdout_fraction < 1.0:
        raise ConfigError("holdout_fraction", holdout_fraction, "a float in (0, 1)")
    perm = np.random.default_rng(seed).permutation(len(instances))
    n_hold = max(1, int(round(holdout_fraction * len(instances))))
    return instances[np.sort(perm[n_hold:])], instances[np.sort(perm[:n_hold])]


def describe_action(action: int) -> str:
    """``"s0 + s2"`` style text for an action index."""
    i, j = PAIRS[int(action) // NUM_OPS]
    return f"s{i} {OP_SYMBOLS[int(action) % NUM_OPS]} s{j}"


class Game24(Environment):
    """Game of 24 (module docstring)."""

    obs_is_function_of_state = True

    def __init__(self, auto_reset: bool = True):
        self.auto_reset = bool(auto_reset)

    def __eq__(self, other) -> bool:
        return type(other) is Game24 and other.auto_reset == self.auto_reset

    def __hash__(self) -> int:
        return hash(("Game24", self.auto_reset))

    @property
    def default_params(self) -> Game24Params:
        return Game24Params(instances=jnp.asarray(solvable_instances()))

    def get_obs(self, state: Game24State, params: Game24Params) -> Float[Array, " 8"]:
        return jnp.concatenate(
            [jnp.where(state.alive, state.numbers, 0.0), state.alive.astype(jnp.float32)]
        )

    def init_state(self, numbers: Int[Array, " 4"]) -> Game24State:
        """The start state of one instance."""
        return Game24State(
            numbers=jnp.asarray(numbers, jnp.float32),
            alive=jnp.ones((NUM_SLOTS,), bool),
            t=jnp.int32(0),
        )

    def reset_env(self, key: PRNGKeyArray, params: Game24Params):
        idx = jax.random.randint(key, (), 0, params.instances.shape[0])
        state = self.init_state(params.instances[idx])
        return self.get_obs(state, params), state

    def step_env(self, key, state: Game24State, action, params: Game24Params):
        del key
        numbers, alive, valid = apply_action(state.numbers, state.alive, action)
        new = Game24State(numbers=numbers, alive=alive, t=state.t + 1)
        terminated = (~valid) | (jnp.sum(alive) == 1)
        reward = jnp.where(valid & is_success(numbers, alive), 1.0, 0.0).astype(jnp.float32)
        info = {"solved": reward > 0, "invalid": ~valid}
        return self.get_obs(new, params), new, reward, terminated, jnp.asarray(False), info

    def action_space(self, params=None) -> Discrete:
        return Discrete(NUM_ACTIONS)

    def observation_space(self, params=None) -> Box:
        low = np.array([-np.inf] * NUM_SLOTS + [0.0] * NUM_SLOTS)
        high = np.array([np.inf] * NUM_SLOTS + [1.0] * NUM_SLOTS)
        return Box(low, high, (2 * NUM_SLOTS,), jnp.float32)


def make_game24(auto_reset: bool = True, instances=None):
    """Registry factory: ``(Game24, params)``; ``instances`` overrides the reset pool."""
    env = Game24(auto_reset=auto_reset)
    pool = solvable_instances() if instances is None else validate_instances(instances)
    return env, Game24Params(instances=jnp.asarray(pool))
