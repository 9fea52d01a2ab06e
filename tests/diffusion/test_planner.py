"""Diffusion Planner mechanisms on synthetic scenes with a perturbed (untrained) network: pinned
current state, masked x_0 loss, guidance (weight 0 bit-equal, lowers the energy), bad input.
The learned behaviour (route modes, 10 vs 100 steps, closed-loop scores) is measured on a trained
planner by experiments/planner_modes/planner_study.py (an untrained network is not smooth in t,
so solver convergence is not a property of it)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from jaxlab.core.config import ConfigError
from jaxlab.diffusion import planner as pl
from jaxlab.diffusion.model_wrapper import data_from_noise, expand_to
from jaxlab.diffusion.planner_energies import collision_energy
from jaxlab.diffusion.schedules import VPLinear, get_time_steps

CFG = pl.PlannerConfig(
    n_neighbours=3,
    history=3,
    n_static=1,
    n_lanes=2,
    lane_points=4,
    horizon=6,
    width=16,
    heads=2,
    encoder_depth=1,
    decoder_depth=1,
)
B = 4


def _scene(key):
    k = jax.random.split(key, 6)
    shapes = CFG.input_shapes()
    sc = {
        n: jax.random.normal(kk, (B,) + shapes[n])
        for n, kk in zip(("ego", "neighbours", "static", "lanes", "route"), k, strict=False)
    }
    sc["ego"] = jnp.abs(sc["ego"]) * 5
    cur = jnp.concatenate(
        [
            jnp.broadcast_to(jnp.array([0.0, 0.0, 1.0, 0.0]), (B, 1, 4)),
            jnp.concatenate(
                [
                    6.0 * jax.random.normal(k[5], (B, 3, 2)),
                    jnp.broadcast_to(jnp.array([1.0, 0.0]), (B, 3, 2)),
                ],
                -1,
            ),
        ],
        1,
    )
    sc["current"] = cur
    sc["neighbour_valid"] = jnp.array([[True, True, False]] * B)
    sc["static_valid"] = jnp.ones((B, 1), bool)
    sc["lane_valid"] = jnp.ones((B, 2), bool)
    sc["route_valid"] = jnp.ones((B, 1), bool)
    # neighbour 1 enters the history window at its second step
    sc["neighbour_step_valid"] = jnp.ones((B, 3, 3), bool).at[:, 1, 0].set(False)
    sc["neighbour_step_valid"] &= sc["neighbour_valid"][:, :, None]
    sc["neighbour_types"] = jnp.broadcast_to(jax.nn.one_hot(jnp.array([0, 2, 0]), 3), (B, 3, 3))
    sc["lane_boundaries"] = jax.random.normal(jax.random.fold_in(key, 7), (B, 2, 4, 4))
    sc["lane_traffic_light"] = jnp.broadcast_to(jnp.eye(4)[jnp.array([0, 3])], (B, 2, 4))
    sc["lane_speed_limit"] = jnp.broadcast_to(jnp.array([10.0, 0.0]), (B, 2))
    sc["lane_speed_limit_valid"] = jnp.broadcast_to(jnp.array([True, False]), (B, 2))
    return sc


@pytest.fixture(scope="module")
def setup():
    scene = _scene(jax.random.PRNGKey(0))

    @jax.jit
    def init(key):
        p = pl.init_planner(key, CFG, scene)
        flat, unravel = ravel_pytree(p)
        return unravel(flat + 0.2 * jax.random.normal(jax.random.PRNGKey(9), flat.shape))

    params = init(jax.random.PRNGKey(1))
    sample = jax.jit(
        lambda noise, guidance, steps: pl.sample_trajectories(
            params,
            None,
            scene,
            CFG,
            noise=noise,
            guidance=guidance,
            steps=steps,
            include_current=True,
        ),
        static_argnums=(1, 2),
    )
    noise = jax.random.normal(jax.random.PRNGKey(2), (B, 4, 7, 4))
    return scene, params, sample, noise


def test_current_state_is_pinned_bit_exactly_at_every_step(setup):
    """Every state the sampler hands the denoiser (read through the ``x0_fn`` hook, which sees
    x_t) has the normalised current state at index 0, bit for bit: the solver keeps the pinned
    state, not only calls the correction (the output's index 0 is set again at the end, so
    the output alone would not tell). The ancestral sampler's pinning is checked in
    ``test_samplers.py``, where its program is small."""
    scene, params, _, noise = setup
    cur_n = np.asarray(pl.normalize(CFG, scene["current"]))
    seen = []

    def watch(x0, x_t, t):
        jax.debug.callback(lambda v: seen.append(np.asarray(v)), x_t[:, :, 0])
        return x0

    run = jax.jit(
        lambda z, k: pl.sample_trajectories(
            params, k, scene, CFG, noise=z, guidance=(), include_current=True,
            x0_fn=watch, sampler="dpm_solver++",
        )
    )  # fmt: skip
    out = run(noise, jax.random.PRNGKey(3))
    jax.effects_barrier()
    assert len(seen) >= CFG.steps + 1  # every solver step and the final data prediction
    for v in seen:
        np.testing.assert_array_equal(v, cur_n)
    np.testing.assert_array_equal(np.asarray(out[:, :, 0]), np.asarray(scene["current"]))
    assert out.shape == (B, 4, 7, 4) and bool(jnp.all(jnp.isfinite(out)))


def test_x0_fn_hook_replaces_the_data_prediction(setup):
    """The identity hook is the plain program (bit-equal); a hook that returns a fixed future
    makes DPM-Solver++'s final data prediction that future, the current state still pinned."""
    scene, params, sample, noise = setup
    target = jax.random.normal(jax.random.PRNGKey(6), noise.shape)
    run = jax.jit(
        lambda fn: pl.sample_trajectories(
            params, None, scene, CFG, noise=noise, guidance=(), include_current=True, x0_fn=fn
        ),
        static_argnums=0,
    )
    np.testing.assert_array_equal(run(lambda x0, x, t: x0), sample(noise, (), CFG.steps))
    fixed = run(lambda x0, x, t: jnp.broadcast_to(target, x0.shape))
    want = pl.denormalize(CFG, target).at[:, :, 0].set(scene["current"])
    np.testing.assert_allclose(np.asarray(fixed), np.asarray(want), rtol=1e-5, atol=1e-5)


