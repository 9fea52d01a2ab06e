"""Plain NumPy (float64) reference implementations for parity tests of jaxlab.diffusion.

Written as direct loops over steps with Python lists of previous model outputs, following the
update rules of the DPM-Solver, UniPC and LD3 reference code, independent of jaxlab's
coefficient-precomputing implementation.
"""

from __future__ import annotations

import numpy as np


class VPLinearNP:
    def __init__(self, beta_0=0.1, beta_1=20.0, t_min=1e-3, t_max=1.0):
        self.b0, self.b1, self.t_min, self.t_max = beta_0, beta_1, t_min, t_max

    def log_alpha(self, t):
        return -0.25 * t**2 * (self.b1 - self.b0) - 0.5 * t * self.b0

    def alpha(self, t):
        return np.exp(self.log_alpha(t))

    def sigma(self, t):
        return np.sqrt(1.0 - np.exp(2.0 * self.log_alpha(t)))

    def lam(self, t):
        return np.log(self.alpha(t)) - np.log(self.sigma(t))


class EDMNP:
    def __init__(self, t_min=0.002, t_max=80.0):
        self.t_min, self.t_max = t_min, t_max

    def log_alpha(self, t):
        return 0.0 * t

    def alpha(self, t):
        return 1.0 + 0.0 * t

    def sigma(self, t):
        return t

    def lam(self, t):
        return -np.log(t)


def gmm_denoise(x, alpha, sigma, means, stds, weights):
    """Exact E[x0 | x_t] of an isotropic Gaussian mixture (x: (n, d); alpha, sigma scalars)."""
    var = alpha**2 * stds**2 + sigma**2  # (k,)
    diff = x[:, None, :] - alpha * means[None]  # (n, k, d)
    d = x.shape[1]
    logp = -0.5 * np.sum(diff**2, -1) / var - 0.5 * d * np.log(2 * np.pi * var) + np.log(weights)
    logp -= logp.max(-1, keepdims=True)
    g = np.exp(logp)
    g /= g.sum(-1, keepdims=True)
    post = means[None] + (alpha * stds**2 / var)[None, :, None] * diff
    return np.sum(g[..., None] * post, axis=1)


def make_models(sch, means, stds, weights):
    def data(x, t):
        return gmm_denoise(x, sch.alpha(t), sch.sigma(t), means, stds, weights)

    def noise(x, t):
        return (x - sch.alpha(t) * data(x, t)) / sch.sigma(t)

    return data, noise


def dpm_solver_pp(data_fn, sch, x, ts, order, lower_order_final=True):
    """Multistep DPM-Solver++ as in ``dpm_solver_pytorch.py`` (``sample(method='multistep')``)."""
    steps = len(ts) - 1
    t_prev = [ts[0]]
    m_prev = [data_fn(x, ts[0])]
    for step in range(1, steps + 1):
        if lower_order_final and steps < 10:
            step_order = min(order, steps + 1 - step)
        else:
            step_order = order
        step_order = min(step_order, step)
        t = ts[step]
        lam_t, lam_0 = sch.lam(t), sch.lam(t_prev[-1])
        h = lam_t - lam_0
        a = sch.sigma(t) / sch.sigma(t_prev[-1])
        al = sch.alpha(t)
        phi1 = np.expm1(-h)
        if step_order == 1:
            x = a * x - al * phi1 * m_prev[-1]
        elif step_order == 2:
            h0 = lam_0 - sch.lam(t_prev[-2])
            r0 = h0 / h
            d10 = (m_prev[-1] - m_prev[-2]) / r0
            x = a * x - al * phi1 * m_prev[-1] - 0.5 * al * phi1 * d10
        else:
            lam_1, lam_2 = sch.lam(t_prev[-2]), sch.lam(t_prev[-3])
            r0, r1 = (lam_0 - lam_1) / h, (lam_1 - lam_2) / h
            d10 = (m_prev[-1] - m_prev[-2]) / r0
            d11 = (m_prev[-2] - m_prev[-3]) / r1
            d1 = d10 + r0 / (r0 + r1) * (d10 - d11)
            d2 = (d10 - d11) / (r0 + r1)
            phi2 = phi1 / h + 1.0
            phi3 = phi2 / h - 0.5
            x = a * x - al * phi1 * m_prev[-1] + al * phi2 * d1 - al * phi3 * d2
        if step < steps:
            t_prev.append(t)
            m_prev.append(data_fn(x, t))
            t_prev, m_prev = t_prev[-order:], m_prev[-order:]
    return x


