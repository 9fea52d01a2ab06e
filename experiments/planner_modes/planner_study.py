"""The Diffusion Planner study (:mod:`jaxlab.diffusion.planner`) in the driving world: closed-loop
quality and the route modes at the intersection, as JSON lines (write-up: ``planner_modes.md``
beside this file; the planner's speed is ``benchmarks/bench_planner.py``).

Sections (``--only a,b``):

- ``quality`` (``--run-dir``, a run with the route visible): open-loop ADE/FDE, the distance of
  10-step to 100-step DPM-Solver++ samples on the same noise, and the closed-loop table (expert,
  constant velocity, unguided diffusion and the ``--variants`` of guidance, in ``--window``) on
  the scenario set ``--seed``.
- ``modes`` (``--modes-run-dir``, a run on intersections with the route hidden): the route mode
  (heading change at the trajectory's end: left > 0.15 rad, right < -0.15 rad, else straight) of
  the ego's sampled plans 6 m before the junction and of the first neighbour's sampled
  predictions 4 m before it, vs the logged futures' modes, with chi-square tests of the
  planner's counts against the logged proportions and against the known ones (1/3 each: the
  world draws routes uniformly; the logged counts are one noisy draw of them); ``*_shape`` lines
  tell a regression to the mean (turns blurred between the modes, one mode per scene) from a
  wrong mixture (sharp turns in the wrong shares); ``--solver-steps`` re-samples with more
  DPM-Solver++ steps (shares that hold are the model's, not the solver's); ``--modes-split train``
  takes training rollouts instead of held-out ones (a per-scene agreement with the hidden logged
  mode above 1/3 there, and not on held-out scenes, is memorisation); ``--modes-params raw``
  samples with the optimiser's iterate at ``--step`` instead of its EMA (the recipe's model);
  ``--modes-sampler ancestral`` samples with the reverse SDE's ancestral steps instead of
  DPM-Solver++ (with ``--solver-steps``: they resample noise at every step, so a model's errors
  at low noise weigh more).
  The ``*_paired`` lines take the scene as the unit (a scene's samples share its cues, so the
  count tests above overstate their evidence): Hotelling's T^2 on per-scene (planner shares -
  logged one-hot) tests calibration to the expert, on (planner shares - 1/3) the marginal against
  the world's uniform route draw; stated threshold p >= 0.01. Use ``--temperature 1.0`` (the
  preset's 0.5, the original's lowered start, concentrates samples towards the middle mode by
  design).
  ``--neighbour-windows 0,1,2,...`` adds ``neighbour_modes_window`` lines: neighbour 0's shares
  and the paired tests at those samples of each rollout (0.1 s apart; its route is hidden until
  about sample 4, then the per-scene agreement with the logged mode climbs to 1), with the
  straight share by the neighbour's speed (a slow one turns later in the 1.6 s horizon, so its
  three futures lie closest together), the sampled and logged turners' median |heading change|,
  and |heading change| quantiles per band around the straight/turn boundary (a turner sampled
  with a turn onset late in the horizon falls under the 0.15 rad cut and reads straight).
- ``posterior`` (``--modes-run-dir``, same kind of run; ``--modes-scenes`` scenes,
  ``--samples-per-scene`` noise draws): each scene rolled out once per forced route of neighbour 0
  (its three possible futures exactly); the denoiser's error against the optimal x_0 estimate
  along left->straight and straight->right per t, and the sampler's shares with the model's
  denoiser vs with neighbour 0's row replaced by the optimal one (tells a skew of the model from
  one of the sampler). ``--floor-keys K``: the modes test taken by that perfect model under the
  same sampler, K noise keys (with ``--samples-per-scene 2``: 8 samples per scene, as ``modes``),
  against a third, against the scene's drawn route, and the model against it scene by scene.
- ``ego_posterior`` (same kind of run): the held-out rollouts of ``modes`` rolled out again with
  the ego's route forced to each mode: how far the scene tokens at the ego's measurement point
  tell the routes apart (the ego's speed shows whether a neighbour ahead keeps to its route), and
  the model's ego shares in scenes with a faint and with a plain cue (a split drawn with the
  logged route, so not a calibration test) and with and without the car parked by the right
  turn; and a classifier trained on the same tokens as a reference for the ego's route
  posterior (``ego_posterior_probe``), the model tested against it scene by scene.
  ``--floor-keys K``: a second classifier, to the route drawn (``ego_posterior_probe_route``),
  weighs the three forced-route futures of each scene, and the ego's row of the x_0 estimate
  replaced by their optimal mixture gives the modes test of a model that reads the tokens as the
  classifier does, under the same sampler, K noise keys (``ego_floor_*``): against the logged
  modes, and the model against it scene by scene.

Run: ``python -m experiments.planner_modes.planner_study --only quality,modes --run-dir R1
--modes-run-dir R2 --window 0.0005,0.1 --variants 'collision:20' --scenes 256 --seed 12``. Train
the runs with ``jaxlab train planner --preset cpu --run-dir R1`` and ``jaxlab train planner
--preset cpu --run-dir R2 scene_type=1 route_visible=false n_scenes=4096
loop.total_steps=18000`` (28 min here). The quality section's guided variants
are also compared with the unguided planner scene by scene (McNemar's exact test on the scenes
where only one of the two collides). Figures: ``benchmarks/results/planner_cpu.jsonl``.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.harness import emit
from jaxlab.core.run import open_run
from jaxlab.diffusion import planner as pl
from jaxlab.diffusion import planner_data
from jaxlab.diffusion.planner_eval import planner_plan_fn
from jaxlab.diffusion.schedules import VPLinear
from jaxlab.envs.driving import evaluation as de
from jaxlab.envs.driving import make_driving, project, to_frame
from jaxlab.recipes import planner as rp


def _params(run_dir, step=None, which="ema"):
    """The run's config and its EMA parameters (what the recipe evaluates and ships), or
    ``which="raw"``: the optimiser's current iterate at that step."""
    if which not in ("ema", "raw"):
        raise ValueError(f"--modes-params: {which!r} is not 'ema' or 'raw'")
    if run_dir is None:
        cfg = rp.RECIPE.config("cpu")
        params = jax.jit(
            lambda k: pl.init_planner(k, cfg.model, planner_data.dummy_scene(cfg.model))
        )(jax.random.PRNGKey(0))
        return cfg, params
    run = open_run(run_dir, recipe=rp.RECIPE, step=step)
    return run.cfg, run.state.ema_params if which == "ema" else run.state.params


def parse_variants(spec: str) -> dict[str, tuple[tuple[str, float], ...]]:
    """``"collision:0.5;collision:2+drivable:2"`` -> {name: ((energy, weight), ...)}; the empty
    variant ``unguided`` is always first."""
    out = {"unguided": ()}
    for item in filter(None, spec.split(";")):
        terms = tuple((n, float(w)) for n, w in (t.split(":") for t in item.split("+")))
        out[item] = terms
    return out