def test_x0_skip_adds_the_alpha_x_t_path(setup):
    """x0_skip=True: D = alpha_t x_t + sigma_t F with F the plain network's output (same params)."""
    scene, params, _, noise = setup
    sched = VPLinear()
    skip = CFG.__class__(**{**CFG.__dict__, "x0_skip": True})
    enc = pl.make_net(CFG).apply(params, scene, method=pl.DiffusionPlannerNet.encode)
    t = jnp.array([1e-3, 0.05, 0.5, 1.0])
    plain = pl.denoise(params, noise, t, enc, scene, CFG, sched)
    got = pl.denoise(params, noise, t, enc, scene, skip, sched)
    a, s = sched.alpha(t)[:, None, None, None], sched.sigma(t)[:, None, None, None]
    np.testing.assert_allclose(np.asarray(got), np.asarray(a * noise + s * plain), atol=1e-6)
    # at t = 1e-3 the estimate is x_t up to 1 - alpha and sigma * F
    assert float(jnp.max(jnp.abs(got[0] - noise[0]))) < 0.1 * float(jnp.max(jnp.abs(plain[0])))
    # a smaller sigma_data: EDM's c_skip x_t / alpha + c_out F at sigma = sigma_t / alpha_t, which
    # hands x_t over at lower noise (at t = 1, c_skip = 0.25 / (sigma^2 + 0.25) is ~1e-5)
    half = CFG.__class__(**{**skip.__dict__, "skip_sigma_data": 0.5})
    got = np.asarray(pl.denoise(params, noise, t, enc, scene, half, sched), np.float64)
    a, s = np.asarray(a, np.float64), np.asarray(s, np.float64)
    se = s / a
    c_skip, c_out = 0.25 / (se**2 + 0.25), se * 0.5 / np.sqrt(se**2 + 0.25)
    want = c_skip * np.asarray(noise) / a + c_out * np.asarray(plain)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert c_skip[-1].max() < 1e-4 and c_skip[0].min() > 0.99
    with pytest.raises(ConfigError, match="skip_sigma_data"):
        CFG.__class__(**{**CFG.__dict__, "skip_sigma_data": 0.0})