def ipndm(noise_fn, sch, x, ts, order=4):
    """iPNDM as in LD3's ``samplers/ipndm.py``."""
    buf = []
    coefs = {1: [1.0], 2: [3 / 2, -1 / 2], 3: [23 / 12, -16 / 12, 5 / 12]}
    coefs[4] = [55 / 24, -59 / 24, 37 / 24, -9 / 24]
    for step in range(len(ts) - 1):
        p = min(order, step + 1)
        s, t = ts[step], ts[step + 1]
        e = noise_fn(x, s)
        hist = [e] + buf[::-1]
        comb = sum(c * hh for c, hh in zip(coefs[p], hist[:p], strict=True))
        h = sch.lam(t) - sch.lam(s)
        x = np.exp(sch.log_alpha(t) - sch.log_alpha(s)) * x - sch.sigma(t) * np.expm1(h) * comb
        buf.append(e)
        buf = buf[-(order - 1) :] if order > 1 else []
    return x


def uni_pc(data_fn, sch, x, ts, order, variant="bh1", lower_order_final=True):
    """UniPC (B(h), data prediction) as in LD3's ``samplers/uni_pc.py`` / the UniPC code."""
    steps = len(ts) - 1
    t_prev = [ts[0]]
    m_prev = [data_fn(x, ts[0])]

    def update(x, p, t, use_corrector):
        lam_0 = sch.lam(t_prev[-1])
        h = sch.lam(t) - lam_0
        m0 = m_prev[-1]
        rks, d1s = [], []
        for i in range(1, p):
            rk = (sch.lam(t_prev[-(i + 1)]) - lam_0) / h
            rks.append(rk)
            d1s.append((m_prev[-(i + 1)] - m0) / rk)
        rks.append(1.0)
        rks = np.array(rks)
        hh = -h
        h_phi_1 = np.expm1(hh)
        h_phi_k = h_phi_1 / hh - 1
        fact = 1
        b_h = hh if variant == "bh1" else np.expm1(hh)
        rmat, b = [], []
        for i in range(1, p + 1):
            rmat.append(rks ** (i - 1))
            b.append(h_phi_k * fact / b_h)
            fact *= i + 1
            h_phi_k = h_phi_k / hh - 1 / fact
        rmat, b = np.stack(rmat), np.array(b)
        al = sch.alpha(t)
        x_base = sch.sigma(t) / sch.sigma(t_prev[-1]) * x - al * h_phi_1 * m0
        if d1s:
            rhos_p = np.array([0.5]) if p == 2 else np.linalg.solve(rmat[:-1, :-1], b[:-1])
            pred = sum(r * d for r, d in zip(rhos_p, d1s, strict=True))
        else:
            pred = 0.0
        x_t = x_base - al * b_h * pred
        m_t = None
        if use_corrector:
            rhos_c = np.array([0.5]) if p == 1 else np.linalg.solve(rmat, b)
            m_t = data_fn(x_t, t)
            corr = sum(r * d for r, d in zip(rhos_c[:-1], d1s, strict=True)) if d1s else 0.0
            x_t = x_base - al * b_h * (corr + rhos_c[-1] * (m_t - m0))
        return x_t, m_t

    for step in range(1, steps + 1):
        p = min(order, step)
        if lower_order_final and steps < 10:
            p = min(p, steps + 1 - step)
        x, m_t = update(x, p, ts[step], use_corrector=step < steps)
        if step < steps:
            t_prev.append(ts[step])
            m_prev.append(m_t)
            t_prev, m_prev = t_prev[-order:], m_prev[-order:]
    return x