def quality(run_dir, scenes, steps, variants, window, seed, step=None):
    cfg, params = _params(run_dir, step)
    m = cfg.model
    if window is not None:
        m = dataclasses.replace(m, guidance_window=window)
    held = planner_data.expert_data(cfg, "valid")
    k = min(256, held["future"].shape[0])
    sc = {kk: v[:k] for kk, v in held.items() if kk in pl.SCENE_KEYS}
    noise = jax.random.normal(jax.random.PRNGKey(7), (k, m.n_agents, 1 + m.horizon, 4))
    samp = jax.jit(
        lambda n, p, s, z: pl.sample_trajectories(p, None, s, m, noise=z, steps=n, guidance=()),
        static_argnums=0,
    )
    ref = samp(100, params, sc, noise)
    for n in (3, 10):
        d = jnp.linalg.norm(samp(n, params, sc, noise)[..., :2] - ref[..., :2], axis=-1)
        emit(
            what="steps_vs_100",
            steps=n,
            mean_dist_m=float(jnp.mean(d[:, 0])),
            ego_final_dist_m=float(jnp.mean(d[:, 0, -1])),
            all_agents_mean_dist_m=float(jnp.mean(d)),
        )
    env, params_w = planner_data.world(cfg)
    key = jax.random.PRNGKey(seed)
    run = lambda make_fn, ep: jax.jit(  # noqa: E731
        lambda key, ep, p: de.closed_loop(
            key, env, params_w, make_fn(p), n_scenes=scenes, steps=steps, expert_progress=ep
        )
    )(key, ep, params)
    t0 = time.perf_counter()
    expert = run(lambda p: de.expert_plan_fn(env, params_w), None)
    emit(what="closed_loop", planner="expert", scenes=scenes, steps=steps, **de.summarize(expert))
    ref_p = expert["progress_m"]
    cv = run(lambda p: de.constant_velocity_plan_fn(m.horizon, 0.1), ref_p)
    emit(what="closed_loop", planner="constant_velocity", **de.summarize(cv))
    from scipy.stats import binomtest

    base = None
    for name, g in variants.items():
        res = run(lambda p, g=g: planner_plan_fn(m, p, guidance=g), ref_p)
        emit(what="closed_loop", planner=f"diffusion_{name}", guidance=g,
             window=m.guidance_window, seed=seed, **de.summarize(res))  # fmt: skip
        events = {
            "collision": np.asarray(res["collision"]) > 0,
            "offroad": np.asarray(res["drivable"]) == 0,
        }
        if base is None:
            base = events
            continue
        # paired on the same scenes (McNemar's exact test): scenes where only one of the two has
        # the event
        for ev, hit in events.items():
            only_u, only_g = int(np.sum(base[ev] & ~hit)), int(np.sum(hit & ~base[ev]))
            n_disc = only_u + only_g
            p_val = binomtest(only_g, n_disc, 0.5).pvalue if n_disc else 1.0
            emit(what=f"{ev}_vs_unguided", planner=f"diffusion_{name}", scenes=int(hit.size),
                 only_unguided=only_u, only_guided=only_g, mcnemar_p=float(p_val))  # fmt: skip
    traj = jax.jit(lambda key, p, s: pl.sample_trajectories(p, key, s, m, guidance=()))(
        key, params, sc
    )
    ade, fde = de.ade_fde(traj[:, 0], held["future"][:k, 0])
    emit(what="open_loop", ade_m=float(ade), fde_m=float(fde), samples=k,
         seconds=round(time.perf_counter() - t0, 1))  # fmt: skip


def _modes_of(h):
    """0 left, 1 straight, 2 right from the heading change ``h`` (rad, ``_turn``)."""
    return np.where(h > 0.15, 0, np.where(h < -0.15, 2, 1))


def _turn(traj, h0=0.0):
    """Heading change (rad) at the end of trajectories, wrapped to (-pi, pi]."""
    h = np.arctan2(traj[..., -1, 3], traj[..., -1, 2]) - h0
    return (h + np.pi) % (2 * np.pi) - np.pi


def _mode_shape(what, expert_turn, plan_turn, samples_per_scene):
    """Whether a collapse towards "straight" is a regression to the mean (sampled turns blurred
    between the modes, one mode per scene) or a wrong mixture (sharp turns, wrong shares): the
    quantiles of |turn| for logged and sampled futures, and how many distinct modes a scene's
    samples take."""
    q = [0.1, 0.25, 0.5, 0.75, 0.9]
    modes = _modes_of(plan_turn).reshape(-1, samples_per_scene)
    distinct = np.mean([len(set(row.tolist())) for row in modes])
    emit(what=f"{what}_shape", logged_abs_turn_quantiles=np.quantile(np.abs(expert_turn), q)
         .round(3).tolist(), sampled_abs_turn_quantiles=np.quantile(np.abs(plan_turn), q)
         .round(3).tolist(), sampled_in_between=float(np.mean(
             (np.abs(plan_turn) > 0.05) & (np.abs(plan_turn) < 0.3))),
         logged_in_between=float(np.mean((np.abs(expert_turn) > 0.05)
                                         & (np.abs(expert_turn) < 0.3))),
         distinct_modes_per_scene=float(distinct))  # fmt: skip


def _mode_test(what, expert_modes, plan_modes, samples_per_scene):
    from scipy.stats import chisquare

    exp_counts = np.bincount(expert_modes, minlength=3)
    counts = np.bincount(plan_modes, minlength=3)
    expected = exp_counts / exp_counts.sum() * counts.sum()
    stat, p = chisquare(counts, np.maximum(expected, 1e-9))
    # the routes are drawn uniformly by construction (the known proportions, 1/3 each): the
    # logged counts are one noisy draw of them
    stat_u, p_u = chisquare(counts)
    emit(what=what, scenes=len(expert_modes), samples_per_scene=samples_per_scene,
         expert_counts=exp_counts.tolist(), planner_counts=counts.tolist(),
         chi2_vs_logged=float(stat), p_vs_logged=float(p),
         chi2_vs_known=float(stat_u), p_vs_known=float(p_u))  # fmt: skip
    # per scene: how often a scene's samples take the logged mode (about the mode's share is the
    # faithful answer when the mode is not yet visible; 1 would mean it leaks)
    same = (
        plan_modes.reshape(len(expert_modes), samples_per_scene) == expert_modes[:, None]
    ).mean()
    emit(what=f"{what}_per_scene", agree_with_logged_mode=float(same))
    share = np.stack(
        [np.mean(plan_modes.reshape(len(expert_modes), -1) == k, 1) for k in range(3)], 1
    )
    logged = np.bincount(expert_modes, minlength=3) / len(expert_modes)
    t2_l, p_l = _hotelling(share - np.eye(3)[expert_modes])
    t2_u, p_u = _hotelling(share - 1.0 / 3.0)
    emit(what=f"{what}_paired", scenes=len(expert_modes), shares=share.mean(0).round(3).tolist(),
         logged_shares=logged.round(3).tolist(), t2_vs_logged=t2_l, p_vs_logged=p_l,
         t2_vs_known=t2_u, p_vs_known=p_u, threshold=0.01)  # fmt: skip


def _hotelling(d):
    """Hotelling's T^2 test that the per-scene vectors ``d`` [scenes, 3] (each summing to 0) have
    mean 0, on their first two components; returns (T^2, p). The scene is the unit: a scene's
    samples share its cues, so they are not independent draws, and the test is valid whatever
    each scene reveals of the route. ``d`` = the planner's mode shares in a scene minus the
    one-hot of the logged mode there tests calibration to the expert (equal expectations for
    every scene distribution); minus 1/3 tests the planner's marginal against the world's
    uniform route draw."""
    from scipy.stats import f as f_dist

    x = np.asarray(d, np.float64)[:, :2]
    n = x.shape[0]
    mean = x.mean(0)
    cov = np.cov(x, rowvar=False)
    t2 = float(n * mean @ np.linalg.solve(cov, mean))
    stat = (n - 2) / (2 * (n - 1)) * t2
    return round(t2, 3), float(f_dist.sf(stat, 2, n - 2))


