"""Samplers: convergence order on the Gaussian-mixture oracle, NumPy parity, jit/vmap/grad, wrappers."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.diffusion import samplers as sm
from jaxlab.diffusion import schedules as sc
from jaxlab.diffusion.gmm import GaussianMixture, gmm_eps_fn
from tests.diffusion import diffusion_numpy_reference as ref
from tests.typecheck import unchecked

MEANS = np.array([[1.0, 0.0], [-0.5, 0.8], [-0.3, -1.0]])
STDS = np.array([0.3, 0.5, 0.4])
WEIGHTS = np.array([0.5, 0.3, 0.2])


def _gmm(scale: float = 1.0) -> GaussianMixture:
    return GaussianMixture.create(scale * MEANS, scale * STDS, WEIGHTS)


def _fit_slope(ns, errs) -> float:
    return float(-np.polyfit(np.log(ns), np.log(errs), 1)[0])


# (id, spec kwargs, extra sampler kwargs, expected slope window). Windows: the nominal order of
# the update formula, except DPM-Solver++(3M) with the reference coefficient (second order, see
# samplers.dpm_solver_pp_coefficients) and UniPC-3, whose order-2 UniPC-1 warm-up step caps the
# asymptotic order at 3 (we measure about 3.4 here).
VP_CASES = [
    ("euler", dict(name="euler"), {}, (0.85, 1.3)),
    ("ddim", dict(name="ddim"), {}, (0.85, 1.3)),
    ("heun", dict(name="heun"), {}, (1.8, 2.5)),
    ("dpm++2m", dict(name="dpm_solver++", order=2), {}, (1.8, 2.4)),
    ("dpm++3m", dict(name="dpm_solver++", order=3), {}, (1.8, 2.4)),
    ("dpm++3m-taylor", dict(name="dpm_solver++", order=3), dict(third_order="taylor"), (2.55, 3.5)),
    ("unipc2-bh1", dict(name="uni_pc", order=2, variant="bh1"), {}, (2.7, 3.5)),
    ("unipc3-bh2", dict(name="uni_pc", order=3, variant="bh2"), {}, (3.0, 4.4)),
]
NS = (20, 80)


def _run(spec, eps_fn, sch, x, ts, **kw):
    if kw:
        fn = lambda x, ts: sm.dpm_solver_pp(  # noqa: E731
            eps_fn, x, ts, schedule=sch, order=spec.order, lower_order_final=False, **kw
        )
    else:
        fn = lambda x, ts: sm.sample(spec, eps_fn, x, ts, schedule=sch)  # noqa: E731
    return jax.jit(fn)(x, ts)


@pytest.fixture(scope="module")
def vp_problem():
    with jax.enable_x64(True):
        sch = sc.VPLinear()
        eps_fn = gmm_eps_fn(_gmm(), sch)
        x = jax.random.normal(jax.random.PRNGKey(0), (32, 2), jnp.float64)
        spec = sm.SamplerSpec("uni_pc", 3, "bh2", lower_order_final=False)
        reference = _run(spec, eps_fn, sch, x, sc.logsnr_uniform_steps(sch, 1000))
    return sch, eps_fn, x, reference


@pytest.mark.parametrize("case", VP_CASES, ids=[c[0] for c in VP_CASES])
def test_convergence_order_vp_logsnr(vp_problem, case):
    """Error vs a 1000-step UniPC-3 reference falls as N^-p on logSNR-uniform steps (float64)."""
    _, spec_kw, extra, (lo, hi) = case
    sch, eps_fn, x, reference = vp_problem
    spec = sm.SamplerSpec(lower_order_final=False, **spec_kw)
    with jax.enable_x64(True):
        errs = []
        for n in NS:
            out = _run(spec, eps_fn, sch, x, sc.logsnr_uniform_steps(sch, n), **extra)
            errs.append(float(jnp.sqrt(jnp.mean((out - reference) ** 2))))
    slope = _fit_slope(NS, errs)
    print(f"{case[0]}: errors {errs}, slope {slope:.2f}")
    assert lo <= slope <= hi, (case[0], errs, slope)


@pytest.mark.parametrize(
    "order,window", [(4, (3.0, 4.6)), (2, (1.7, 2.4))], ids=["ipndm4", "ipndm2"]
)
def test_convergence_order_ipndm_uniform_sigma(order, window):
    """iPNDM's constant Adams-Bashforth weights assume steps uniform in sigma/alpha: EDM schedule,
    time-uniform steps, a mixture on the scale of sigma_max (so the asymptotic range is reached)."""
    with jax.enable_x64(True):
        sch = sc.EDM()
        eps_fn = gmm_eps_fn(_gmm(20.0), sch)
        x = 80.0 * jax.random.normal(jax.random.PRNGKey(1), (32, 2), jnp.float64)
        ref_spec = sm.SamplerSpec("uni_pc", 3, "bh2", lower_order_final=False)
        reference = _run(ref_spec, eps_fn, sch, x, sc.logsnr_uniform_steps(sch, 1000))
        ns = (32, 128)
        errs = []
        for n in ns:
            out = _run(
                sm.SamplerSpec("ipndm", order), eps_fn, sch, x, sc.time_uniform_steps(sch, n)
            )
            errs.append(float(jnp.sqrt(jnp.mean((out - reference) ** 2))))
    slope = _fit_slope(ns, errs)
    print(f"ipndm{order}: errors {errs}, slope {slope:.2f}")
    assert window[0] <= slope <= window[1], (errs, slope)


# ---------------------------------------------------------------- NumPy parity


@pytest.mark.parametrize(
    "schedule_name,order,n", [("vp_linear", 2, 5), ("vp_linear", 3, 6), ("edm", 3, 12)]
)
def test_dpm_solver_pp_matches_numpy_reference(schedule_name, order, n):
    """float32 JAX DPM-Solver++ (coefficient form, lax.scan) == float64 NumPy loop to 1e-5."""
    if schedule_name == "vp_linear":
        sch, sch_np, scale = sc.VPLinear(), ref.VPLinearNP(), 1.0
    else:
        sch, sch_np, scale = sc.EDM(), ref.EDMNP(), 80.0
    x = np.random.default_rng(0).normal(size=(16, 2)) * scale
    ts = np.asarray(sc.logsnr_uniform_steps(sch, n), np.float64)
    data_np, _ = ref.make_models(sch_np, MEANS, STDS, WEIGHTS)
    expected = ref.dpm_solver_pp(data_np, sch_np, x, ts, order, lower_order_final=True)
    eps_fn = gmm_eps_fn(_gmm(), sch)
    got = jax.jit(lambda x, ts: sm.dpm_solver_pp(eps_fn, x, ts, schedule=sch, order=order))(
        jnp.asarray(x, jnp.float32), jnp.asarray(ts, jnp.float32)
    )
    np.testing.assert_allclose(np.asarray(got), expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("order,variant,n", [(2, "bh1", 6), (3, "bh2", 12)])
def test_unipc_matches_numpy_reference(order, variant, n):
    sch, sch_np = sc.VPLinear(), ref.VPLinearNP()
    x = np.random.default_rng(1).normal(size=(16, 2))
    ts = np.asarray(sc.logsnr_uniform_steps(sch, n), np.float64)
    data_np, _ = ref.make_models(sch_np, MEANS, STDS, WEIGHTS)
    expected = ref.uni_pc(data_np, sch_np, x, ts, order, variant)
    eps_fn = gmm_eps_fn(_gmm(), sch)
    got = jax.jit(
        lambda x, ts: sm.uni_pc(eps_fn, x, ts, schedule=sch, order=order, variant=variant)
    )(jnp.asarray(x, jnp.float32), jnp.asarray(ts, jnp.float32))
    np.testing.assert_allclose(np.asarray(got), expected, atol=2e-5, rtol=0)


@pytest.mark.parametrize("order", [4])
def test_ipndm_matches_numpy_reference(order):
    sch, sch_np = sc.EDM(), ref.EDMNP()
    x = np.random.default_rng(2).normal(size=(16, 2)) * 80.0
    ts = np.asarray(sc.edm_steps(sch, 8), np.float64)
    _, noise_np = ref.make_models(sch_np, MEANS, STDS, WEIGHTS)
    expected = ref.ipndm(noise_np, sch_np, x, ts, order)
    eps_fn = gmm_eps_fn(_gmm(), sch)
    got = jax.jit(lambda x, ts: sm.ipndm(eps_fn, x, ts, schedule=sch, order=order))(
        jnp.asarray(x, jnp.float32), jnp.asarray(ts, jnp.float32)
    )
    np.testing.assert_allclose(np.asarray(got), expected, atol=2e-4, rtol=1e-5)


def test_ddim_equals_dpm_solver_pp_order1_and_ipndm_order1():
    """DDIM = DPM-Solver-1 = DPM-Solver++(1) = iPNDM(1) in exact arithmetic."""
    sch = sc.VPLinear()
    eps_fn = gmm_eps_fn(_gmm(), sch)
    x = jax.random.normal(jax.random.PRNGKey(3), (16, 2))
    ts = sc.time_quadratic_steps(sch, 7)
    a, b, c = jax.jit(
        lambda x, ts: (
            sm.ddim(eps_fn, x, ts, schedule=sch),
            sm.dpm_solver_pp(eps_fn, x, ts, schedule=sch, order=1),
            sm.ipndm(eps_fn, x, ts, schedule=sch, order=1),
        )
    )(x, ts)
    np.testing.assert_allclose(a, b, atol=1e-5)
    np.testing.assert_allclose(a, c, atol=1e-6)


# ---------------------------------------------------------------- jit, vmap, grad, decoupled times

ALL_SPECS = [
    sm.SamplerSpec("heun"),
    sm.SamplerSpec("dpm_solver++", 3),
    sm.SamplerSpec("uni_pc", 3, "bh2"),
    sm.SamplerSpec("ipndm", 4),
]
SPEC_IDS = [f"{s.name}-{s.order}-{s.variant}" for s in ALL_SPECS]


@pytest.mark.parametrize("spec", ALL_SPECS, ids=SPEC_IDS)
def test_vmap_and_gradients(spec):
    """Batch rows are independent (vmap over single rows == the batch); gradients with respect to
    the time steps, the evaluation times and the initial noise are finite and nonzero. One jit."""
    sch = sc.EDM()
    eps_fn = gmm_eps_fn(_gmm(), sch)
    x = 80.0 * jax.random.normal(jax.random.PRNGKey(4), (8, 2))
    ts = sc.logsnr_uniform_steps(sch, 6)

    def run(x, ts, ts2):
        return sm.sample(spec, eps_fn, x, ts, schedule=sch, eval_timesteps=ts2)

    @jax.jit
    def everything(x, ts):
        out = run(x, ts, ts)
        rows = jax.vmap(lambda r: run(r[None], ts, ts)[0])(x)
        grads = jax.grad(lambda x, a, b: jnp.sum(run(x, a, b) ** 2), argnums=(0, 1, 2))(x, ts, ts)
        return out, rows, grads

    out, rows, (gx, gt, gt2) = everything(x, ts)
    np.testing.assert_allclose(rows, out, rtol=1e-4, atol=1e-4)
    for g in (gx, gt[1:-1], gt2[1:-1]):
        assert bool(jnp.all(jnp.isfinite(g))) and float(jnp.max(jnp.abs(g))) > 0


def test_jit_equals_eager():
    sch = sc.VPLinear()
    eps_fn = gmm_eps_fn(_gmm(), sch)
    x = jax.random.normal(jax.random.PRNGKey(9), (4, 2))
    ts = sc.logsnr_uniform_steps(sch, 3)
    run = lambda x, ts: sm.dpm_solver_pp(eps_fn, x, ts, schedule=sch, order=2)  # noqa: E731
    np.testing.assert_allclose(jax.jit(run)(x, ts), run(x, ts), rtol=1e-5, atol=1e-5)


def test_time_step_gradient_matches_finite_differences():
    """d(output)/d(t_i) of DPM-Solver++(2M) agrees with central differences (float64)."""
    with jax.enable_x64(True):
        sch = sc.VPLinear()
        eps_fn = gmm_eps_fn(_gmm(), sch)
        x = jax.random.normal(jax.random.PRNGKey(5), (4, 2), jnp.float64)
        ts = sc.logsnr_uniform_steps(sch, 5)
        f = jax.jit(lambda ts: jnp.sum(jnp.sin(sm.dpm_solver_pp(eps_fn, x, ts, schedule=sch))))
        g = jax.jit(jax.grad(f))(ts)
        for i in (1, 2, 4):
            e = jnp.zeros_like(ts).at[i].set(1e-6)
            fd = (f(ts + e) - f(ts - e)) / 2e-6
            np.testing.assert_allclose(g[i], fd, rtol=1e-5, atol=1e-8)


def test_eval_timesteps_move_the_model_call():
    """Equal eval times reproduce the plain sampler; moved eval times change the output."""
    sch = sc.EDM()
    eps_fn = gmm_eps_fn(_gmm(), sch)
    x = 80.0 * jax.random.normal(jax.random.PRNGKey(6), (8, 2))
    ts = sc.edm_steps(sch, 5)

    @jax.jit
    def three(x, ts):
        base = sm.uni_pc(eps_fn, x, ts, schedule=sch, order=2)
        same = sm.uni_pc(eps_fn, x, ts, schedule=sch, order=2, eval_timesteps=ts)
        moved = sm.uni_pc(eps_fn, x, ts, schedule=sch, order=2, eval_timesteps=ts.at[2].mul(1.1))
        return base, same, moved

    base, same, moved = three(x, ts)
    np.testing.assert_allclose(base, same)
    assert float(jnp.max(jnp.abs(moved - base))) > 1e-4


# ---------------------------------------------------------------- model wrappers and guidance


@pytest.mark.parametrize("model_type", ["noise", "data", "v", "score"])
def test_model_wrapper_parametrisations_agree(model_type):
    """The oracle written as a noise, data, v or score network gives the same eps_fn."""
    sch = sc.VPCosine()
    g = _gmm()
    x = jax.random.normal(jax.random.PRNGKey(7), (16, 2))
    t = jnp.linspace(0.05, 0.9, 16)
    eps = g.eps(x, sch.alpha(t), sch.sigma(t))
    a, s = sch.alpha(t)[:, None], sch.sigma(t)[:, None]
    x0 = (x - s * eps) / a
    outputs = {"noise": eps, "data": x0, "v": a * eps - s * x0, "score": -eps / s}

    def net(xx, mt):
        del xx
        np.testing.assert_allclose(mt, t)
        return outputs[model_type]

    got = sm.model_wrapper(net, sch, model_type=model_type)(x, t)
    np.testing.assert_allclose(got, eps, rtol=1e-4, atol=1e-4)


def test_classifier_free_guidance_and_classifier_guidance():
    """CFG with scale 1 is the conditional model, scale 0 the unconditional one. Classifier
    guidance with log p(c | x_t) = log p_t^c(x) - log p_t(x) at scale 1 gives the conditional
    model's eps exactly (Bayes' rule on the mixture oracle)."""
    sch = sc.VPLinear()
    g = _gmm()
    g_c = GaussianMixture(means=g.means[:1], stds=g.stds[:1], logits=g.logits[:1])  # class 0
    x = jax.random.normal(jax.random.PRNGKey(8), (16, 2))
    t = jnp.full((16,), 0.4)

    def net(xx, mt, cond):
        gm = g_c if cond == 0 else g
        return gm.eps(xx, sch.alpha(mt), sch.sigma(mt))

    kw = dict(guidance="classifier_free", condition=0, unconditional_condition=1)
    e_c = g_c.eps(x, sch.alpha(t), sch.sigma(t))
    e_u = g.eps(x, sch.alpha(t), sch.sigma(t))
    cfg = jax.jit(lambda x, t, s: sm.model_wrapper(net, sch, guidance_scale=s, **kw)(x, t))
    np.testing.assert_allclose(cfg(x, t, 1.0), e_c, atol=1e-5)
    np.testing.assert_allclose(cfg(x, t, 0.0), e_u, atol=1e-5)

    def log_classifier(xx, mt, cond):
        del cond
        a, s = sch.alpha(mt), sch.sigma(mt)
        return g_c.marginal_log_prob(xx, a, s) - g.marginal_log_prob(xx, a, s)

    guided = jax.jit(
        sm.model_wrapper(
            lambda xx, mt: g.eps(xx, sch.alpha(mt), sch.sigma(mt)),
            sch,
            guidance="classifier",
            classifier_fn=log_classifier,
            guidance_scale=1.0,
        )
    )(x, t)
    np.testing.assert_allclose(guided, e_c, rtol=1e-3, atol=1e-4)


def test_bad_inputs_raise_value_errors():
    sch = sc.EDM()
    eps_fn = gmm_eps_fn(_gmm(), sch)
    x = jnp.zeros((2, 2))
    euler = unchecked(sm.euler)  # the sampler's own validation (shapes that disagree)
    with pytest.raises(ValueError, match="timesteps"):
        euler(eps_fn, x, jnp.ones((1,)), schedule=sch)
    with pytest.raises(ValueError, match="eval_timesteps"):
        euler(eps_fn, x, jnp.ones((4,)), schedule=sch, eval_timesteps=jnp.ones((3,)))
    with pytest.raises(ValueError, match="order"):
        sm.SamplerSpec("dpm_solver++", 4)
    with pytest.raises(ValueError, match="name"):
        sm.SamplerSpec("plms")
    with pytest.raises(ValueError, match="nfe"):
        sm.SamplerSpec("heun").steps_for_nfe(5)
    with pytest.raises(ValueError, match="model_type"):
        sm.model_wrapper(lambda x, t: x, sch, model_type="flow")
    with pytest.raises(ValueError, match="classifier_fn"):
        sm.model_wrapper(lambda x, t: x, sch, guidance="classifier")


def test_ancestral_samples_the_mixture():
    """Ancestral sampling with the exact eps of the Gaussian mixture draws the mixture: the
    nearest-mean counts of 4000 samples against 4000 exact draws (chi-square on the 2 x 3 table),
    and the mean and covariance, within sampling error. Pinning one coordinate with ``correct_fn``
    holds it exactly; the key changes the draw."""
    from scipy.stats import chi2_contingency

    sch = sc.VPLinear()
    gmm = _gmm()
    eps_fn = gmm_eps_fn(gmm, sch)
    ts = sc.logsnr_uniform_steps(sch, 200)
    x_t = jax.random.normal(jax.random.PRNGKey(1), (4000, 2))
    run = jax.jit(lambda x, k: sm.ancestral(eps_fn, x, ts, k, schedule=sch))
    got = np.asarray(run(x_t, jax.random.PRNGKey(2)))
    exact = np.asarray(gmm.sample(jax.random.PRNGKey(3), 4000))

    def nearest(y):
        return np.argmin(np.linalg.norm(y[:, None] - MEANS[None], axis=-1), 1)

    table = np.stack([np.bincount(nearest(y), minlength=3) for y in (got, exact)])
    assert chi2_contingency(table)[1] > 1e-3, table
    np.testing.assert_allclose(got.mean(0), exact.mean(0), atol=0.05)
    np.testing.assert_allclose(np.cov(got.T), np.cov(exact.T), atol=0.06)
    other = np.asarray(run(x_t, jax.random.PRNGKey(4)))
    assert np.abs(other - got).mean() > 0.1
    pin = lambda x, t: x.at[:, 0].set(0.25)  # noqa: E731
    pinned = sm.ancestral(eps_fn, x_t[:64], ts[:20], jax.random.PRNGKey(2), schedule=sch,
                          correct_fn=pin)  # fmt: skip
    np.testing.assert_array_equal(np.asarray(pinned[:, 0]), 0.25)
