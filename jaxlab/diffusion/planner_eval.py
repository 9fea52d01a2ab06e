"""Evaluating a trained planner: open-loop ADE/FDE against held-out expert logs, the closed-loop
score (:mod:`jaxlab.envs.driving.evaluation`) of the expert, the constant-velocity planner and the
diffusion planner without and with guidance, their table, and a closed-loop GIF.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.diffusion import planner as pl
from jaxlab.diffusion.planner_config import PlannerRunConfig
from jaxlab.diffusion.planner_data import expert_data, scene_of, world
from jaxlab.envs.driving import evaluation as de

#: every planner :func:`evaluate_run` can score, in the table's order
PLANNERS: tuple[str, ...] = ("expert", "constant_velocity", "unguided", "diffusion")

#: the closed-loop metrics of the table
TABLE_KEYS = (
    "score",
    "collision",
    "drivable",
    "progress",
    "ttc_ok",
    "comfortable",
    "offroad_time",
    "jump_rate",
    "backward_rate",
    "max_jump",
    "score_straight",
    "score_intersection",
    "score_merge",
)


def planner_plan_fn(cfg: pl.PlannerConfig, params, guidance=None):
    """A closed-loop ``plan_fn(key, obs, state)`` sampling the ego plan with the planner."""

    def plan_fn(key, obs, state):
        del state
        traj = pl.sample_trajectories(params, key, scene_of(obs), cfg, guidance=guidance)
        return traj[:, 0]

    return plan_fn


def evaluate_run(
    cfg: PlannerRunConfig,
    params,
    *,
    planners: tuple[str, ...] = PLANNERS,
    seed: int = 1,
    n_scenes: int | None = None,
    steps: int | None = None,
) -> dict[str, float]:
    """Open-loop ADE/FDE (held-out expert logs) and closed-loop metrics of each planner:
    ``expert``, ``constant_velocity``, ``unguided`` (diffusion, no guidance) and ``diffusion``
    (with the config's guidance). Keys ``<planner>/<metric>``."""
    m = cfg.model
    env, params_w = world(cfg)
    n = cfg.eval_scenes if n_scenes is None else n_scenes
    t = cfg.eval_steps if steps is None else steps
    key = jax.random.PRNGKey(seed)
    held = expert_data(cfg, "valid")
    k = min(256, held["future"].shape[0])
    sc = {kk: v[:k] for kk, v in held.items() if kk in pl.SCENE_KEYS}
    traj = jax.jit(lambda p, key, s: pl.sample_trajectories(p, key, s, m))(params, key, sc)
    ade, fde = de.ade_fde(traj[:, 0], jnp.asarray(held["future"][:k, 0]))
    out = {"open_loop/ade": float(ade), "open_loop/fde": float(fde)}

    def run(make_plan_fn, expert_progress=None):
        # parameters enter as arguments (closed-over arrays would be folded as XLA constants)
        f = jax.jit(
            lambda key, ep, p: de.closed_loop(
                key, env, params_w, make_plan_fn(p), n_scenes=n, steps=t, expert_progress=ep
            )
        )
        return f(key, expert_progress, params)

    expert = run(lambda p: de.expert_plan_fn(env, params_w))
    ref = expert["progress_m"]
    fns = {
        "expert": None,
        "constant_velocity": lambda p: de.constant_velocity_plan_fn(m.horizon, float(params_w.dt)),
        "unguided": lambda p: planner_plan_fn(m, p, guidance=()),
        "diffusion": lambda p: planner_plan_fn(m, p),
    }
    for name in planners:
        res = expert if name == "expert" else run(fns[name], ref)
        if name == "expert":
            res = dict(res, progress=jnp.ones_like(res["progress"]))
        for key_, v in de.summarize(res).items():
            out[f"{name}/{key_}"] = v
    return out


def write_gif(cfg: PlannerRunConfig, params, path: Path, *, n_scenes: int, steps: int) -> None:
    """Closed-loop GIF of the guided planner: ego plan (green) and neighbour predictions (yellow)."""
    from jaxlab.media import save_gif

    m = cfg.model
    env, params_w = world(cfg)

    def make_plan_fn(p):
        return lambda key, obs, state: pl.sample_trajectories(p, key, scene_of(obs), m)

    res = jax.jit(
        lambda key, p: de.closed_loop(
            key, env, params_w, make_plan_fn(p), n_scenes=n_scenes, steps=steps, record=True
        )
    )(jax.random.PRNGKey(2), params)
    log = jax.device_get(res["log"])
    frames = []
    for i in range(steps):
        row = []
        for b in range(n_scenes):
            st = jax.tree.map(lambda v, i=i, b=b: v[i, b], log["state"])
            traj = np.asarray(log["plan"][i, b])
            valid = np.asarray(st.nb_valid)
            row.append(env.render(st, plan=traj[0], predictions=traj[1:][valid], size=128))
        frames.append(np.concatenate(row, 1))
    save_gif(path, frames, fps=10)


def format_table(res: dict[str, float], planners) -> str:
    """The closed-loop table: a row per planner, a column per :data:`TABLE_KEYS` metric."""
    head = f"{'planner':<18}" + "".join(f"{k[:12]:>13}" for k in TABLE_KEYS)
    lines = [head]
    for p in planners:
        cells = "".join(
            f"{res.get(f'{p}/{k}', float('nan')):>13.3f}" if f"{p}/{k}" in res else f"{'-':>13}"
            for k in TABLE_KEYS
        )
        lines.append(f"{p:<18}{cells}")
    return "\n".join(lines)