def test_skip_edm_weight_is_one_over_c_out_squared(setup, monkeypatch):
    """skip_edm_weight: the x_0 errors of the skip path weighed by EDM's 1 / c_out^2, so that
    lambda (D - x_0)^2 = (F - F_target)^2 at every noise level (F's error weighed uniformly)."""
    scene, params, _, _ = setup
    sched = VPLinear()
    t = jnp.array([1e-3, 0.05, 0.3, 1.0])
    se = np.asarray(sched.sigma(t), np.float64) / np.asarray(sched.alpha(t), np.float64)
    want = (se**2 + 0.25) / (se * 0.5) ** 2
    np.testing.assert_allclose(pl.skip_loss_weight(sched, 0.5, t), want, rtol=1e-4)
    # sigma_data 1 under a VP schedule: 1 / sigma_t^2 (the eps loss's weight plus one)
    np.testing.assert_allclose(
        pl.skip_loss_weight(sched, 1.0, t), 1.0 / np.asarray(sched.sigma(t)) ** 2, rtol=1e-4
    )
    fut = jax.random.normal(jax.random.PRNGKey(4), (B, 4, CFG.horizon, 4))
    skip = CFG.__class__(**{**CFG.__dict__, "x0_skip": True, "skip_sigma_data": 0.5})
    edm = CFG.__class__(**{**skip.__dict__, "skip_edm_weight": True})

    def loss(c):
        return float(pl.planner_loss(params, jax.random.PRNGKey(5), scene, fut, c)[0])

    weighted = loss(edm)
    assert weighted > 1.5 * loss(skip)  # lambda >= 1 / sigma_data^2 = 4 everywhere
    monkeypatch.setattr(pl, "skip_loss_weight", lambda s, sd, t: jnp.ones_like(t))
    np.testing.assert_allclose(loss(edm), loss(skip), rtol=1e-6)  # the flag goes through it
    with pytest.raises(ConfigError, match="skip_edm_weight"):
        CFG.__class__(**{**CFG.__dict__, "skip_edm_weight": True})
    with pytest.raises(ConfigError, match="snr_weight_cap"):
        CFG.__class__(**{**edm.__dict__, "snr_weight_cap": 5.0})


def test_x0_loss_ignores_invalid_neighbours(setup):
    """Neighbour 3 is invalid: its future gets zero gradient (even when NaN), and replacing its
    history and future leaves the loss unchanged."""
    scene, params, _, _ = setup
    fut = jax.random.normal(jax.random.PRNGKey(4), (B, 4, CFG.horizon, 4))
    loss_grad = jax.jit(
        jax.value_and_grad(
            lambda p, sc, f: pl.planner_loss(p, jax.random.PRNGKey(5), sc, f, CFG)[0], argnums=2
        )
    )
    l0, g = loss_grad(params, scene, fut.at[:, 3].set(jnp.nan))
    assert bool(jnp.all(g[:, 3] == 0)) and bool(jnp.all(jnp.isfinite(g)))
    assert float(jnp.abs(g[:, :3]).sum()) > 0
    garbage = dict(scene, neighbours=scene["neighbours"].at[:, 2].set(50.0))
    l1, _ = loss_grad(params, garbage, fut.at[:, 3].set(7.0))
    np.testing.assert_allclose(l1, l0, rtol=1e-6)


def test_scene_weights_weigh_each_scene_s_errors(setup):
    """With the same key (the same noise per scene), weights all one give the unweighted loss;
    the weighted ego term is the weighted mean of the scenes' ego terms (one-hot weights), the
    neighbours' term weighs each scene by weight x its valid neighbours."""
    scene, params, _, _ = setup
    scene = dict(
        scene, neighbour_valid=jnp.array([[1, 1, 0], [1, 0, 0], [1, 1, 1], [0, 0, 0]], bool)
    )
    fut = jax.random.normal(jax.random.PRNGKey(4), (B, 4, CFG.horizon, 4))
    ws = jnp.concatenate([jnp.eye(B), jnp.array([[3.0, 1.0, 0.5, 2.0], [1.0, 1.0, 1.0, 1.0]])])

    @jax.jit
    def parts(w):
        aux = pl.planner_loss(params, jax.random.PRNGKey(5), scene, fut, CFG, scene_weight=w)[1]
        return jnp.stack([aux["ego_loss"], aux["neighbour_loss"]])

    out = np.asarray(jax.vmap(parts)(ws), np.float64)
    plain = pl.planner_loss(params, jax.random.PRNGKey(5), scene, fut, CFG)[1]
    np.testing.assert_allclose(out[-1], [plain["ego_loss"], plain["neighbour_loss"]], rtol=1e-5)
    one, w = out[:B], np.array([3.0, 1.0, 0.5, 2.0])
    n = np.array([2.0, 1.0, 3.0, 0.0])
    assert len(set(np.round(one[:, 0], 5))) == B  # the scenes' terms differ
    np.testing.assert_allclose(out[B, 0], np.sum(w * one[:, 0]) / np.sum(w), rtol=1e-5)
    np.testing.assert_allclose(out[B, 1], np.sum(w * n * one[:, 1]) / np.sum(w * n), rtol=1e-5)
    assert out[3, 1] == 0.0  # a scene without valid neighbours: no neighbour term, no NaN
    with pytest.raises(ConfigError, match="scene_weight"):
        pl.planner_loss(params, jax.random.PRNGKey(5), scene, fut, CFG, scene_weight=jnp.ones(3))


