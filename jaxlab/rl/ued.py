"""Level curricula (unsupervised environment design) for PPO: uniform, SFL, PLR and ACCEL.

A *level* is any pytree the env can start an episode from (for Kinetix an ``EnvState``); a level
distribution is ``sample_level(key) -> level`` (the original's ``reset_fn``). A curriculum decides
which level every environment slot plays during one PPO update; within the update a slot's
episodes restart from its level (``env.step(..., reset_state=level)``).

* ``uniform`` (domain randomisation): no curriculum state; the env's own ``reset_fn`` draws a
  fresh level for every episode and envs are never reset between updates (the original PPO).
* ``sfl`` (Sampling For Learnability, paper §3 / Table 7, ``experiments/sfl.py``): every
  ``update_every`` updates, ``num_batches x batch_size`` fresh levels are rolled out with the
  current policy for ``rollout_steps`` steps; with ``p`` a level's success rate over its finished
  episodes the score is ``p (1 - p) + 0.001 p`` and the top ``buffer_size`` levels are kept. At
  every update a fraction ``buffer_ratio`` of the envs replays buffer levels (uniformly) and the
  rest play fresh levels.
* ``plr`` (robust Prioritized Level Replay, Jiang et al. 2021): each update either *replays*
  levels sampled from the buffer with ``P = (1 - rho) P_S + rho P_C`` (rank prioritisation
  ``P_S ∝ (1 / rank(S_i))^(1/beta)``, staleness ``P_C ∝ c - C_i``) and trains on them, or plays
  fresh levels (no gradient unless ``exploratory_grad_updates``) and inserts those scoring higher
  than the buffer's worst. Replay happens with probability ``replay_prob`` once the buffer holds
  ``min_fill * buffer_size`` levels. Scores: MaxMC ``mean_t (R_max - V_t)`` or positive value loss
  ``mean_t max(A_t, 0)``.
* ``accel`` (ACCEL, Parker-Holder et al. 2022): PLR plus, after every replay update, an update on
  ``num_edits``-times mutated copies of the replayed levels (``mutate_fn(key, level) -> level``),
  which are inserted like fresh levels.

The curriculum state is a pytree (flax dataclasses of arrays), so it is checkpointed with the
train state and flows through ``lax.scan``/``jit``. The SFL state has only leaves with a leading
buffer axis, so it can be split over devices (each device keeps and scores its own share, as the
original does per GPU).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Literal

import jax
import jax.numpy as jnp
from flax import struct
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray

from jaxlab.core.config import ConfigError

CURRICULA = ("uniform", "sfl", "plr", "accel")

#: branch ids of the PLR/ACCEL update
NEW, REPLAY, MUTATE = 0, 1, 2


@dataclasses.dataclass(frozen=True)
class SFLConfig:
    """SFL hyper-parameters (paper Table 7 defaults; the presets shrink them for the CPU).

    Attributes:
        update_every: updates between buffer refreshes.
        batch_size: fresh levels scored in parallel.
        num_batches: sequential scoring batches per refresh (``batch_size x num_batches`` levels).
        rollout_steps: policy steps per scoring rollout.
        buffer_size: levels kept (top learnability).
        buffer_ratio: fraction of training envs replaying buffer levels.
    """

    update_every: int = 128
    batch_size: int = 4096
    num_batches: int = 3
    rollout_steps: int = 512
    buffer_size: int = 1024
    buffer_ratio: float = 0.5

    def __post_init__(self):
        for name in ("update_every", "batch_size", "num_batches", "rollout_steps", "buffer_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"curriculum.sfl.{name}", getattr(self, name), "an integer >= 1")
        if not 0.0 <= self.buffer_ratio <= 1.0:
            raise ConfigError("curriculum.sfl.buffer_ratio", self.buffer_ratio, "in [0, 1]")
        if self.buffer_size > self.batch_size * self.num_batches:
            raise ConfigError(
                "curriculum.sfl.buffer_size",
                self.buffer_size,
                f"at most batch_size x num_batches = {self.batch_size * self.num_batches}",
            )


@dataclasses.dataclass(frozen=True)
class PLRConfig:
    """PLR / ACCEL hyper-parameters (the original's configs: buffer 4000, 2 edits).

    Attributes:
        buffer_size: level buffer capacity.
        replay_prob: probability of a replay update once the buffer is filled enough.
        staleness_coef: ``rho``, weight of the staleness distribution.
        temperature: ``beta`` of the rank prioritisation.
        min_fill: buffer fraction needed before replaying.
        score: ``"maxmc"`` or ``"pvl"``.
        exploratory_grad_updates: also train on fresh and mutated levels.
        num_edits: mutations per ACCEL child.
    """

    buffer_size: int = 4000
    replay_prob: float = 0.5
    staleness_coef: float = 0.3
    temperature: float = 1.0
    min_fill: float = 0.5
    score: Literal["maxmc", "pvl"] = "maxmc"
    exploratory_grad_updates: bool = False
    num_edits: int = 2

    def __post_init__(self):
        if self.buffer_size < 1:
            raise ConfigError("curriculum.plr.buffer_size", self.buffer_size, "an integer >= 1")
        for name in ("replay_prob", "staleness_coef", "min_fill"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(f"curriculum.plr.{name}", getattr(self, name), "in [0, 1]")
        if not self.temperature > 0:
            raise ConfigError("curriculum.plr.temperature", self.temperature, "a float > 0")
        if self.num_edits < 1:
            raise ConfigError("curriculum.plr.num_edits", self.num_edits, "an integer >= 1")


@dataclasses.dataclass(frozen=True)
class CurriculumConfig:
    """Which curriculum, and its settings."""

    kind: Literal["uniform", "sfl", "plr", "accel"] = "uniform"
    sfl: SFLConfig = SFLConfig()
    plr: PLRConfig = PLRConfig()


@struct.dataclass
class RolloutStats:
    """Per-env rollout data a curriculum scores levels from (``[T, B]`` arrays).

    Attributes:
        rewards: rewards.
        dones: episode ended at this step.
        solved: the episode ended on the goal at this step.
        values: critic values ``V(s_t)``.
        advantages: GAE advantages.
    """

    rewards: Float[Array, "t b"]
    dones: Bool[Array, "t b"]
    solved: Bool[Array, "t b"]
    values: Float[Array, "t b"]
    advantages: Float[Array, "t b"]


def success_rate(dones: Bool[Array, "t b"], solved: Bool[Array, "t b"]) -> Float[Array, " b"]:
    """Solved episodes over finished episodes per env (0 where no episode finished)."""
    n = jnp.sum(dones, axis=0)
    return jnp.sum(solved & dones, axis=0) / jnp.maximum(n, 1)


def learnability(p: Float[Array, " b"]) -> Float[Array, " b"]:
    """SFL score ``p (1 - p) + 0.001 p`` (the small term breaks ties towards solvable levels)."""
    return p * (1.0 - p) + 0.001 * p


def max_returns(rewards: Float[Array, "t b"], dones: Bool[Array, "t b"]) -> Float[Array, " b"]:
    """Highest episode return per env in a rollout (the running return if none finished)."""

    def step(carry, x):
        running, best, seen = carry
        r, d = x
        running = running + r
        best = jnp.where(d, jnp.maximum(best, running), best)
        seen = seen | d
        return (jnp.where(d, 0.0, running), best, seen), None

    zeros = jnp.zeros(rewards.shape[1:], jnp.float32)
    (running, best, seen), _ = jax.lax.scan(
        step,
        (zeros, jnp.full_like(zeros, -jnp.inf), jnp.zeros(zeros.shape, bool)),
        (rewards, dones),
    )
    return jnp.where(seen, best, running)


def maxmc_score(values: Float[Array, "t b"], best_return: Float[Array, " b"]) -> Float[Array, " b"]:
    """MaxMC regret estimate ``mean_t (R_max - V_t)``."""
    return jnp.mean(best_return[None] - values, axis=0)


def pvl_score(advantages: Float[Array, "t b"]) -> Float[Array, " b"]:
    """Positive value loss ``mean_t max(A_t, 0)``."""
    return jnp.mean(jnp.maximum(advantages, 0.0), axis=0)


# ---------------------------------------------------------------------------------------------
# States


@struct.dataclass
class SFLState:
    """The SFL buffer: ``levels`` [K] and their learnability ``scores`` [K] and success rates."""

    levels: Any
    scores: Float[Array, " k"]
    success: Float[Array, " k"]


@struct.dataclass
class PLRState:
    """The PLR buffer.

    Attributes:
        levels: [K] stored levels.
        scores: [K] latest score of each level.
        max_return: [K] best return seen on each level (MaxMC).
        timestamps: [K] episode counter when each level was last sampled.
        filled: [K] slot holds a level.
        episode_count: sampling clock ``c``.
        last_branch: branch of the previous update (ACCEL mutates after a replay).
        last_replay: [B] levels of the last replay update (ACCEL parents).
    """

    levels: Any
    scores: Float[Array, " k"]
    max_return: Float[Array, " k"]
    timestamps: Int[Array, " k"]
    filled: Bool[Array, " k"]
    episode_count: Int[Array, ""]
    last_branch: Int[Array, ""]
    last_replay: Any


def _stack(fn, key, n):
    return jax.vmap(fn)(jax.random.split(key, n))


def _take(tree, idx):
    return jax.tree.map(lambda x: x[idx], tree)


def _concat(a, b):
    return jax.tree.map(lambda x, y: jnp.concatenate([x, y], axis=0), a, b)


# ---------------------------------------------------------------------------------------------
# Curriculum objects


@dataclasses.dataclass(frozen=True)
class Curriculum:
    """A curriculum over levels from ``sample_level`` for ``num_envs`` training envs.

    ``forces_levels`` says whether PPO resets its envs to ``next_levels`` at each update; the
    ``uniform`` curriculum does not. The methods are pure and jit-able:

    * ``init(key) -> state``
    * ``next_levels(key, state, update, score_fn) -> (levels [num_envs], aux, state, metrics)``
      where ``score_fn(key, levels [M]) -> success rates [M]`` rolls out the current policy;
    * ``observe(key, state, aux, levels, stats) -> (state, train, metrics)`` after the rollout,
      with ``train`` a bool scalar saying whether PPO should take a gradient step.
    """

    cfg: CurriculumConfig
    sample_level: Callable[[PRNGKeyArray], Any]
    num_envs: int
    mutate_fn: Callable[[PRNGKeyArray, Any], Any] | None = None

    @property
    def kind(self) -> str:
        return self.cfg.kind

    @property
    def forces_levels(self) -> bool:
        return self.cfg.kind != "uniform"

    # ------------------------------------------------------------------ init
    def init(self, key: PRNGKeyArray) -> Any:
        kind = self.cfg.kind
        if kind == "uniform":
            return ()
        if kind == "sfl":
            k = self.cfg.sfl.buffer_size
            levels = _stack(self.sample_level, key, k)
            z = jnp.zeros(k, jnp.float32)
            return SFLState(levels=levels, scores=z, success=z)
        k = self.cfg.plr.buffer_size
        k_buf, k_rep = jax.random.split(key)
        return PLRState(
            levels=_stack(self.sample_level, k_buf, k),
            scores=jnp.zeros(k, jnp.float32),
            max_return=jnp.full(k, -jnp.inf, jnp.float32),
            timestamps=jnp.zeros(k, jnp.int32),
            filled=jnp.zeros(k, bool),
            episode_count=jnp.zeros((), jnp.int32),
            last_branch=jnp.asarray(NEW, jnp.int32),
            last_replay=_stack(self.sample_level, k_rep, self.num_envs),
        )

    # ------------------------------------------------------------------ before the rollout
    def next_levels(self, key, state, update, score_fn):
        kind = self.cfg.kind
        if kind == "uniform":
            raise ValueError("the uniform curriculum does not choose levels (forces_levels=False)")
        if kind == "sfl":
            return self._sfl_next(key, state, update, score_fn)
        return self._plr_next(key, state)

    def _sfl_refresh(self, key, state: SFLState, score_fn) -> SFLState:
        c = self.cfg.sfl

        def batch(carry, k):
            k_lv, k_sc = jax.random.split(k)
            levels = _stack(self.sample_level, k_lv, c.batch_size)
            p = score_fn(k_sc, levels)
            return carry, (levels, p)

        _, (levels, p) = jax.lax.scan(batch, None, jax.random.split(key, c.num_batches))
        levels = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), levels)
        p = p.reshape(-1)
        scores, top = jax.lax.top_k(learnability(p), c.buffer_size)
        return SFLState(levels=_take(levels, top), scores=scores, success=p[top])

    def _sfl_next(self, key, state: SFLState, update, score_fn):
        c = self.cfg.sfl
        k_ref, k_new, k_pick = jax.random.split(key, 3)
        state = jax.lax.cond(
            update % c.update_every == 0,
            lambda s: self._sfl_refresh(k_ref, s, score_fn),
            lambda s: s,
            state,
        )
        n_buf = int(round(self.num_envs * c.buffer_ratio))
        n_new = self.num_envs - n_buf
        parts = []
        if n_new:
            parts.append(_stack(self.sample_level, k_new, n_new))
        if n_buf:
            idx = jax.random.randint(k_pick, (n_buf,), 0, c.buffer_size)
            parts.append(_take(state.levels, idx))
        levels = parts[0] if len(parts) == 1 else _concat(parts[0], parts[1])
        metrics = {
            "sfl/buffer_learnability": jnp.mean(state.scores),
            "sfl/buffer_success": jnp.mean(state.success),
        }
        return levels, {}, state, metrics

    def replay_weights(self, state: PLRState) -> Float[Array, " k"]:
        """``P = (1 - rho) P_S + rho P_C`` over the filled slots (module docstring)."""
        c = self.cfg.plr
        filled = state.filled
        masked = jnp.where(filled, state.scores, -jnp.inf)
        order = jnp.argsort(-masked)
        ranks = jnp.empty_like(order).at[order].set(jnp.arange(order.shape[0])) + 1
        h = jnp.where(filled, (1.0 / ranks) ** (1.0 / c.temperature), 0.0)
        p_s = h / jnp.maximum(jnp.sum(h), 1e-12)
        stale = jnp.where(filled, (state.episode_count - state.timestamps).astype(jnp.float32), 0.0)
        total = jnp.sum(stale)
        uniform = filled / jnp.maximum(jnp.sum(filled), 1)
        p_c = jnp.where(total > 0, stale / jnp.maximum(total, 1e-12), uniform)
        return (1.0 - c.staleness_coef) * p_s + c.staleness_coef * p_c

    def _plr_next(self, key, state: PLRState):
        c = self.cfg.plr
        k_dec, k_new, k_rep, k_mut = jax.random.split(key, 4)
        size = jnp.sum(state.filled)
        can_replay = size >= jnp.ceil(c.min_fill * c.buffer_size)
        replay = jax.random.bernoulli(k_dec, c.replay_prob) & can_replay
        branch = replay.astype(jnp.int32)
        if self.cfg.kind == "accel":
            branch = jnp.where(state.last_branch == REPLAY, MUTATE, branch)
        weights = self.replay_weights(state)
        idx = jax.random.choice(k_rep, c.buffer_size, (self.num_envs,), p=weights)

        def fresh(_):
            return _stack(self.sample_level, k_new, self.num_envs)

        def replayed(_):
            return _take(state.levels, idx)

        branches = [fresh, replayed]
        if self.cfg.kind == "accel":
            mutate = self.mutate_fn
            if mutate is None:
                raise ValueError("curriculum kind 'accel' needs a mutate_fn(key, level) -> level")

            def mutated(_):
                def edit(level, k):
                    return mutate(k, level), None

                def child(k, level):
                    out, _ = jax.lax.scan(edit, level, jax.random.split(k, c.num_edits))
                    return out

                keys = jax.random.split(k_mut, self.num_envs)
                return jax.vmap(child)(keys, state.last_replay)

            branches.append(mutated)
        levels = jax.lax.switch(branch, branches, None)
        is_replay = branch == REPLAY
        state = state.replace(
            timestamps=jnp.where(
                is_replay,
                state.timestamps.at[idx].set(state.episode_count + self.num_envs),
                state.timestamps,
            ),
            episode_count=state.episode_count + jnp.where(is_replay, self.num_envs, 0),
        )
        metrics = {
            "plr/buffer_size": size.astype(jnp.float32),
            "plr/replay": is_replay.astype(jnp.float32),
            "plr/mutate": (branch == MUTATE).astype(jnp.float32),
        }
        return levels, {"branch": branch, "idx": idx}, state, metrics

    # ------------------------------------------------------------------ after the rollout
    def observe(self, key, state, aux, levels, stats: RolloutStats):
        kind = self.cfg.kind
        if kind in ("uniform", "sfl"):
            return state, jnp.asarray(True), {}
        c = self.cfg.plr
        best = max_returns(stats.rewards, stats.dones)
        branch, idx = aux["branch"], aux["idx"]
        best = jnp.where(branch == REPLAY, jnp.maximum(best, state.max_return[idx]), best)
        scores = (
            maxmc_score(stats.values, best) if c.score == "maxmc" else pvl_score(stats.advantages)
        )

        def update_replayed(s: PLRState) -> PLRState:
            return s.replace(
                scores=s.scores.at[idx].set(scores), max_return=s.max_return.at[idx].set(best)
            )

        def insert(s: PLRState) -> PLRState:
            def one(s: PLRState, x):
                level, score, ret = x
                free = jnp.logical_not(s.filled)
                has_free = jnp.any(free)
                worst = jnp.argmin(jnp.where(s.filled, s.scores, jnp.inf))
                slot = jnp.where(has_free, jnp.argmax(free), worst)
                ok = has_free | (score > s.scores[worst])
                put = lambda buf, v: jnp.where(ok, buf.at[slot].set(v), buf)
                s = s.replace(
                    levels=jax.tree.map(put, s.levels, level),
                    scores=put(s.scores, score),
                    max_return=put(s.max_return, ret),
                    timestamps=put(s.timestamps, s.episode_count),
                    filled=put(s.filled, True),
                )
                return s, None

            s, _ = jax.lax.scan(one, s, (levels, scores, best))
            return s

        state = jax.lax.cond(branch == REPLAY, update_replayed, insert, state)
        state = state.replace(
            last_branch=branch,
            last_replay=jax.tree.map(
                lambda new, old: jnp.where(branch == REPLAY, new, old), levels, state.last_replay
            ),
        )
        train = (branch == REPLAY) | jnp.asarray(c.exploratory_grad_updates)
        metrics = {"plr/score": jnp.mean(scores), "plr/buffer_mean_score": _filled_mean(state)}
        return state, train, metrics


def _filled_mean(state: PLRState) -> Float[Array, ""]:
    n = jnp.maximum(jnp.sum(state.filled), 1)
    return jnp.sum(jnp.where(state.filled, state.scores, 0.0)) / n


def make_curriculum(
    cfg: CurriculumConfig,
    sample_level: Callable[[PRNGKeyArray], Any],
    num_envs: int,
    *,
    mutate_fn: Callable[[PRNGKeyArray, Any], Any] | None = None,
) -> Curriculum:
    """Builds the curriculum of ``cfg`` (see the module docstring).

    Raises:
        ValueError: ``accel`` without a ``mutate_fn``.
    """
    if cfg.kind not in CURRICULA:
        raise ValueError(f"curriculum kind={cfg.kind!r}; expected one of {list(CURRICULA)}")
    if cfg.kind == "accel" and mutate_fn is None:
        raise ValueError("curriculum kind='accel' needs mutate_fn(key, level) -> level")
    return Curriculum(cfg, sample_level, num_envs, mutate_fn)
