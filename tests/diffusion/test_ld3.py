"""LD3 on the Gaussian-mixture oracle: parametrisation, soft <= hard, learned steps beat baselines."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.diffusion import ld3
from jaxlab.diffusion import samplers as sm
from jaxlab.diffusion import schedules as sc
from jaxlab.diffusion.gmm import gmm_eps_fn, ring_mixture
from jaxlab.diffusion.sliced_wasserstein import sliced_wasserstein

SCH = sc.EDM()
EPS_FN = gmm_eps_fn(ring_mixture(8, 1.0, 0.1), SCH)
N_TRAIN = N_VALID = 50
N_TEST = 1000
BASELINES = ("time_uniform", "logsnr", "edm")


@pytest.fixture(scope="module")
def teacher_data():
    """One teacher run (UniPC-3, 64 NFE, logSNR steps) for train, validation and held-out noise."""
    n = N_TRAIN + N_VALID + N_TEST
    z, y = jax.jit(
        lambda k: ld3.make_teacher_data(
            k, EPS_FN, SCH, n=n, data_shape=(2,), teacher=ld3.DEFAULT_TEACHER, teacher_nfe=64
        )
    )(jax.random.PRNGKey(0))
    split = lambda a, b: (z[a:b], y[a:b])  # noqa: E731
    return split(0, N_TRAIN), split(N_TRAIN, N_TRAIN + N_VALID), split(N_TRAIN + N_VALID, n)


def _train(teacher_data, nfe, record=False):
    train, valid, _ = teacher_data
    static = ld3.LD3Static(
        sampler=sm.SamplerSpec("dpm_solver++", 2), nfe=nfe, n_train=N_TRAIN, n_valid=N_VALID
    )
    hyper = ld3.LD3Hyper(prior_bound_scale=0.05)
    kw = dict(eps_fn=EPS_FN, schedule=SCH, static=static, hyper=hyper)
    init = jax.jit(lambda k: ld3.ld3_init(k, train, valid, **kw))(jax.random.PRNGKey(1))
    if not record:
        return jax.jit(lambda s: ld3.ld3_fit(s, **kw))(init), static, hyper, None

    def body(s, _):
        return ld3.ld3_step(s, **kw)

    state, metrics = jax.jit(
        lambda s: jax.lax.scan(body, s, None, length=ld3.max_iterations(static))
    )(init)
    return state, static, hyper, metrics


@pytest.fixture(scope="module")
def trained(teacher_data):
    return {4: _train(teacher_data, 4, record=True), 6: _train(teacher_data, 6)}


def _evaluate(teacher_data, static, t1, t2):
    """Held-out mean squared L2 to the teacher outputs and SW to the teacher samples, for the
    learned steps and the baselines, in one jit."""
    _, _, (z, y) = teacher_data
    spec, n = static.sampler, static.steps

    @jax.jit
    def run(z, y, t1, t2):
        def score(ts, ts2):
            out = sm.sample(spec, EPS_FN, SCH.prior_std * z, ts, schedule=SCH, eval_timesteps=ts2)
            l2 = jnp.mean(jnp.sum((out - y) ** 2, -1))
            return l2, sliced_wasserstein(jax.random.PRNGKey(7), out, y, num_projections=256)

        res = {
            k: score(sc.get_time_steps(SCH, n, k), sc.get_time_steps(SCH, n, k)) for k in BASELINES
        }
        res["ld3"] = score(t1, t2)
        return res

    return {k: (float(a), float(b)) for k, (a, b) in run(z, y, t1, t2).items()}


def test_time_parametrisation():
    """Ones give logSNR-uniform steps; any p gives monotone steps with fixed endpoints; p' moves
    the evaluation times by at most win_rate times the smallest lambda gap, endpoints never."""
    p1 = jnp.ones(6)
    t1, t2 = ld3.time_steps_from_params(p1, jnp.zeros(6), SCH)
    np.testing.assert_allclose(t1, sc.logsnr_uniform_steps(SCH, 5), rtol=1e-5)
    np.testing.assert_allclose(t2, t1)
    t1, _ = ld3.time_steps_from_params(p1, jnp.zeros(6), SCH, time_mode="time")
    np.testing.assert_allclose(t1, sc.time_uniform_steps(SCH, 5), rtol=1e-5)
    p1 = jax.random.normal(jax.random.PRNGKey(2), (6,)) * 2
    p2 = jnp.array([5.0, 5.0, -5.0, 0.01, 5.0, 5.0])
    t1, t2 = ld3.time_steps_from_params(p1, p2, SCH)
    assert bool(jnp.all(jnp.diff(t1) < 0))
    np.testing.assert_allclose(
        [t1[0], t1[-1], t2[0], t2[-1]], [80.0, 0.002, 80.0, 0.002], rtol=1e-6
    )
    lam1, lam2 = SCH.lambda_t(t1), SCH.lambda_t(t2)
    gap = float(jnp.min(jnp.diff(lam1)))
    np.testing.assert_allclose(
        lam2[1:-1] - lam1[1:-1], [0.5 * gap, -0.5 * gap, 0.01, 0.5 * gap], rtol=1e-3
    )


def test_learned_steps_beat_baselines(teacher_data, trained):
    """Held-out L2 to the teacher and SW to the teacher's samples: LD3 < every baseline, 4 and 6 NFE."""
    for nfe in (4, 6):
        state, static, hyper, _ = trained[nfe]
        t1, t2 = ld3.learned_time_steps(state, SCH, static, hyper)
        res = _evaluate(teacher_data, static, t1, t2)
        print(
            f"NFE {nfe}: " + ", ".join(f"{k}: L2 {a:.4g} SW {b:.4g}" for k, (a, b) in res.items())
        )
        for k in BASELINES:
            assert res["ld3"][0] < res[k][0], (nfe, k, res)
            assert res["ld3"][1] < res[k][1], (nfe, k, res)
        # a large gain over the best baseline, not a tie
        assert res["ld3"][0] < 0.5 * min(res[k][0] for k in BASELINES)
        assert bool(state.done)