def test_guidance_weight_zero_bit_equal_and_collision_guidance_lowers_the_energy(setup):
    """Weight 0: the unguided program, bit-equal samples. Inside the window the unbounded
    (``guidance_max_shift`` 0) guided noise prediction moves the x_0-estimate down the collision
    energy: x0_g = x0 - (sigma^2 / alpha) w std grad E (a gradient step), so E(x0_g) < E(x0); outside the window nothing changes. (The
    learned, closed-loop effect is measured in experiments/planner_modes/planner_study.py.)"""
    scene, params, sample, noise = setup
    plain = sample(noise, (), 10)
    np.testing.assert_array_equal(sample(noise, (("collision", 0.0),), 10), plain)
    sch = VPLinear()
    free = dataclasses.replace(CFG, guidance_max_shift=0.0)
    guided_fn, pin = pl.planner_eps_fn(params, scene, free, guidance=(("collision", 0.05),))
    plain_fn, _ = pl.planner_eps_fn(params, scene, CFG, guidance=())
    x = pin(noise, None)

    @jax.jit
    def energies(t):
        tb = jnp.full((B,), t)
        e = []
        for fn in (plain_fn, guided_fn):
            x0 = data_from_noise(fn(x, tb), x, tb, sch)
            e.append(jnp.mean(collision_energy(pl.denormalize(CFG, x0), scene, CFG)))
        return jnp.stack(e)

    e_in = energies(0.05)
    assert float(e_in[0]) > 0 and float(e_in[1]) < 0.9 * float(e_in[0]), e_in
    e_out = energies(0.5)
    np.testing.assert_allclose(e_out[1], e_out[0], rtol=1e-5)


def test_collision_energy_steers_only_the_ego_position(setup):
    """As in the original, the predicted neighbours and the ego's heading are not steered: the
    energy's gradient lives on the ego's (x, y) alone, across its heading (+x here)."""
    scene = setup[0]
    x = jnp.concatenate(
        [jnp.zeros((B, 4, 7, 2)), jnp.ones((B, 4, 7, 1)), jnp.zeros((B, 4, 7, 1))], -1
    )
    x = x.at[:, 1, :, 0].set(2.0).at[:, 1, :, 1].set(0.5)  # overlaps the ego at every step
    nb_only = jnp.array([[True, False, False]] * B)
    scene = dict(scene, neighbour_valid=nb_only, static_valid=jnp.zeros((B, 1), bool))
    g = jax.jit(jax.grad(lambda v: jnp.sum(collision_energy(v, scene, CFG))))(x)
    assert float(jnp.abs(g[:, 0, 1:, 1]).min()) > 0
    np.testing.assert_array_equal(g[:, 0, :, 0], 0.0)
    np.testing.assert_array_equal(g[:, 1:], 0.0)
    np.testing.assert_array_equal(g[:, 0, :, 2:], 0.0)