_TURN_Q = (0.25, 0.3, 0.35, 0.4, 0.5, 0.75)


def modes(
    run_dir,
    samples_per_scene,
    n_scenes,
    temperature=None,
    solver_steps=None,
    split="valid",
    step=None,
    windows=(),
    which="ema",
    sampler="dpm_solver++",
):
    """Route modes at the intersection (a run with ``scene_type=1 route_visible=false``): the
    ego's, on the first sample of each held-out rollout at 6 m or less before the junction
    (s >= 34 on its route); neighbour 0's, on the first sample of each rollout (4 m before the
    junction: its turn is not visible yet). Modes from the heading change at the trajectory's end
    (1.6 s), logged futures vs planner samples, chi-square of the planner's counts against the
    logged proportions. ``split="train"`` takes the first ``n_scenes`` training rollouts instead:
    per-scene agreement with the logged mode well above 1/3 there (and not on held-out scenes)
    means the model memorised the training scenes' hidden routes."""
    cfg, params = _params(run_dir, step, which)
    cfg = dataclasses.replace(cfg, eval_scenes=n_scenes)  # held-out rollouts
    for k in windows:
        if not 0 <= k < cfg.log_steps:
            raise ValueError(f"--neighbour-windows: {k} is not in [0, {cfg.log_steps})")
    m = cfg.model
    if temperature is not None:  # 1.0 samples the learned distribution; the original uses 0.5
        m = dataclasses.replace(m, temperature=temperature)
    if solver_steps is not None:  # the shares are the model's, not the solver's, if they hold
        m = dataclasses.replace(m, steps=solver_steps)
    emit(what="modes_run", run_dir=str(run_dir), step=step, ego_weight=m.ego_weight, width=m.width,
         decoder_depth=m.decoder_depth, cross_residual=m.cross_residual, x0_skip=m.x0_skip,
         skip_sigma_data=m.skip_sigma_data, skip_edm_weight=m.skip_edm_weight, horizon=m.horizon,
         train_scenes=cfg.n_scenes,
         total_steps=cfg.loop.total_steps,
         lr_schedule=cfg.optim.schedule, decay_fraction=cfg.decay_fraction,
         static_scene_weight=cfg.static_scene_weight, snr_weight_cap=m.snr_weight_cap,
         norm_std=m.norm_std, obs_norm=m.obs_norm, temperature=m.temperature, solver_steps=m.steps,
         split=split,
         params=which,
         sampler=sampler)  # fmt: skip
    held = planner_data.expert_data(cfg, split)
    if split == "train":
        held = {k: v[: n_scenes * cfg.log_steps] for k, v in held.items()}
    n_roll = held["future"].shape[0] // cfg.log_steps
    ego_idx = _measurement_point(held, cfg.log_steps)
    nb_idx = np.arange(n_roll) * cfg.log_steps
    sample = jax.jit(
        lambda key, p, s: pl.sample_trajectories(p, key, s, m, guidance=(), sampler=sampler)
    )
    for what, idx, agent in (("route_modes", ego_idx, 0), ("neighbour_modes", nb_idx, 1)):
        sc = {k: np.repeat(np.asarray(held[k])[idx], samples_per_scene, 0) for k in pl.SCENE_KEYS}
        cur = np.asarray(held["current"])[idx, agent]
        h0 = np.arctan2(cur[:, 3], cur[:, 2])
        expert_turn = _turn(np.asarray(held["future"])[idx, agent], h0)
        traj = np.asarray(sample(jax.random.PRNGKey(5), params, sc))
        plan_turn = _turn(traj[:, agent], np.repeat(h0, samples_per_scene))
        expert_modes, plan_modes = _modes_of(expert_turn), _modes_of(plan_turn)
        _mode_test(what, expert_modes, plan_modes, samples_per_scene)
        _mode_shape(what, expert_turn, plan_turn, samples_per_scene)
        if agent:
            lanes = np.asarray(held["nb_lane"])[idx, 0]
            emit(what="neighbour_modes_vs_lane", logged_heading_mode_matches_lane=float(
                np.mean(expert_modes == lanes)))  # fmt: skip
    for k in windows:
        idx = np.arange(n_roll) * cfg.log_steps + k
        sc = {
            kk: np.repeat(np.asarray(held[kk])[idx], samples_per_scene, 0) for kk in pl.SCENE_KEYS
        }
        cur = np.asarray(held["current"])[idx, 1]
        h0 = np.arctan2(cur[:, 3], cur[:, 2])
        et = _turn(np.asarray(held["future"])[idx, 1], h0)
        em = _modes_of(et)
        traj = np.asarray(sample(jax.random.PRNGKey(5), params, sc))
        pt = _turn(traj[:, 1], np.repeat(h0, samples_per_scene)).reshape(n_roll, -1)
        pm = _modes_of(pt)
        share = np.stack([np.mean(pm == j, 1) for j in range(3)], 1)
        _, p_l = _hotelling(share - np.eye(3)[em])
        _, p_u = _hotelling(share - 1.0 / 3.0)
        # by the neighbour's speed: a slow one turns later in the horizon, so its three futures
        # are closest together (the logged turners' median |heading change| per band)
        v = np.linalg.norm(np.asarray(held["neighbours"])[idx, 0, -1, 4:6], axis=-1)
        bands = [(0.0, 5.5), (5.5, 7.0), (7.0, None)]
        sel = [(v >= lo) & (v < (np.inf if hi is None else hi)) for lo, hi in bands]
        emit(what="neighbour_modes_window", sample=k, scenes=n_roll,
             shares=share.mean(0).round(3).tolist(),
             logged_shares=(np.bincount(em, minlength=3) / n_roll).round(3).tolist(),
             agree_with_logged_mode=round(float(np.mean(pm == em[:, None])), 3),
             p_vs_logged=p_l, p_vs_known=p_u, speed_bands_mps=[list(b) for b in bands],
             scenes_by_speed=[int(s.sum()) for s in sel],
             straight_by_speed=[round(float(np.mean(pm[s] == 1)), 3) for s in sel],
             logged_straight_by_speed=[round(float(np.mean(em[s] == 1)), 3) for s in sel],
             logged_turn_by_speed=[round(float(np.median(np.abs(et[s & (em != 1)]))), 3)
                                   for s in sel],
             sampled_turn_by_speed=[round(float(np.median(np.abs(pt[s][pm[s] != 1]))), 3)
                                    for s in sel],
             # |heading change| quantiles around the straight/turn boundary (about the 1/3 point)
             turn_quantiles=list(_TURN_Q),
             logged_abs_turn_q_by_speed=[np.quantile(np.abs(et[s]), _TURN_Q).round(3).tolist()
                                         for s in sel],
             sampled_abs_turn_q_by_speed=[np.quantile(np.abs(pt[s]), _TURN_Q).round(3).tolist()
                                          for s in sel])  # fmt: skip