def test_soft_loss_never_above_hard_loss(trained):
    """Every training iteration: soft loss <= hard loss (same steps, same batch), and the shifted
    latents do lower it sometimes; the validation loss that picks the best steps falls."""
    _, _, _, m = trained[4]
    active = np.asarray(m["active"]) > 0
    soft, hard = np.asarray(m["loss"])[active], np.asarray(m["hard_loss"])[active]
    assert active.sum() > 100
    assert np.all(soft <= hard + 1e-12)
    assert np.mean(soft < hard) > 0.2
    best = np.asarray(m["best_loss"])
    assert np.all(np.diff(best) <= 1e-12) and best[-1] < 0.2 * best[0]


def test_latents_stay_in_the_ball(trained):
    state, static, hyper, _ = trained[4]
    r = hyper.prior_bound_scale * static.dim / static.steps**2
    for lat, ori in ((state.train_latent, state.ori_train), (state.valid_latent, state.ori_valid)):
        dist = jnp.linalg.norm(lat - ori, axis=-1)
        assert float(jnp.max(dist)) <= r * (1 + 1e-4)
    assert float(jnp.max(jnp.linalg.norm(state.train_latent - state.ori_train, axis=-1))) > 0


def test_every_sampler_is_trainable():
    """For each solver, the LD3 loss has finite, nonzero gradients in p and p' and one small
    gradient step on p lowers it (one jit for all)."""
    specs = [  # DPM-Solver++ is trained in the tests above; DDIM is iPNDM of order 1
        sm.SamplerSpec("euler"),
        sm.SamplerSpec("heun"),
        sm.SamplerSpec("uni_pc", 3, "bh1"),
        sm.SamplerSpec("uni_pc", 2, "bh2"),
        sm.SamplerSpec("ipndm", 4),
    ]
    z = jax.random.normal(jax.random.PRNGKey(3), (8, 2))
    target = ring_mixture(8, 1.0, 0.1).sample(jax.random.PRNGKey(4), 8)

    @jax.jit
    def check(z, target):
        out = []
        for spec in specs:
            static = ld3.LD3Static(sampler=spec, nfe=4, n_train=2, n_valid=2)
            hyper = ld3.LD3Hyper()

            def loss(p1, p2, static=static, hyper=hyper):
                o = ld3.student_solve(EPS_FN, z, p1, p2, schedule=SCH, static=static)
                return jnp.mean(ld3.per_sample_loss(o, target))

            n1 = static.steps + 1
            p1, p2 = jnp.ones(n1) + 0.1 * jnp.arange(n1), jnp.zeros(n1)
            l0, (g1, g2) = jax.value_and_grad(loss, argnums=(0, 1))(p1, p2)
            l1 = loss(p1 - 1e-3 * g1 / jnp.linalg.norm(g1), p2)
            out.append((l0, l1, g1, g2))
        return out

    for spec, (l0, l1, g1, g2) in zip(specs, check(z, target), strict=True):
        assert bool(jnp.all(jnp.isfinite(g1))) and float(jnp.linalg.norm(g1)) > 0, spec
        assert bool(jnp.all(jnp.isfinite(g2))), spec
        assert float(l1) < float(l0), spec


def test_steps_file_round_trip_and_samplers_accept_it(tmp_path, trained):
    state, static, hyper, _ = trained[4]
    t1, t2 = ld3.learned_time_steps(state, SCH, static, hyper)
    path = tmp_path / "steps.json"
    ld3.save_time_steps(path, t1, t2, sampler=static.sampler, nfe=4, schedule_name="edm")
    r1, r2, meta = ld3.load_time_steps(path)
    np.testing.assert_allclose(r1, t1, rtol=1e-6)
    np.testing.assert_allclose(r2, t2, rtol=1e-6)
    assert meta["nfe"] == 4 and meta["sampler"]["name"] == "dpm_solver++"
    out = sm.dpm_solver_pp(EPS_FN, 80.0 * jnp.ones((2, 2)), r1, schedule=SCH, eval_timesteps=r2)
    assert out.shape == (2, 2) and bool(jnp.all(jnp.isfinite(out)))
    path.write_text('{"timesteps": [1.0, 2.0], "eval_timesteps": [1.0, 2.0]}')
    with pytest.raises(ValueError, match="decreasing"):
        ld3.load_time_steps(path)
    with pytest.raises(ValueError, match="path"):
        ld3.load_time_steps(tmp_path / "missing.json")


def test_bad_config_raises():
    with pytest.raises(ValueError, match="n_train"):
        ld3.LD3Static(n_train=5, batch_size=2)
    with pytest.raises(ValueError, match="time_mode"):
        ld3.LD3Static(time_mode="sigma")
    with pytest.raises(ValueError, match="nfe"):
        ld3.LD3Static(sampler=sm.SamplerSpec("heun"), nfe=3)