def test_bad_input_names_the_field(setup):
    scene, params, _, noise = setup
    too_many = dict(scene, neighbours=jnp.zeros((B, 5, 3, 8)))
    with pytest.raises(ConfigError, match="scene.neighbours"):
        pl.sample_trajectories(params, jax.random.PRNGKey(0), too_many, CFG)
    with pytest.raises(ConfigError, match="scene.lanes"):
        pl.check_scene(CFG, dict(scene, lanes=jnp.zeros((B, 9, 4, 4))))
    with pytest.raises(ConfigError, match="future"):
        pl.planner_loss(params, jax.random.PRNGKey(0), scene, jnp.zeros((B, 4, 9, 4)), CFG)
    with pytest.raises(ConfigError, match="guidance"):
        pl.PlannerConfig(guidance=(("no_such_energy", 1.0),))
    with pytest.raises(ConfigError, match="weight"):
        pl.PlannerConfig(guidance=(("collision", -1.0),))
    with pytest.raises(ConfigError, match="snr_weight_cap"):
        pl.PlannerConfig(snr_weight_cap=0.5)
    with pytest.raises(ConfigError, match="sampler"):
        pl.sample_trajectories(params, jax.random.PRNGKey(0), scene, CFG, sampler="sde")
    with pytest.raises(ConfigError, match="key"):
        pl.sample_trajectories(params, None, scene, CFG, noise=noise, sampler="ancestral")
    with pytest.raises(ConfigError, match="future"):
        pl.check_finite("future", np.array([0.0, np.nan]))


def test_observation_normalisation_is_wired_into_the_encoder_and_keeps_padding_zero(setup):
    """``obs_norm``: the net on a raw scene equals the net without it on the scene normalised by
    hand (same parameters), padded entries stay zero, and the identity when off."""
    scene, params, _, noise = setup
    kw = dict(
        ego_obs_mean=(5.0, -0.5, 0.1),
        ego_obs_std=(2.0, 0.5, 0.25),
        agent_obs_mean=tuple(0.1 * i for i in range(8)),
        agent_obs_std=tuple(1.0 + 0.5 * i for i in range(8)),
        static_obs_mean=(1.0,) * 6,
        static_obs_std=(3.0,) * 6,
        lane_obs_mean=(2.0, -1.0, 0.5, 0.0),
        lane_obs_std=(4.0, 2.0, 0.5, 0.5),
    )
    on = dataclasses.replace(CFG, obs_norm=True, **kw)
    assert pl.normalize_scene(CFG, scene)["ego"] is scene["ego"]
    sn = pl.normalize_scene(on, scene)
    np.testing.assert_allclose(
        sn["ego"],
        (np.asarray(scene["ego"]) - np.array(kw["ego_obs_mean"])) / np.array(kw["ego_obs_std"]),
        rtol=1e-6,
    )
    lane = (np.asarray(scene["route"]) - np.array(kw["lane_obs_mean"])) / np.array(
        kw["lane_obs_std"]
    )
    np.testing.assert_allclose(sn["route"], lane, rtol=1e-6)
    assert np.all(np.asarray(sn["neighbours"])[:, 2] == 0.0)  # the invalid neighbour
    v = np.asarray(sn["neighbours"])[:, :2]
    raw = (np.asarray(scene["neighbours"])[:, :2] - np.array(kw["agent_obs_mean"])) / np.array(
        kw["agent_obs_std"]
    )
    np.testing.assert_allclose(v, raw, rtol=1e-5, atol=1e-6)
    x, t = noise, jnp.full((B,), 0.3)
    net_on, net_off = pl.make_net(on), pl.make_net(CFG)
    np.testing.assert_allclose(
        net_on.apply(params, x, t, scene), net_off.apply(params, x, t, sn), rtol=1e-5, atol=1e-6
    )
    assert not np.allclose(net_on.apply(params, x, t, scene), net_off.apply(params, x, t, scene))
    with pytest.raises(ConfigError, match="ego_obs_std"):
        pl.PlannerConfig(ego_obs_std=(1.0, 0.0, 1.0))
    with pytest.raises(ConfigError, match="agent_obs_mean"):
        pl.PlannerConfig(agent_obs_mean=(0.0,) * 4)


def test_observation_normalisation_defaults_are_the_fit_of_expert_logs():
    """The ``*_obs_mean/std`` defaults are ``fit_observation_normalization`` of expert logs of the
    driving world (64 scenes x 30 steps, all scene types), to their stated digits."""
    from jaxlab.envs.driving import evaluation as de
    from jaxlab.envs.driving import make_driving

    env, params = make_driving(auto_reset=False)
    logs = jax.jit(lambda k: de.expert_logs(k, env, params, n_scenes=64, steps=30))(
        jax.random.PRNGKey(0)
    )
    fit = pl.fit_observation_normalization(jax.device_get(logs))
    d = pl.PlannerConfig()
    for kind in pl.OBS_FEATURES:
        mean, std = fit[kind]
        np.testing.assert_allclose(mean, getattr(d, f"{kind}_obs_mean"), rtol=0.01, atol=0.002)
        np.testing.assert_allclose(std, getattr(d, f"{kind}_obs_std"), rtol=0.01, atol=0.002)