def ego_posterior(run_dir, n_scenes, samples_per_scene, step=None, solver_steps=None, floor_keys=0):
    """How much of the ego's route the scene shows at the modes test's measurement point, and
    where the model's ego samples lean. The held-out rollouts of ``modes`` are rolled out again
    with the ego's route forced to left, straight and right (same reset keys, the ego's start
    state kept; the forced logged route reproduces the log). Routes are drawn 1/3 each, so the
    exact route posterior is uniform over the routes whose rollout shows the same scene tokens
    there. Lines: ``ego_posterior_sets``: how many routes a scene leaves open at token
    tolerances 1e-4 .. 0.1, and the quantiles over scenes of the smallest token difference to
    another route (all tokens; the ego token's speed, acceleration and yaw rate: a neighbour
    ahead leads the ego only if it keeps to the ego's route, so the ego's speed shows the route);
    ``ego_posterior_model``: the model's shares (the modes test's key and samples) and its
    per-scene agreement with the logged mode, for scenes whose nearest other route differs in the
    ego token by less / more than 0.1 (a faint cue / a plain one), each with the paired test
    against the one-hot of the logged future's mode (the heading rule of ``modes``; ``routes``
    are the routes drawn, which a slow turner's 1.6 s future may not show yet); the same for
    scenes with and without the car parked by the right turn (it leads the ego on the right
    route only); ``shares_by_logged_mode`` / ``shares_by_route`` (the model's shares given the
    logged mode / the drawn route), ``logged_by_route``, and ``turn_q_by_route`` (quantiles of
    the model's and the logged heading change given the drawn route: sharp or blurred turns).
    The ego's speed also depends on its hidden driving style (desired speed, headway), so the
    same speed can come from another route with another style: the posterior given the tokens
    is not the forced-route one, which holds the style fixed; ``_ego_probe`` estimates it.
    ``floor_keys`` K > 0: ``_ego_floor``, the modes test taken by a model with the route probe's
    posterior under the same sampler, K noise keys."""
    cfg, params = _params(run_dir, step)
    m = dataclasses.replace(cfg.model, temperature=1.0)
    if solver_steps is not None:
        m = dataclasses.replace(m, steps=solver_steps)
    cfg = dataclasses.replace(cfg, eval_scenes=n_scenes)
    held = planner_data.expert_data(cfg, "valid")  # the modes test's held-out rollouts
    env, eparams = planner_data.world(cfg)
    n_roll = held["future"].shape[0] // cfg.log_steps

    def force(route):
        def edit(st):
            s0, _ = project(st.lanes[route], st.lane_len[route], st.ego[:2])
            return st.replace(route=jnp.int32(route), route_mode=jnp.int32(route), start_s=s0)

        return edit

    key = jax.random.PRNGKey(cfg.seed + 10_000)  # planner_data.expert_data's held-out key
    logs = [
        jax.device_get(jax.jit(lambda k, r=r: de.expert_logs(
            k, env, eparams, n_scenes=n_roll, steps=cfg.log_steps, edit_reset=force(r)))(key))
        for r in range(3)
    ]  # fmt: skip
    idx = _measurement_point(held, cfg.log_steps)
    logged = np.asarray(held["route_mode"])[idx]
    rows = np.arange(n_roll)
    own = np.stack([logs[r]["future"][idx] for r in range(3)], 1)[rows, logged]
    reproduced = bool(np.allclose(own, np.asarray(held["future"])[idx], atol=1e-5))

    def token_diff(keys):  # (S, 3): max |token difference| of each forced route to the log
        return np.stack(
            [
                np.max(
                    [
                        np.abs(
                            np.asarray(logs[r][k][idx], np.float32)
                            - np.asarray(held[k][idx], np.float32)
                        )
                        .reshape(n_roll, -1)
                        .max(1)
                        for k in keys
                    ],
                    0,
                )
                for r in range(3)
            ],
            1,
        )

    diff = token_diff(pl.SCENE_KEYS)
    other = np.where(np.eye(3, dtype=bool)[logged], np.inf, diff).min(1)
    mine = np.eye(3, dtype=bool)[logged]
    ego_diff = np.stack(
        [np.abs(logs[r]["ego"][idx] - np.asarray(held["ego"])[idx]) for r in range(3)], 1
    )  # (S, 3 routes, speed / acceleration / yaw rate)
    ego_other = np.where(mine[..., None], np.inf, ego_diff).min(1)  # (S, 3)
    cue = ego_other.max(1)
    q = [0.1, 0.25, 0.5, 0.75, 0.9]
    emit(what="ego_posterior_sets", run_dir=str(run_dir), step=step, scenes=n_roll,
         obs_norm=cfg.model.obs_norm,
         forced_own_route_reproduces_log=reproduced,
         tolerances=[1e-4, 1e-3, 1e-2, 1e-1],
         open_routes_mean=[float(np.mean((diff <= tol).sum(1))) for tol in (1e-4, 1e-3, 1e-2, 0.1)],
         quantiles=q, nearest_other_route_token_diff_q=np.quantile(other, q).round(4).tolist(),
         nearest_other_route_ego_speed_acc_yaw_diff_q=np.quantile(ego_other, q, axis=0)
         .T.round(4).tolist(),
         routes=(np.bincount(logged, minlength=3) / n_roll).round(4).tolist())  # fmt: skip
    sc = {k: np.repeat(np.asarray(held[k])[idx], samples_per_scene, 0) for k in pl.SCENE_KEYS}
    model = jax.jit(lambda k, p, sc: pl.sample_trajectories(p, k, sc, m, guidance=()))
    traj = np.asarray(model(jax.random.PRNGKey(5), params, sc))  # the modes test's key
    cur = np.asarray(held["current"])[idx, 0]
    head = np.arctan2(cur[:, 3], cur[:, 2])
    turn = _turn(traj[:, 0], np.repeat(head, samples_per_scene)).reshape(n_roll, samples_per_scene)
    pm = _modes_of(turn)
    share = np.stack([np.mean(pm == j, 1) for j in range(3)], 1)
    # the logged future's mode by the same heading rule, as in ``modes`` (a slow turner's logged
    # future may not have turned 0.15 rad within the horizon: it reads straight, as its samples do)
    seen_turn = _turn(np.asarray(held["future"])[idx, 0], head)
    seen = _modes_of(seen_turn)
    d = share - np.eye(3)[seen]
    parked = np.asarray(held["static_valid"])[idx].any(1)  # the car parked by the right turn
    out = {}
    for name, sel in (
        ("all", rows >= 0),
        ("faint", cue < 0.1),
        ("plain", cue >= 0.1),
        ("parked_car", parked),
        ("no_parked_car", ~parked),
    ):
        _, p = _hotelling(d[sel]) if sel.sum() > 3 else (None, None)
        out[name] = dict(scenes=int(sel.sum()), shares=share[sel].mean(0).round(4).tolist(),
                         logged_shares=(np.bincount(seen[sel], minlength=3) / max(sel.sum(), 1))
                         .round(4).tolist(),
                         routes=(np.bincount(logged[sel], minlength=3) / max(sel.sum(), 1))
                         .round(4).tolist(),
                         agree_with_logged_mode=round(float(np.mean(pm[sel] == seen[sel, None])), 4),
                         shares_by_logged_mode=[share[sel & (seen == j)].mean(0).round(3).tolist()
                                                for j in range(3)],
                         shares_by_route=[share[sel & (logged == j)].mean(0).round(3).tolist()
                                          for j in range(3)],
                         logged_by_route=[(np.bincount(seen[sel & (logged == j)], minlength=3)
                                           / max((sel & (logged == j)).sum(), 1)).round(3).tolist()
                                          for j in range(3)],
                         turn_q_by_route=[
                             [np.quantile(turn[sel & (logged == j)], q).round(3).tolist(),
                              np.quantile(seen_turn[sel & (logged == j)], q).round(3).tolist()]
                             if (sel & (logged == j)).any() else None for j in range(3)],
                         p_vs_logged=p)  # fmt: skip
    emit(what="ego_posterior_model", samples_per_scene=samples_per_scene, solver_steps=m.steps,
         ego_cue_cut=0.1, **out)  # fmt: skip
    groups = {"all": rows >= 0, "faint": cue < 0.1, "plain": cue >= 0.1, "parked_car": parked,
              "no_parked_car": ~parked}  # fmt: skip
    probe_rows = _probe_rows(cfg)
    _ego_probe(cfg, held, idx, seen, groups, share, probe_rows)
    if floor_keys:
        prior = _ego_probe(cfg, held, idx, logged, groups, share, probe_rows, target="route")
        futures = np.stack([np.asarray(logs[r]["future"])[idx, 0] for r in range(3)], 1)
        fair = {k: groups[k] for k in ("all", "parked_car", "no_parked_car")}
        _ego_floor(params, m, sc, futures, prior, logged, seen, head, pm, fair, floor_keys)


