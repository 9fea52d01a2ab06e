"""Speed of Diffusion Planner (:mod:`jaxlab.diffusion.planner`) in the driving world: JSON lines.

Latency of one plan (batch 1) and plans/s for 256 scenes (one vmapped batch), with and without
guidance; world steps/s at 1 and 4096 scenes; compile times. Parameters from ``--run-dir`` (a
``planner`` run) or freshly initialised at the cpu preset's size.

Run: ``python -m benchmarks.bench_planner [--run-dir R]`` (or ``jaxlab bench planner``). The
planner's route-mode study is ``experiments/planner_modes/``.
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.harness import emit_rate, timed
from jaxlab.core.run import open_run
from jaxlab.diffusion import planner as pl
from jaxlab.diffusion import planner_data
from jaxlab.envs.driving import evaluation as de
from jaxlab.recipes import planner as rp


def _params(run_dir):
    """The run's config and EMA parameters, or the cpu preset freshly initialised."""
    if run_dir is None:
        cfg = rp.RECIPE.config("cpu")
        params = jax.jit(
            lambda k: pl.init_planner(k, cfg.model, planner_data.dummy_scene(cfg.model))
        )(jax.random.PRNGKey(0))
        return cfg, params
    run = open_run(run_dir, recipe=rp.RECIPE)
    return run.cfg, run.state.ema_params


def speed(run_dir):
    cfg, params = _params(run_dir)
    m = cfg.model
    logs = planner_data.expert_data(cfg, "valid")
    for guidance in ((), (("collision", 0.5), ("drivable", 0.5))):
        for b in (1, 256):
            idx = np.arange(b) % logs["future"].shape[0]
            sc = {k: logs[k][idx] for k in pl.SCENE_KEYS}
            fn = jax.jit(
                lambda p, key, s, g=guidance: pl.sample_trajectories(p, key, s, m, guidance=g)
            )
            c, t, _, _ = timed(fn, params, jax.random.PRNGKey(0), sc, repeats=5)
            emit_rate(
                "plan",
                {"scenes": b, "width": m.width, "steps": m.steps, "guided": bool(guidance)},
                c,
                t,
                b / t,
                "plans/s",
                latency_ms=round(1000 * t, 2),
            )
    env, params_w = planner_data.world(cfg)
    for n in (1, 4096):
        _, st = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))(
            jax.random.split(jax.random.PRNGKey(0), n), params_w
        )
        plan = de.constant_velocity_plan(
            {"ego": jnp.zeros((n, 3)).at[:, 0].set(st.ego[:, 3])}, m.horizon, 0.1
        )

        def roll(st, plan):
            def body(s, _):
                s2 = jax.vmap(env.step_env, in_axes=(None, 0, 0, None))(
                    jax.random.PRNGKey(0), s, plan, params_w
                )[1]
                return s2, None

            return jax.lax.scan(body, st, None, length=20)[0]

        c, t, _, _ = timed(jax.jit(roll), st, plan, repeats=3)
        emit_rate("world_step", {"scenes": n}, c, t, 20 * n / t, "scene-steps/s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-dir", default=None, help="a planner run (default: fresh cpu preset)")
    speed(ap.parse_args().run_dir)


if __name__ == "__main__":
    main()
