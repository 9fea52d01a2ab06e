"""Benchmarks of jaxlab.diffusion: one JSON line per measurement.

Sections (``--only a,b``; default all but ``digits``):

- ``samplers``: throughput of every sampler at several NFE on the exact 2-D mixture denoiser
  (batch 4096) and on the ring MLP (batch 4096), samples/s after compilation.
- ``ld3``: LD3 on the 2-D ring oracle (EDM schedule): training time to LD3's own stopping rule,
  and the held-out quality-vs-NFE table (L2 to the teacher, SW to the teacher's samples) of each
  step schedule (time-uniform, time-quadratic, logSNR-uniform, EDM, LD3) for DPM-Solver++(2M),
  UniPC-bh2 and iPNDM.
- ``preference``: DSPO vs Diffusion-DPO vs SFT on the 2-D ring with a linear reward, with a beta
  sweep, for the exact-mixture model (trainable means and weights) and for a trained MLP.
- ``digits``: train the ``diffusion`` digits preset (U-Net), write its sample grid to
  ``runs/bench-digits/samples.png``, then LD3 for that model (4 NFE DPM-Solver++).

Run: ``python -m benchmarks.bench_diffusion [--only samplers,ld3] [--quick]``. ``--quick`` (a few
minutes on 2 CPU cores) keeps NFE 4 and 16 for the sampler throughput, LD3 with DPM-Solver++(2M) at
4 and 6 NFE and iPNDM at 4 NFE, and the preference comparison on the exact-mixture model only
(SFT, Diffusion-DPO beta 10, DSPO beta 1 and 0.3).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

from benchmarks import harness
from jaxlab.diffusion import ld3
from jaxlab.diffusion import preference as pref
from jaxlab.diffusion import samplers as sm
from jaxlab.diffusion import schedules as sc
from jaxlab.diffusion.gmm import GaussianMixture, gmm_eps_fn, ring_mixture
from jaxlab.diffusion.sliced_wasserstein import sliced_wasserstein


def emit(what, size, compile_s=None, time_s=None, rate=None, unit=None, **extra):
    """:func:`benchmarks.harness.emit` of the house row (fields left out are ``null``)."""
    row = dict(what=what, size=size, compile_s=compile_s, time_s=time_s, rate=rate, unit=unit)
    return harness.emit(row, **extra)


def timed(fn, *args, repeats=3):
    """(compile seconds, median steady-state seconds, output) of a jitted function."""
    t0 = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    compile_s = time.perf_counter() - t0
    out = jax.block_until_ready(compiled(*args))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - t0)
    return compile_s, float(np.median(times)), out


SPECS = {
    "euler": sm.SamplerSpec("euler"),
    "heun": sm.SamplerSpec("heun"),
    "ddim": sm.SamplerSpec("ddim"),
    "dpm_solver++2M": sm.SamplerSpec("dpm_solver++", 2),
    "dpm_solver++3M": sm.SamplerSpec("dpm_solver++", 3),
    "uni_pc-bh1": sm.SamplerSpec("uni_pc", 3, "bh1"),
    "uni_pc-bh2": sm.SamplerSpec("uni_pc", 3, "bh2"),
    "ipndm": sm.SamplerSpec("ipndm", 4),
}


def bench_samplers(quick: bool = False):
    from jaxlab.diffusion.mlp_denoiser import MLPDenoiser
    from jaxlab.diffusion.model_wrapper import model_wrapper

    sch = sc.VPLinear()
    batch = 4096
    x = jax.random.normal(jax.random.PRNGKey(0), (batch, 2))
    net = MLPDenoiser(width=128, depth=3, time_scale=1000.0)
    params = net.init(jax.random.PRNGKey(1), x[:1], jnp.ones(1))
    models = {
        "gmm_oracle": gmm_eps_fn(ring_mixture(), sch),
        "mlp_w128_d3": model_wrapper(lambda xx, t: net.apply(params, xx, t), sch),
    }
    for model_name, eps_fn in models.items():
        for name, spec in SPECS.items():
            for nfe in (4, 16) if quick else (4, 8, 16, 32):
                n = spec.steps_for_nfe(nfe)
                ts = sc.logsnr_uniform_steps(sch, n)

                def f(x, ts, spec=spec, eps_fn=eps_fn):
                    return sm.sample(spec, eps_fn, x, ts, schedule=sch)

                c, t, _ = timed(f, x, ts)
                emit(
                    "sampler_throughput",
                    dict(model=model_name, sampler=name, nfe=nfe, batch=batch),
                    c,
                    t,
                    batch / t,
                    "samples/s",
                )


def _ld3_setup(n_test=2000):
    sch = sc.EDM()
    eps_fn = gmm_eps_fn(ring_mixture(8, 1.0, 0.1), sch)
    n = 50 + 50 + n_test
    z, y = jax.jit(
        lambda k: ld3.make_teacher_data(k, eps_fn, sch, n=n, data_shape=(2,), teacher_nfe=64)
    )(jax.random.PRNGKey(0))
    return sch, eps_fn, (z[:50], y[:50]), (z[50:100], y[50:100]), (z[100:], y[100:])


def bench_ld3(quick: bool = False):
    sch, eps_fn, train, valid, test = _ld3_setup()
    kinds = ("time_uniform", "time_quadratic", "logsnr", "edm")
    if quick:
        grid = [("dpm_solver++2M", 4), ("dpm_solver++2M", 6), ("ipndm", 4)]
    else:
        grid = [
            (s, n) for s in ("dpm_solver++2M", "uni_pc-bh2", "ipndm") for n in (3, 4, 5, 6, 8, 10)
        ]
    for spec_name, nfe in grid:
        spec = SPECS[spec_name]
        static = ld3.LD3Static(sampler=spec, nfe=nfe)
        hyper = ld3.LD3Hyper(prior_bound_scale=0.05)
        kw = dict(eps_fn=eps_fn, schedule=sch, static=static, hyper=hyper)
        state = jax.jit(lambda k, kw=kw: ld3.ld3_init(k, train, valid, **kw))(jax.random.PRNGKey(1))
        c, t, state = timed(lambda s, kw=kw: ld3.ld3_fit(s, **kw), state, repeats=1)
        emit(
            "ld3_train_to_convergence",
            dict(sampler=spec_name, nfe=nfe, n_train=50, n_valid=50, batch=2),
            c,
            t,
            int(state.iteration) / t,
            "iterations/s",
            iterations=int(state.iteration),
            rounds=int(state.round),
        )
        t1, t2 = ld3.learned_time_steps(state, sch, static, hyper)

        @jax.jit
        def score(ts, ts2, spec=spec):
            out = sm.sample(
                spec, eps_fn, sch.prior_std * test[0], ts, schedule=sch, eval_timesteps=ts2
            )
            l2 = jnp.mean(jnp.sum((out - test[1]) ** 2, -1))
            return l2, sliced_wasserstein(jax.random.PRNGKey(7), out, test[1])

        table = {}
        for k in kinds:
            ts = sc.get_time_steps(sch, static.steps, k)
            table[k] = [float(v) for v in score(ts, ts)]
        table["ld3"] = [float(v) for v in score(t1, t2)]
        table["ld3_no_eval_shift"] = [float(v) for v in score(t1, t1)]
        for k, (l2, sw) in table.items():
            emit(
                "ld3_quality_vs_nfe",
                dict(sampler=spec_name, nfe=nfe, steps=k, n_test=int(test[0].shape[0])),
                l2=l2,
                sw=sw,
                learned_t=[float(v) for v in t1] if k == "ld3" else None,
            )


def _gmm_preference(method, beta, steps=1000, lr=1e-2):
    sch = sc.VPLinear()
    ref = ring_mixture(8, 1.0, 0.1)
    a = jnp.array([2.0, 0.0])
    reward = lambda x: x @ a  # noqa: E731
    k = jax.random.split(jax.random.PRNGKey(0), 6)
    n = 4096
    xw, xl = pref.label_pairs(k[2], ref.sample(k[0], n), ref.sample(k[1], n), reward)
    hw, hl = pref.label_pairs(k[5], ref.sample(k[3], 1024), ref.sample(k[4], 1024), reward)
    target = ref.tilt(a, 1.0).sample(jax.random.PRNGKey(11), 4000)

    def eps_of(th):
        g = GaussianMixture(means=th["means"], stds=ref.stds, logits=th["logits"])
        return lambda x, t: g.eps(x, sch.alpha(t), sch.sigma(t))

    th0 = {"means": ref.means, "logits": ref.logits}
    opt = optax.adam(lr)

    def step(carry, key):
        th, os = carry
        kb, kl = jax.random.split(key)
        idx = jax.random.randint(kb, (256,), 0, n)
        g = jax.grad(
            lambda th: pref.preference_loss(
                kl, eps_of(th), eps_of(th0), xw[idx], xl[idx], sch, method=method, beta=beta
            )[0]
        )(th)
        u, os = opt.update(g, os, th)
        return (optax.apply_updates(th, u), os), None

    def run(key):
        (th, _), _ = jax.lax.scan(step, (th0, opt.init(th0)), jax.random.split(key, steps))
        g = GaussianMixture(means=th["means"], stds=ref.stds, logits=th["logits"])
        xs = g.sample(jax.random.PRNGKey(12), 4000)
        acc = pref.implicit_accuracy(jax.random.PRNGKey(14), eps_of(th), eps_of(th0), hw, hl, sch)
        return jnp.mean(reward(xs)), sliced_wasserstein(jax.random.PRNGKey(13), xs, target), acc

    c, t, (r, sw, acc) = timed(run, jax.random.PRNGKey(1), repeats=1)
    xs = ref.sample(jax.random.PRNGKey(12), 4000)
    base = dict(
        reward=float(jnp.mean(reward(xs))),
        sw=float(sliced_wasserstein(jax.random.PRNGKey(13), xs, target)),
        target_reward=float(jnp.mean(reward(target))),
    )
    return c, t, float(r), float(sw), float(acc), base


def bench_preference(quick: bool = False):
    if quick:
        grid = [("sft", 1.0), ("dpo", 10.0), ("dspo", 1.0), ("dspo", 0.3)]
    else:
        grid = [("sft", 1.0)]
        grid += [("dpo", b) for b in (1.0, 3.0, 10.0, 30.0, 100.0)]
        grid += [("dspo", b) for b in (0.1, 0.3, 1.0, 1.5, 3.0)]
    for method, beta in grid:
        c, t, r, sw, acc, base = _gmm_preference(method, beta)
        emit(
            "preference_gmm_model",
            dict(method=method, beta=beta, steps=1000, batch=256, pairs=4096),
            c,
            t,
            1000 / t,
            "steps/s",
            reward=r,
            sw_to_tilted=sw,
            implicit_acc=acc,
            reference=base,
        )
    if quick:
        return
    # the MLP path through the recipe (pretrained ring MLP, fine-tuned with each method)
    from jaxlab.core.loop import run
    from jaxlab.recipes import diffusion as diffusion_recipe
    from jaxlab.recipes import preference as preference_recipe

    ring_dir = Path("runs/bench-ring")
    if not (ring_dir / "checkpoints").is_dir():
        cfg = diffusion_recipe.RECIPE.config("ring", ["loop.progress=false"])
        t0 = time.perf_counter()
        res = run(diffusion_recipe.RECIPE, cfg, ring_dir)
        emit(
            "diffusion_ring_train",
            dict(steps=res.step),
            None,
            time.perf_counter() - t0,
            res.step / (time.perf_counter() - t0),
            "steps/s",
            **res.eval_metrics,
        )
    for method, beta in [("sft", 1.0), ("dpo", 3.0), ("dpo", 10.0), ("dspo", 0.3), ("dspo", 1.0)]:
        cfg = preference_recipe.RECIPE.config(
            "ring",
            [f"pretrained={ring_dir}", f"method={method}", f"beta={beta}", "loop.progress=false"],
        )
        t0 = time.perf_counter()
        res = run(
            preference_recipe.RECIPE,
            cfg,
            Path(f"runs/bench-pref-{method}-{beta}"),
            resume=False,
        )
        dt = time.perf_counter() - t0
        emit(
            "preference_mlp_model",
            dict(method=method, beta=beta, steps=res.step, batch=cfg.batch_size),
            None,
            dt,
            res.step / dt,
            "steps/s",
            **res.eval_metrics,
        )


def bench_digits(quick: bool = False):
    from jaxlab.core.loop import run
    from jaxlab.recipes import diffusion as diffusion_recipe
    from jaxlab.recipes import ld3 as ld3_recipe

    run_dir = Path("runs/bench-digits")
    overrides = ["loop.progress=false"]
    if quick:
        overrides += ["loop.total_steps=1000", "loop.eval_every=1000", "loop.checkpoint_every=1000"]
    cfg = diffusion_recipe.RECIPE.config("digits", overrides)
    t0 = time.perf_counter()
    res = run(diffusion_recipe.RECIPE, cfg, run_dir)
    dt = time.perf_counter() - t0
    emit(
        "diffusion_digits_train",
        dict(steps=res.step, batch=cfg.batch_size, net="unet"),
        None,
        dt,
        res.step / dt,
        "steps/s",
        samples_png=str(run_dir / "samples.png"),
        **res.eval_metrics,
    )
    cfg = ld3_recipe.RECIPE.config(
        "digits", [f"checkpoint={run_dir}", "ld3.nfe=4", "loop.progress=false"]
    )
    t0 = time.perf_counter()
    res = run(ld3_recipe.RECIPE, cfg, Path("runs/bench-digits-ld3"), resume=False)
    dt = time.perf_counter() - t0
    emit(
        "ld3_digits",
        dict(sampler="dpm_solver++2M", nfe=4, steps=res.step),
        None,
        dt,
        res.step / dt,
        "iterations/s",
        **res.eval_metrics,
    )


SECTIONS = {
    "samplers": bench_samplers,
    "ld3": bench_ld3,
    "preference": bench_preference,
    "digits": bench_digits,
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="samplers,ld3,preference")
    parser.add_argument("--quick", action="store_true", help="a few minutes on 2 CPU cores")
    args = parser.parse_args()
    for name in args.only.split(","):
        if name not in SECTIONS:
            raise SystemExit(f"--only: got {name!r}, expected some of {sorted(SECTIONS)}")
        SECTIONS[name](quick=args.quick)


if __name__ == "__main__":
    main()