def test_solver_converges_on_a_denoiser_that_depends_on_x_t(setup):
    """With the data prediction replaced (``x0_fn``) by the posterior mean of Gaussian data
    N(mu, s^2), D(x_t) = mu + alpha_t s^2 / (alpha_t^2 s^2 + sigma_t^2) (x_t - alpha_t mu), which
    depends on x_t at every t, the planner's DPM-Solver++ (2M, current state pinned) approaches
    the exact flow (x_t - alpha_t mu) / sqrt(alpha_t^2 s^2 + sigma_t^2) conserved, then the final
    data prediction at t_min) as the steps grow, at second order: 5 -> 10 -> 20 steps shrink the
    error in metres at least 2.5-fold each."""
    scene, params, _, noise = setup
    sch, s = VPLinear(), 0.5
    mu = 0.3 * jax.random.normal(jax.random.PRNGKey(7), noise.shape)

    def posterior(x0, x_t, t):
        a = expand_to(sch.alpha(t), x_t)
        sg = expand_to(sch.sigma(t), x_t)
        return mu + a * s**2 / (a**2 * s**2 + sg**2) * (x_t - a * mu)

    run = jax.jit(
        lambda steps: pl.sample_trajectories(
            params, None, scene, CFG, noise=noise, guidance=(), steps=steps, x0_fn=posterior
        ),
        static_argnums=0,
    )
    ts = np.asarray(get_time_steps(sch, 5, "logsnr"), np.float64)
    a1, s1, a0, s0 = (float(f(t)) for t in ts[[0, -1]] for f in (sch.alpha, sch.sigma))
    x_T = np.asarray(CFG.temperature * noise, np.float64)
    m = np.asarray(mu, np.float64)
    x_end = a0 * m + (x_T - a1 * m) * np.sqrt(a0**2 * s**2 + s0**2) / np.sqrt(a1**2 * s**2 + s1**2)
    exact = m + a0 * s**2 / (a0**2 * s**2 + s0**2) * (x_end - a0 * m)
    exact = np.asarray(pl.denormalize(CFG, jnp.asarray(exact, jnp.float32)))[:, :, 1:]
    err = [float(np.abs(np.asarray(run(n)) - exact)[..., :2].max()) for n in (5, 10, 20)]
    assert err[0] > 2.5 * err[1] > 6.25 * err[2], err
    assert err[1] > 1e-3, err  # x_t matters: 10 steps are not exact here


def test_guidance_max_shift_scales_a_push_down_as_a_whole():
    """``cap_ego_shift``: a data-prediction shift whose largest ego point displacement (metres)
    is above ``guidance_max_shift`` is scaled to it, direction and shape along time kept; a
    scene below it is untouched; 0 is no cap; a bad bound is refused naming the key."""
    cfg = dataclasses.replace(CFG, guidance_max_shift=0.5)
    shift = jax.random.normal(jax.random.PRNGKey(8), (B, 4, 7, 4))
    shift = shift * jnp.array([0.002, 0.05, 1.0, 3.0]).reshape(B, 1, 1, 1)  # scenes' sizes
    std = np.asarray(CFG.norm_std, np.float64)
    size = np.linalg.norm(np.asarray(shift, np.float64)[:, 0, :, :2] * std[:2], axis=-1).max(-1)
    assert size[0] < 0.5 < size[1], size
    got = np.asarray(jax.jit(pl.cap_ego_shift(cfg))(shift), np.float64)
    scale = np.minimum(1.0, 0.5 / size)[:, None, None, None]
    np.testing.assert_allclose(got, np.asarray(shift, np.float64) * scale, rtol=1e-5, atol=1e-8)
    assert pl.cap_ego_shift(dataclasses.replace(CFG, guidance_max_shift=0.0)) is None
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ConfigError, match="guidance_max_shift"):
            dataclasses.replace(CFG, guidance_max_shift=bad)