def _measurement_point(logs, log_steps):
    """Each rollout's row at its first step 6 m before the junction (the ego's arc length 34 m):
    where the modes test reads the ego's route."""
    n = logs["future"].shape[0] // log_steps
    ego_s = np.asarray(logs["ego_s"]).reshape(n, log_steps)
    return np.arange(n) * log_steps + np.argmax(ego_s >= 34.0, axis=1)


def _probe_features(logs, idx):
    """What the scene tokens say about the ego's route: its motion state, the parked cars and
    the neighbours' current states (the lanes and the hidden route do not change with it)."""
    parts = [
        np.asarray(logs["ego"])[idx],
        np.asarray(logs["static"])[idx].reshape(len(idx), -1),
        np.asarray(logs["static_valid"])[idx].astype(np.float32),
        np.asarray(logs["neighbours"])[idx, :, -1, :6].reshape(len(idx), -1),
        np.asarray(logs["neighbour_valid"])[idx].astype(np.float32),
    ]
    return np.concatenate(parts, 1).astype(np.float32)


def _probe_rows(cfg, chunks=8):
    """The probes' training rows: the scene tokens at the measurement point of ``chunks`` x 4096
    rollouts of the run's world (other keys than its own), with the logged future's mode (the
    heading rule) and the route drawn."""
    env, eparams = planner_data.world(cfg)
    gen = jax.jit(lambda k: de.expert_logs(k, env, eparams, n_scenes=4096, steps=cfg.log_steps))
    xs, modes, routes = [], [], []
    for i in range(chunks):
        logs = jax.device_get(gen(jax.random.PRNGKey(cfg.seed + 20_000 + i)))
        tidx = _measurement_point(logs, cfg.log_steps)
        xs.append(_probe_features(logs, tidx))
        modes.append(_modes_of(_turn(np.asarray(logs["future"])[tidx, 0])))
        routes.append(np.asarray(logs["route_mode"])[tidx])
    return np.concatenate(xs), np.concatenate(modes), np.concatenate(routes)


