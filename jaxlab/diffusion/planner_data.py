"""The data of a planner run: the driving world whose capacities match the planner's, the expert
logs (training and held-out), one step's abstract batch and the checkpointable batch iterator.

The rule-based expert (route choice with known proportions, IDM speed control) is rolled out on
``n_scenes`` procedurally generated scenes (:func:`jaxlab.envs.driving.evaluation.expert_logs`); every
step of every rollout is a sample (scene tokens, the agents' logged futures). The logs are made on
the host when first asked for and cached per world and size, so runs differing only in mesh or
optimiser share them; a grain loader serves them (shuffled, repeated, batched; its position is
checkpointed with the run).
"""

from __future__ import annotations

import functools
from typing import Any

import grain
import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core.config import ConfigError
from jaxlab.core.run import batch_spec
from jaxlab.diffusion import planner as pl
from jaxlab.diffusion.planner_config import PlannerRunConfig
from jaxlab.envs.driving import DrivingStatic, DrivingWorld, make_driving
from jaxlab.envs.driving import evaluation as de

#: the arrays of one training sample: the scene tokens and the agents' logged futures
BATCH_KEYS: tuple[str, ...] = (*pl.SCENE_KEYS, "future")


def world(cfg: PlannerRunConfig) -> tuple[DrivingWorld, Any]:
    """The driving world whose capacities match the planner's."""
    m = cfg.model
    env, params = make_driving(
        auto_reset=False,
        scene_type=cfg.scene_type,
        route_visible=cfg.route_visible,
        n_neighbours=m.n_neighbours,
        horizon=m.horizon,
        history=m.history,
        n_route=m.n_route,
        agent_type_probs=cfg.agent_type_probs,
        perception_range=cfg.perception_range,
    )
    sp = env.static
    want = DrivingStatic(
        n_neighbours=m.n_neighbours,
        n_static=m.n_static,
        n_lanes=m.n_lanes,
        lane_points=m.lane_points,
        history=m.history,
        horizon=m.horizon,
        n_route=m.n_route,
    )
    if sp != want:
        raise ConfigError("model", (m.n_static, m.n_lanes, m.lane_points), f"capacities of {sp}")
    return env, params


def expert_data(cfg: PlannerRunConfig, split: str = "train") -> dict[str, np.ndarray]:
    """Expert logs of the run's world as host (NumPy) arrays, ``split`` "train" (``n_scenes``
    rollouts) or "valid" (``max(eval_scenes, 8)`` rollouts of other scenes). Cached on the fields
    that define them, so runs differing only in mesh or optimiser share them; both splits share
    one compiled generator when their sizes agree."""
    m = cfg.model
    sizes = (m.n_neighbours, m.n_static, m.n_lanes, m.lane_points, m.history, m.horizon, m.n_route)
    seed = cfg.seed if split == "train" else cfg.seed + 10_000
    n = cfg.n_scenes if split == "train" else max(cfg.eval_scenes, 8)
    world_kw = (tuple(cfg.agent_type_probs), cfg.perception_range)
    return _expert_data(sizes, world_kw, cfg.scene_type, cfg.route_visible, n, cfg.log_steps, seed)


@functools.cache
def _expert_data(sizes, world_kw, scene_type, route_visible, n_scenes, log_steps, seed):
    gen = _expert_generator(sizes, world_kw, scene_type, route_visible, n_scenes, log_steps)
    logs = jax.device_get(gen(jax.random.PRNGKey(seed)))
    pl.check_finite("future", logs["future"])
    return logs


@functools.cache
def _expert_generator(sizes, world_kw, scene_type, route_visible, n_scenes, log_steps):
    """The jitted ``key -> expert logs`` of one world and size (compiled once per process)."""
    n_nb, _, _, _, history, horizon, n_route = sizes
    type_probs, perception_range = world_kw
    env, params = make_driving(
        auto_reset=False,
        scene_type=scene_type,
        route_visible=route_visible,
        n_neighbours=n_nb,
        horizon=horizon,
        history=history,
        n_route=n_route,
        agent_type_probs=type_probs,
        perception_range=perception_range,
    )
    return jax.jit(lambda k: de.expert_logs(k, env, params, n_scenes=n_scenes, steps=log_steps))


def abstract_batch(cfg: PlannerRunConfig, mesh: jax.sharding.Mesh) -> dict:
    """One step's global batch (scene tokens and ``future``), split over the mesh's data axes."""
    shapes = cfg.model.input_shapes()
    m = cfg.model
    shapes["future"] = (1 + m.n_neighbours, m.horizon, 4)
    example = {
        k: jax.ShapeDtypeStruct(
            (cfg.batch_size,) + shapes[k], np.bool_ if k.endswith("_valid") else np.float32
        )
        for k in BATCH_KEYS
    }
    return batch_spec(example, mesh)


def train_iterator(
    cfg: PlannerRunConfig, *, shard_index: int = 0, shard_count: int = 1
) -> grain.DatasetIterator:
    """Checkpointable iterator of training batches: the expert samples (this host's shard)
    shuffled with the run's seed, repeated, ``batch_size // shard_count`` indices per batch, then
    gathered (``{key: array[indices]}`` for :data:`BATCH_KEYS`)."""
    if cfg.batch_size % shard_count:
        raise ConfigError("batch_size", cfg.batch_size, f"a multiple of the {shard_count} hosts")
    data = expert_data(cfg)
    n = data["future"].shape[0]

    def gather(idx: np.ndarray) -> dict[str, np.ndarray]:
        return {k: data[k][idx] for k in BATCH_KEYS}

    ds = grain.MapDataset.range(n)[shard_index::shard_count].shuffle(seed=cfg.seed).repeat()
    ds = ds.batch(cfg.batch_size // shard_count, drop_remainder=True).map(gather)
    return iter(ds.to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)))


def scene_of(batch: dict) -> dict:
    """The scene tokens of a batch (or an observation)."""
    return {k: batch[k] for k in pl.SCENE_KEYS}


def dummy_scene(cfg: pl.PlannerConfig, batch: int = 1) -> dict:
    """Zero scene tokens of the planner's shapes (for initialisation)."""
    shapes = cfg.input_shapes()
    return {
        k: jnp.zeros((batch,) + s, bool if k.endswith("_valid") else jnp.float32)
        for k, s in shapes.items()
    }
