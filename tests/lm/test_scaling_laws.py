"""Precision-aware scaling law: Table 2 checks, derived quantities, fitter recovery, errors."""

import dataclasses
import math

import jax
import numpy as np
import pytest

from jaxlab.core.config import ConfigError
from jaxlab.lm import scaling_laws as sl

T2 = sl.TABLE2


def test_effective_parameter_fractions_with_offsets():
    """N_eff/N with P_w = P_a = P_kv = P and the App. K offsets of the paper."""
    assert float(sl.effective_params(T2, 1.0, 8, 8, 8)) == pytest.approx(0.828, abs=1e-3)
    assert float(sl.effective_params(T2, 1.0, 4, 4, 4)) == pytest.approx(0.191, abs=1e-3)
    # without offsets the law is more forgiving
    free = T2.without_offsets()
    assert float(sl.effective_params(free, 1.0, 8, 8, 8)) == pytest.approx(0.924, abs=1e-3)
    assert float(sl.effective_params(T2, 1e8)) == pytest.approx(1e8)  # full precision


def test_compute_optimal_precision_near_7_bits():
    p_star = sl.compute_optimal_precision(T2)
    assert 6.8 < p_star < 7.2, p_star
    assert sl.compute_optimal_precision(T2.without_offsets()) == pytest.approx(3.47, abs=0.05)
    # first-order condition d ln u / dP = 1/P at the optimum
    dlnu = jax.grad(lambda p: jax.numpy.log(sl.effective_params(T2, 1.0, p, p, p)))(p_star)
    assert float(dlnu) * p_star == pytest.approx(1.0, abs=1e-2)


def test_joint_allocation_precision_is_independent_of_compute():
    ps = [sl.compute_optimal_allocation(T2, c)["P"] for c in (1e19, 1e23)]
    assert ps[0] == pytest.approx(ps[1], abs=0.05)
    assert ps[0] == pytest.approx(sl.compute_optimal_precision(T2), abs=0.05)


def test_critical_data_size_is_the_minimum_of_post_quantisation_loss():
    n, p_post = 1e8, 4
    d_crit = float(sl.critical_data_size(T2, n, p_post))

    def post(log_d):
        d = jax.numpy.exp(log_d)
        return sl.training_loss(T2, n, d) + sl.ptq_degradation(T2, n, d, p_post)

    with jax.enable_x64(True):
        assert float(jax.grad(post)(math.log(d_crit))) == pytest.approx(0.0, abs=1e-9)
        assert float(post(math.log(d_crit) + 1)) > float(post(math.log(d_crit)))
    # PTQ degradation grows with data, shrinks with size and bits
    d = np.array([1e9, 1e10, 1e11])
    assert np.all(np.diff(np.asarray(sl.ptq_degradation(T2, n, d, 4))) > 0)
    assert float(sl.ptq_degradation(T2, 2 * n, 1e10, 4)) < float(sl.ptq_degradation(T2, n, 1e10, 4))
    assert float(sl.ptq_degradation(T2, n, 1e10, 6)) < float(sl.ptq_degradation(T2, n, 1e10, 4))


def _synthetic(law, rng, n_points):
    data = {
        "N": rng.choice([3e7, 6e7, 1.1e8, 2.2e8], n_points),
        "D": rng.choice([1.5e9, 3e9, 6e9, 1.3e10, 2.6e10], n_points),
        "P_w": rng.choice([3.0, 4, 5, 6, 8, 12, np.inf], n_points),
        "P_a": rng.choice([4.0, 6, 8, 12, np.inf], n_points),
        "P_kv": rng.choice([4.0, 6, 8, np.inf], n_points),
    }
    return data, np.asarray(sl.loss_model(law, data))


def test_fitter_recovers_table2_constants_from_synthetic_data():
    rng = np.random.default_rng(0)
    data, y = _synthetic(T2, rng, 150)
    y = y + rng.normal(0, 1e-3, y.shape)  # measurement noise
    start = dataclasses.replace(
        T2, A=2e3, alpha=0.4, B=1e4, E=2.5, gamma_w=2.0, gamma_a=2.5, gamma_kv=1.2
    )
    free = ("A", "alpha", "B", "E", "gamma_w", "gamma_a", "gamma_kv")
    fit = sl.fit_law(data, y, free=free, init=start)
    assert fit.r2 > 0.99
    for name in free:
        assert getattr(fit.law, name) == pytest.approx(getattr(T2, name), rel=0.05), name
        lo, hi = fit.ci95[name]
        assert lo < getattr(fit.law, name) < hi
    assert fit.ci95["gamma_w"][0] < T2.gamma_w < fit.ci95["gamma_w"][1]


def test_ptq_fit_recovers_exponents():
    rng = np.random.default_rng(1)
    data = {
        "N": rng.choice([1e6, 3e6, 1e7], 40),
        "D": rng.choice([1e7, 3e7, 1e8, 3e8], 40),
        "P_post": rng.choice([3.0, 4.0, 5.0], 40),
    }
    fixed = dataclasses.replace(T2, b_post=0.0)
    delta = np.asarray(sl.ptq_model(fixed, data))
    start = dataclasses.replace(fixed, C_T=0.1, gamma_D=0.3, gamma_N=0.5, gamma_post=1.0)
    free = ("C_T", "gamma_D", "gamma_N", "gamma_post")
    fit = sl.fit_law(data, delta, free=free, init=start, model=sl.ptq_model, log_target=True)
    assert fit.r2 > 0.999
    for name in free:
        assert getattr(fit.law, name) == pytest.approx(getattr(fixed, name), rel=1e-3), name


def test_fit_bad_input_names_the_field():
    data, y = _synthetic(T2, np.random.default_rng(2), 5)
    with pytest.raises(ConfigError, match="points"):
        sl.fit_law(data, y, free=("A", "alpha", "B", "E", "gamma_w"))
    with pytest.raises(ConfigError, match="free"):
        sl.fit_law(data, y, free=("A", "gamma_x"))
    with pytest.raises(ConfigError, match="data.D"):
        sl.fit_law({**data, "D": data["D"][:3]}, y, free=("A",))


def test_plots_are_written(tmp_path):
    pytest.importorskip("matplotlib")
    a = sl.plot_loss_vs_precision(T2, tmp_path / "p.png", sizes=[3e7, 1e8], tokens=1e10)
    b = sl.plot_ptq_vs_data(T2, tmp_path / "d.png", size=1e8, tokens=[1e9, 1e11], p_post=[3, 4])
    c = sl.plot_fit([1.0, 2.0], [1.1, 1.9], tmp_path / "f.png", title="fit")
    for path in (a, b, c):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