def _ego_probe(cfg, held, idx, seen, groups, model_share, rows, target="mode", steps=3000,
               every=100):  # fmt: skip
    """A reference for the ego's route posterior, as the exact denoiser is for neighbour 0's: a
    classifier (MLP, AdamW, weight decay, the step of least held-back log loss kept) from the
    scene tokens at the measurement point to the logged mode (``target="route"``: to the route
    drawn, then tested against ``seen`` = the drawn routes), trained on ``rows`` (``_probe_rows``:
    80 %; 20 % held back to pick the step). Returns its probabilities on the held-out scenes.
    They take the same test against the logged modes as the planner's sample shares
    (``ego_posterior_probe``), and the planner's shares are tested against its probabilities
    scene by scene (``model_p_vs_probe``). Where it passes and the planner fails, the tokens hold
    what the test asks and the planner reads it wrongly. The ``faint`` / ``plain`` split is made
    with the logged route itself (the distance to the nearest *other* route's tokens), so no
    posterior is calibrated within it; ``parked_car`` is read from the tokens and is a fair
    split."""
    import optax

    from jaxlab.nn import MLP

    x, ty = rows[0], rows[1 if target == "mode" else 2]
    mu, sd = x.mean(0), np.maximum(x.std(0), 1e-3)
    x = (x - mu) / sd
    n_fit = int(0.8 * len(x))
    net = MLP((64, 64, 3), activation=jax.nn.gelu)
    params = net.init(jax.random.PRNGKey(0), x[:1])
    opt = optax.adamw(1e-3, weight_decay=1e-3)

    def nll(p, xs, ys):
        return optax.softmax_cross_entropy_with_integer_labels(net.apply(p, xs), ys).mean()

    @jax.jit
    def chunk(carry):
        def step(c, _):
            p, o = c
            g = jax.grad(nll)(p, x[:n_fit], ty[:n_fit])
            u, o = opt.update(g, o, p)
            return (optax.apply_updates(p, u), o), None

        carry, _ = jax.lax.scan(step, carry, None, length=every)
        return carry, nll(carry[0], x[n_fit:], ty[n_fit:])

    carry, best = (params, opt.init(params)), (np.inf, params, 0)
    for i in range(steps // every):
        carry, v = chunk(carry)
        if float(v) < best[0]:
            best = (float(v), carry[0], (i + 1) * every)
    hx = (_probe_features(held, idx) - mu) / sd
    prob = np.asarray(jax.nn.softmax(net.apply(best[1], hx)))
    d = prob - np.eye(3)[seen]
    out = {}
    for name, sel in groups.items():
        _, p = _hotelling(d[sel]) if sel.sum() > 3 else (None, None)
        out[name] = dict(scenes=int(sel.sum()), shares=prob[sel].mean(0).round(4).tolist(),
                         agree_with_logged_mode=round(float(np.mean(prob[sel, seen[sel]])), 4),
                         log_loss=round(float(-np.mean(np.log(prob[sel, seen[sel]]))), 4),
                         p_vs_logged=p, model_shares=model_share[sel].mean(0).round(4).tolist(),
                         # a route probe's probabilities are not heading-rule modes: no test
                         model_p_vs_probe=_hotelling(model_share[sel] - prob[sel])[1]
                         if target == "mode" else None)  # fmt: skip
    emit(what="ego_posterior_probe" + ("" if target == "mode" else "_route"), train_rows=n_fit,
         held_back_rows=len(x) - n_fit, best_step=best[2], held_back_log_loss=round(best[0], 4),
         train_modes=(np.bincount(ty, minlength=3) / len(ty)).round(4).tolist(), **out)  # fmt: skip
    return prob


def mixture_x0(x, futures, log_prior, alpha, sigma):
    """The optimal x_0 estimate of one agent's row, x_t = alpha x_0 + sigma eps, when its x_0 is
    one of K futures m_k with prior pi_k: sum_k w_k m_k with w = softmax(log pi_k - |x_t -
    alpha m_k|^2 / 2 sigma^2). ``x`` (B, D), ``futures`` (B, K, D), ``log_prior`` (B, K),
    ``alpha`` and ``sigma`` (B,)."""
    d2 = jnp.sum((x[:, None] - alpha[:, None, None] * futures) ** 2, -1)
    w = jax.nn.softmax(log_prior - d2 / (2 * sigma[:, None] ** 2), -1)
    return jnp.einsum("bk,bkd->bd", w, futures)


def _ego_floor(params, m, sc, futures, prior, logged, seen, head, model_modes, groups, keys):
    """A floor for the ego as the exact denoiser is for neighbour 0 (``_floor_test``): the model's
    sampler (``m.steps`` DPM-Solver++ steps) on the modes test's scenes and samples (``sc``), with the ego's row of the
    x_0 estimate replaced at every t by the optimal one of a model whose ego future is one of
    the three forced-route futures (``futures`` (S, 3, T, 4): the scene's driving style held)
    with the route probe's posterior ``prior`` (S, 3) as their weights. ``ego_floor_check``: with
    the logged route's one-hot as the prior every sample must read the logged future's mode.
    One ``ego_floor_test`` line per noise key: the floor's shares and its test against the
    logged modes (heading rule, the scene as the unit, Hotelling p >= 0.01), and the model's
    shares (``model_modes`` (S, R), key 5) against the floor's scene by scene (paired), for the
    scenes of each of ``groups``; ``ego_floor_summary`` counts the keys that fail. The check line's
    ``exact`` is the floor without a sampler: the prior summed over the routes whose forced future
    reads each mode (what an exact solver would draw), so the floor's excess over it is the
    sampler's."""
    n, reps = model_modes.shape
    sched = VPLinear()
    mk = jnp.repeat(pl.normalize(m, jnp.asarray(futures)).reshape(n, 3, -1), reps, 0)
    hs = np.repeat(head, reps)

    @jax.jit
    def run(key, sc, mk, log_prior):
        def swap(x0_hat, x, t):
            best = mixture_x0(x[:, 0, 1:].reshape(x.shape[0], -1), mk, log_prior,
                              sched.alpha(t), sched.sigma(t))  # fmt: skip
            return x0_hat.at[:, 0, 1:].set(best.reshape(x0_hat[:, 0, 1:].shape))

        return pl.sample_trajectories(params, key, sc, m, guidance=(), x0_fn=swap)[:, 0]

    def modes_of(key, log_prior):
        traj = np.asarray(run(key, sc, mk, jnp.repeat(jnp.asarray(log_prior), reps, 0)))
        return _modes_of(_turn(traj, hs)).reshape(n, reps)

    onehot = modes_of(jax.random.PRNGKey(99), np.where(np.eye(3)[logged] > 0, 0.0, -1e9))
    # the floor without a sampler: the prior pushed through the forced futures' modes
    exact = np.einsum("sr,srj->sj", prior, np.eye(3)[_modes_of(_turn(futures, head[:, None]))])
    emit(what="ego_floor_check", scenes=n, samples_per_scene=reps,
         onehot_prior_agrees_with_logged_mode=round(float(np.mean(onehot == seen[:, None])), 4),
         exact={g: dict(shares=exact[sel].mean(0).round(4).tolist(),
                        p_vs_logged=_hotelling(exact[sel] - np.eye(3)[seen[sel]])[1])
                for g, sel in groups.items()})  # fmt: skip
    model_share = np.stack([np.mean(model_modes == j, 1) for j in range(3)], 1)
    log_prior = np.log(np.maximum(prior, 1e-12))
    res = {g: [] for g in groups}
    for i in range(keys):
        fm = modes_of(jax.random.PRNGKey(100 + i), log_prior)
        share = np.stack([np.mean(fm == j, 1) for j in range(3)], 1)
        out = {}
        for g, sel in groups.items():
            _, p_l = _hotelling(share[sel] - np.eye(3)[seen[sel]])
            _, p_f = _hotelling(model_share[sel] - share[sel])
            res[g].append((p_l, p_f))
            out[g] = dict(scenes=int(sel.sum()), shares=share[sel].mean(0).round(4).tolist(),
                          model_shares=model_share[sel].mean(0).round(4).tolist(),
                          p_vs_logged=p_l, model_p_vs_floor=p_f)  # fmt: skip
        emit(what="ego_floor_test", key=100 + i, samples_per_scene=reps, solver_steps=m.steps,
             threshold=0.01, **out)  # fmt: skip
    if keys:
        out = {}
        for g, r in res.items():
            r = np.asarray(r)
            out[g] = dict(floor_fails_vs_logged=float(np.mean(r[:, 0] < 0.01)),
                          floor_median_p_vs_logged=float(np.median(r[:, 0])),
                          floor_p_vs_logged_range=[float(r[:, 0].min()), float(r[:, 0].max())],
                          model_fails_vs_floor=float(np.mean(r[:, 1] < 0.01)),
                          model_median_p_vs_floor=float(np.median(r[:, 1])),
                          model_p_vs_floor_range=[float(r[:, 1].min()), float(r[:, 1].max())])  # fmt: skip
        emit(what="ego_floor_summary", keys=keys, samples_per_scene=reps, solver_steps=m.steps,
             **out)  # fmt: skip


def _floor_test(oracle_jit, model_modes, h0, drawn, ok, n_scenes, reps, keys, m):
    """The modes test (``modes``: heading rule, the scene as the unit, Hotelling p >= 0.01) taken
    by a perfect model under the same sampler: neighbour 0's row of the x_0 estimate optimal
    throughout, ``reps`` samples per scene, one ``posterior_floor_test`` line per noise key
    (``keys`` of them). Its p against 1/3 is what the shipped sampler itself scores; ``p_vs_floor``
    tests the model's per-scene shares against the perfect model's on the same scenes (paired,
    the model's with key 3 against the optimal estimate's with each key)."""
    hs = np.repeat(h0, reps)
    model_share = np.stack([np.mean(model_modes[ok] == j, 1) for j in range(3)], 1)
    rows = []
    for i in range(keys):
        yo = pl.denormalize(m, oracle_jit(jax.random.PRNGKey(100 + i), jnp.array([-1.0, 2.0])))
        pm = _modes_of(_turn(np.asarray(yo[:, 1, 1:]), hs)).reshape(n_scenes, reps)[ok]
        share = np.stack([np.mean(pm == j, 1) for j in range(3)], 1)
        _, p_u = _hotelling(share - 1.0 / 3.0)
        _, p_l = _hotelling(share - np.eye(3)[drawn[ok]])
        _, p_f = _hotelling(model_share - share)
        rows.append((p_u, p_l, p_f))
        emit(what="posterior_floor_test", key=100 + i, scenes=int(ok.sum()),
             samples_per_scene=reps, shares=share.mean(0).round(4).tolist(),
             model_shares=model_share.mean(0).round(4).tolist(), p_vs_known=p_u,
             p_vs_logged=p_l, model_p_vs_floor=p_f, threshold=0.01)  # fmt: skip
    if rows:
        r = np.asarray(rows)
        _, p_model = _hotelling(model_share - 1.0 / 3.0)
        emit(what="posterior_floor_summary", keys=keys, scenes=int(ok.sum()),
             samples_per_scene=reps, solver_steps=m.steps,
             optimal_fails_vs_known=float(np.mean(r[:, 0] < 0.01)),
             optimal_median_p_vs_known=float(np.median(r[:, 0])),
             optimal_fails_vs_logged=float(np.mean(r[:, 1] < 0.01)),
             model_p_vs_known=p_model, model_fails_vs_floor=float(np.mean(r[:, 2] < 0.01)),
             model_median_p_vs_floor=float(np.median(r[:, 2])))  # fmt: skip


def posterior(
    run_dir,
    n_scenes,
    draws,
    step=None,
    t_grid=(0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8),
    solver_steps=None,
    floor_keys=0,
    bands=True,
):
    """The denoiser against the optimal one at the hidden-route intersection (a run with
    ``scene_type=1 route_visible=false``). Each held-out scene is rolled out three times with
    neighbour 0's route forced to left, straight and right (same reset key: the scene and every
    other random draw agree), which gives that neighbour's three possible futures m_k exactly.
    For x_t = alpha_t x_0^(k) + sigma_t eps (x_0^(k) all agents' futures under route k) the
    optimal x_0 estimate of neighbour 0 mixes the m_k with weights w_k ~ exp(-|x_t - alpha m_k|^2
    / 2 sigma^2) (routes drawn 1/3 each; neighbour 0's row only). One line per t and source
    route: the optimal weights, and the mean error of the model's estimate against the optimal one
    along left->straight and straight->right (in units of those distances; the three futures lie
    nearly on a line, so weights fitted to the model's estimate would be ill-conditioned).
    ``posterior_samples``: the sampler's shares on the same scenes, by nearest future and by the
    heading rule, and the same sampler with neighbour 0's row of the x_0 estimate replaced by the
    optimal one (shares near 1/3 there put a skew of the model's shares on its denoiser; with the
    10 steps of the preset the optimal estimate itself draws about 34.8 % straight, with
    ``--solver-steps 50`` about 33.5 %: the rest is the solver's discretisation)."""
    cfg, params = _params(run_dir, step)
    if solver_steps is not None:
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, steps=solver_steps))
    m = cfg.model
    env, eparams = make_driving(
        auto_reset=False,
        scene_type=1,
        route_visible=cfg.route_visible,
        n_neighbours=m.n_neighbours,
        horizon=m.horizon,
        history=m.history,
    )
    eparams = eparams.replace(max_steps=m.horizon + 2)

    def forced(key, lane):
        _, st = env.reset(key, eparams)
        drawn = st.nb_lane[0]  # the route the scene drew for neighbour 0 (lanes 0-2: L, S, R)
        st = st.replace(nb_lane=st.nb_lane.at[0].set(lane))
        obs = env.get_obs(st, eparams)

        def body(s, _):
            _, s2, *_ = env.step_env(key, s, env.expert_plan(s, eparams), eparams)
            return s2, env.agents(s2)

        _, ag = jax.lax.scan(body, st, None, length=m.horizon)  # (T, A, 4) world frame
        xy = to_frame(ag[..., :2], st.ego[:2], st.ego[2])
        h = ag[..., 2] - st.ego[2]
        fut = jnp.concatenate([xy, jnp.cos(h)[..., None], jnp.sin(h)[..., None]], -1)
        return {k: obs[k] for k in pl.SCENE_KEYS}, jnp.swapaxes(fut, 0, 1), drawn  # (A, T, 4)

    keys = jax.random.split(jax.random.PRNGKey(cfg.seed + 20_000), n_scenes)
    lanes = jnp.arange(3)
    scenes, futs, drawn = jax.jit(jax.vmap(jax.vmap(forced, (None, 0)), (0, None)))(keys, lanes)
    drawn = np.asarray(drawn[:, 0])
    same_scene = all(
        bool(jnp.all(v[:, :1] == v)) for v in scenes.values()
    )  # route hidden: the tokens must not tell the forced routes apart
    scene = {k: v[:, 0] for k, v in scenes.items()}  # (S, ...)
    valid = scene["neighbour_valid"][:, 0]
    cur_n = pl.normalize(m, scene["current"])  # (S, A, 4)
    x0 = jnp.concatenate(
        [
            jnp.broadcast_to(cur_n[:, None, :, None], (n_scenes, 3, m.n_agents, 1, 4)),
            pl.normalize(m, futs),
        ],
        3,
    )  # (S, 3, A, 1 + T, 4)
    agent_ok = jnp.concatenate([jnp.ones((n_scenes, 1), bool), scene["neighbour_valid"]], 1)
    x0 = jnp.where(agent_ok[:, None, :, None, None], x0, 0.0)
    mk = x0[:, :, 1, 1:].reshape(n_scenes, 3, -1)  # neighbour 0's three futures (S, 3, D)
    net = pl.make_net(m)
    sched = VPLinear()

    @jax.jit
    def weights(key, t):
        eps = jax.random.normal(key, (draws,) + x0.shape)
        a, sg = sched.alpha(t), sched.sigma(t)
        xt = (
            (a * x0 + sg * eps)
            .at[..., 0, :]
            .set(jnp.broadcast_to(cur_n[None, :, None], (draws, n_scenes, 3, m.n_agents, 4)))
        )  # (draws, S, 3 source routes, A, 1 + T, 4), current state pinned
        d2 = jnp.sum(
            (xt[..., 1, 1:, :].reshape(draws, n_scenes, 3, 1, -1) - a * mk[None, :, None]) ** 2, -1
        )  # fmt: skip  (draws, S, src, k)
        w_opt = jax.nn.softmax(-d2 / (2 * sg**2), -1)
        flat = xt.reshape((-1,) + xt.shape[3:])
        rep = lambda v: jnp.broadcast_to(
            v[None, :, None], (draws, n_scenes, 3) + v.shape[1:]
        ).reshape((-1,) + v.shape[1:])  # noqa: E731
        sc = {k: rep(v) for k, v in scene.items()}
        enc = net.apply(params, sc, method=pl.DiffusionPlannerNet.encode)
        x0_hat = pl.denoise(params, flat, jnp.full(flat.shape[0], t), enc, sc, m, sched)
        y = x0_hat[:, 1, 1:].reshape(draws, n_scenes, 3, -1)
        # the model's error against the optimal estimate along the left->straight and
        # straight->right directions, in units of those distances (+: toward straight / right)
        err = jnp.swapaxes(y - jnp.einsum("xsck,skd->xscd", w_opt, mk), 0, 1)  # (S, draws, src, D)
        ls, sr = mk[:, 1] - mk[:, 0], mk[:, 2] - mk[:, 1]  # (S, D)
        along = lambda u: jnp.einsum("sxcd,sd->sxc", err, u) / jnp.sum(u * u, -1)[:, None, None]  # noqa: E731,E501  # fmt: skip
        return jnp.swapaxes(w_opt, 0, 1), along(ls), along(sr)

    # scenes where neighbour 0's three futures differ (a blocked neighbour's do not)
    sep = jnp.linalg.norm(mk[:, :, None] - mk[:, None], axis=-1) + 1e9 * jnp.eye(3)
    ok = np.asarray(valid & (sep.min((1, 2)) > 0.5))
    emit(what="posterior_run", run_dir=str(run_dir), step=step, scenes=int(ok.sum()), draws=draws,
         route_tokens_identical=same_scene, cross_residual=m.cross_residual,
         train_scenes=cfg.n_scenes, solver_steps=m.steps)  # fmt: skip
    names = ("left", "straight", "right")
    # the sampler on the same scenes (temperature 1): neighbour 0's samples classified by the
    # nearest of its three possible futures and by the heading rule of ``modes``
    mt = dataclasses.replace(m, temperature=1.0)
    reps = 4 * draws
    sc = {k: jnp.repeat(v, reps, 0) for k, v in scene.items()}
    traj = jax.jit(lambda k: pl.sample_trajectories(params, k, sc, mt, guidance=()))(
        jax.random.PRNGKey(3)
    )
    y = pl.normalize(m, traj[:, 1]).reshape(n_scenes, reps, -1)
    nearest = np.asarray(jnp.argmin(jnp.linalg.norm(y[:, :, None] - mk[:, None], axis=-1), -1))
    h0 = np.arctan2(np.asarray(scene["current"])[:, 1, 3], np.asarray(scene["current"])[:, 1, 2])
    heading = _modes_of(_turn(np.asarray(traj[:, 1]), np.repeat(h0, reps)))
    heading = heading.reshape(n_scenes, reps)
    futs_turn = _modes_of(_turn(np.asarray(futs[:, :, 1]), h0[:, None]))  # (S, 3) forced routes
    # the same sampler (DPM-Solver++, pinning, final data prediction) with neighbour 0's row of
    # the x_0 estimate replaced by the optimal one: its shares test the sampler, not the model
    mk_r = jnp.repeat(mk, reps, 0)

    def oracle_sample(key, band):
        def swap(x0_hat, x, t):  # neighbour 0's row -> the optimal estimate for t inside band
            a, sg = sched.alpha(t)[:, None, None], sched.sigma(t)[:, None]
            d2 = jnp.sum((x[:, 1, 1:].reshape(x.shape[0], 1, -1) - a * mk_r) ** 2, -1)
            w = jax.nn.softmax(-d2 / (2 * sg**2), -1)  # (B, 3)
            best = jnp.einsum("bk,bkd->bd", w, mk_r).reshape(x[:, 1, 1:].shape)
            inside = ((t > band[0]) & (t <= band[1]))[:, None, None]
            return x0_hat.at[:, 1, 1:].set(jnp.where(inside, best, x0_hat[:, 1, 1:]))

        traj = pl.sample_trajectories(
            params, key, sc, mt, guidance=(), include_current=True, x0_fn=swap
        )
        return pl.normalize(m, traj)

    oracle_jit = jax.jit(oracle_sample)

    def shares(band):  # neighbour 0's counts by nearest future, the optimal x_0 inside ``band``
        yo = oracle_jit(jax.random.PRNGKey(3), jnp.asarray(band, jnp.float32))
        yo = yo[:, 1, 1:].reshape(n_scenes, reps, -1)
        near = np.asarray(jnp.argmin(jnp.linalg.norm(yo[:, :, None] - mk[:, None], axis=-1), -1))
        return np.bincount(near[ok].ravel(), minlength=3).tolist()

    oracle_counts = shares((-1.0, 2.0))
    emit(what="posterior_samples", samples=int(ok.sum()) * reps,
         nearest_future_counts=np.bincount(nearest[ok].ravel(), minlength=3).tolist(),
         heading_rule_counts=np.bincount(heading[ok].ravel(), minlength=3).tolist(),
         optimal_denoiser_nearest_counts=oracle_counts,
         forced_routes_heading_rule_agrees=float(np.mean(futs_turn[ok] == np.arange(3))))  # fmt: skip
    _floor_test(oracle_jit, heading, h0, drawn, ok, n_scenes, reps, floor_keys, m)
    if not bands:
        return
    # where in t the model's estimate skews the shares: the optimal one above / below a cut
    for cut in (0.1, 0.2, 0.3, 0.5):
        emit(what="posterior_bands", cut=cut, optimal_above_cut=shares((cut, 2.0)),
             optimal_at_or_below_cut=shares((-1.0, cut)))  # fmt: skip
    for i, t in enumerate(t_grid):
        w_opt, ls_err, sr_err = (np.asarray(v)[ok] for v in weights(jax.random.PRNGKey(i), t))
        a, sg = float(sched.alpha(t)), float(sched.sigma(t))
        for src in range(3):
            emit(what="posterior", t=t, sigma_over_alpha=round(sg / a, 3), source=names[src],
                 optimal_weights=w_opt[:, :, src].mean((0, 1)).round(3).tolist(),
                 model_bias_toward_straight=round(float(ls_err[:, :, src].mean()), 4),
                 model_bias_toward_right=round(float(sr_err[:, :, src].mean()), 4))  # fmt: skip


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--only", required=True, help="sections: quality, modes, posterior, ego_posterior"
    )
    ap.add_argument("--run-dir", default=None, help="quality: a planner run, the route visible")
    ap.add_argument("--modes-run-dir", default=None)
    ap.add_argument("--scenes", type=int, default=32)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--samples-per-scene", type=int, default=8)
    ap.add_argument("--temperature", type=float, default=None, help="modes: scale of x_T")
    ap.add_argument("--modes-scenes", type=int, default=128, help="held-out rollouts for modes")
    ap.add_argument("--modes-split", default="valid", help="modes: 'valid' or 'train' rollouts")
    ap.add_argument(
        "--solver-steps", type=int, default=None, help="modes, posterior: DPM-Solver++ steps"
    )
    ap.add_argument(
        "--floor-keys",
        type=int,
        default=0,
        help="posterior: noise keys for the modes test taken by the optimal estimate (the floor)",
    )
    ap.add_argument(
        "--no-posterior-bands",
        action="store_true",
        help="posterior: stop after the samples and the floor test (no bands, no t grid)",
    )
    ap.add_argument(
        "--modes-params",
        default="ema",
        choices=("ema", "raw"),
        help="modes: the run's EMA parameters (default) or the optimiser's raw iterate",
    )
    ap.add_argument(
        "--modes-sampler",
        default="dpm_solver++",
        choices=("dpm_solver++", "ancestral"),
        help="modes: DPM-Solver++ (the planner's) or ancestral SDE steps on the same time steps",
    )
    ap.add_argument(
        "--neighbour-windows", default="", help="modes: neighbour 0 at these samples, e.g. 0,2,4"
    )
    ap.add_argument(
        "--variants",
        default="collision:0.5;drivable:0.5",
        help="guided variants of the closed-loop table, e.g. 'collision:2;collision:2+drivable:1'",
    )
    ap.add_argument("--window", default=None, help="guidance window 'lo,hi' (default the run's)")
    ap.add_argument("--seed", type=int, default=11, help="the closed-loop scenario set")
    ap.add_argument(
        "--step",
        type=int,
        default=None,
        help="checkpoint step of the run (quality, modes, posterior)",
    )
    args = ap.parse_args()
    only = set(args.only.split(","))
    if "quality" in only:
        window = None if args.window is None else tuple(float(v) for v in args.window.split(","))
        quality(
            args.run_dir,
            args.scenes,
            args.steps,
            parse_variants(args.variants),
            window,
            args.seed,
            args.step,
        )
    if "posterior" in only:
        posterior(
            args.modes_run_dir,
            args.modes_scenes,
            args.samples_per_scene,
            args.step,
            solver_steps=args.solver_steps,
            floor_keys=args.floor_keys,
            bands=not args.no_posterior_bands,
        )
    if "ego_posterior" in only:
        ego_posterior(
            args.modes_run_dir,
            args.modes_scenes,
            args.samples_per_scene,
            args.step,
            solver_steps=args.solver_steps,
            floor_keys=args.floor_keys,
        )
    if "modes" in only:
        modes(
            args.modes_run_dir,
            args.samples_per_scene,
            args.modes_scenes,
            args.temperature,
            args.solver_steps,
            args.modes_split,
            args.step,
            tuple(int(v) for v in args.neighbour_windows.split(",") if v),
            args.modes_params,
            args.modes_sampler,
        )


if __name__ == "__main__":
    main()
