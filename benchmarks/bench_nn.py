"""Dense decoder pieces (jaxlab.nn + jaxlab.lm): forward throughput, KV-cache decoding versus
full recomputation, and the grain data pipeline; the im2col convolutions (``jaxlab.nn.conv``)
against flax's in a scanned training step (``conv_train_step``: Dreamer's pixel encoder 8x8/4 +
4x4/2 and a three-layer 4x4/2 transposed-conv decoder on 256 32x32 images, ``--conv-steps``
steps in one ``lax.scan``, and the same step called alone; ``ratio`` = flax time / ours).

Prints one JSON line per measurement. Usage: ``python -m benchmarks.bench_nn [--repeats N]``.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.harness import emit_rate as _emit
from benchmarks.harness import timed_mean
from jaxlab.lm.data import ByteLMDataConfig, train_iterator
from jaxlab.lm.model import Decoder, DecoderConfig, init_cache

CFG = DecoderConfig(d_model=128, n_layers=2, n_heads=4, head_dim=32, d_ff=384, max_len=128)


def bench_forward(params, model, batch: int, repeats: int) -> None:
    tokens = jnp.zeros((batch, CFG.max_len), jnp.int32)
    fwd = jax.jit(lambda p, t: model.apply(p, t))
    compile_s, dt = timed_mean(fwd, params, tokens, repeats=repeats)
    size = {"d_model": CFG.d_model, "layers": CFG.n_layers, "batch": batch, "seq": CFG.max_len}
    _emit("decoder_forward", size, compile_s, dt, batch * CFG.max_len / dt, "tok/s")


def bench_generation(params, model, batch: int, prompt: int, repeats: int) -> None:
    new = CFG.max_len - prompt

    @jax.jit
    def cached(params, prompt_tokens):
        cache = init_cache(CFG, batch)
        logits, cache = model.apply(params, prompt_tokens, cache, method=Decoder.decode)

        def step(carry, _):
            token, cache = carry
            logits, cache = model.apply(params, token[:, None], cache, method=Decoder.decode)
            return (jnp.argmax(logits[:, 0], -1), cache), token

        first = jnp.argmax(logits[:, -1], -1)
        return jax.lax.scan(step, (first, cache), None, length=new)[1]

    @jax.jit
    def recompute(params, prompt_tokens):
        seq = jnp.zeros((batch, CFG.max_len), jnp.int32).at[:, :prompt].set(prompt_tokens)

        def step(seq, t):
            logits = model.apply(params, seq)
            nxt = jnp.argmax(jnp.take(logits, t - 1, axis=1), -1)
            return seq.at[:, t].set(nxt), nxt

        return jax.lax.scan(step, seq, jnp.arange(prompt, CFG.max_len))[1]

    tokens = jnp.ones((batch, prompt), jnp.int32)
    size = {"d_model": CFG.d_model, "layers": CFG.n_layers, "batch": batch, "prompt": prompt,
            "new": new}  # fmt: skip
    c1, t1 = timed_mean(cached, params, tokens, repeats=repeats)
    c2, t2 = timed_mean(recompute, params, tokens, repeats=repeats)
    same = bool(
        np.array_equal(np.asarray(cached(params, tokens)), np.asarray(recompute(params, tokens)))
    )
    _emit("greedy_decode_kv_cache", size, c1, t1, batch * new / t1, "tok/s",
          speedup_vs_recompute=round(t2 / t1, 2), same_tokens=same)  # fmt: skip
    _emit("greedy_decode_recompute", size, c2, t2, batch * new / t2, "tok/s")


def bench_data(batches: int) -> None:
    cfg = ByteLMDataConfig(seq_len=128, batch_size=32)
    t0 = time.perf_counter()
    it = train_iterator(cfg)
    next(it)
    setup_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(batches):
        next(it)
    dt = (time.perf_counter() - t0) / batches
    size = {"batch": 32, "seq": 128}
    _emit("grain_train_batches", size, setup_s, dt, 32 * 128 / dt, "tok/s", note="compile_s=setup")


def bench_conv(steps: int, repeats: int) -> None:
    import flax.linen as nn

    from jaxlab.nn.conv import Conv, ConvTranspose

    def make(conv, convt):
        class AE(nn.Module):
            @nn.compact
            def __call__(self, x):
                h = nn.relu(conv(16, 8, 4)(x))
                h = nn.relu(conv(32, 4, 2)(h))  # 4x4x32
                for f in (16, 8, 3):
                    h = convt(f, 4, 2)(h)
                    h = nn.relu(h) if f != 3 else h
                return h

        return AE()

    flax_conv = lambda f, k, s: nn.Conv(f, (k, k), (s, s))
    flax_convt = lambda f, k, s: nn.ConvTranspose(f, (k, k), (s, s))
    x = jax.random.normal(jax.random.key(0), (256, 32, 32, 3))
    times = {}
    for impl, model in (
        ("flax", make(flax_conv, flax_convt)),
        ("jaxlab", make(Conv, ConvTranspose)),
    ):
        params = model.init(jax.random.key(1), x)

        def step(p, _, model=model):
            g = jax.grad(lambda p: jnp.mean((model.apply(p, x) - x) ** 2))(p)
            return jax.tree.map(lambda a, b: a - 1e-3 * b, p, g), None

        for mode, fn, n in (
            ("alone", jax.jit(lambda p, step=step: step(p, None)[0]), 1),
            ("scan", jax.jit(lambda p, step=step: jax.lax.scan(step, p, None, steps)[0]), steps),
        ):
            compile_s, dt = timed_mean(fn, params, repeats=repeats)
            times[impl, mode] = dt / n
            size = {"batch": 256, "side": 32, "impl": impl, "mode": mode, "steps": n}
            extra = {}
            if impl == "jaxlab":
                extra["ratio"] = round(times["flax", mode] / times[impl, mode], 2)
            _emit("conv_train_step", size, compile_s, dt / n, 1.0 / (dt / n), "step/s", **extra)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--conv-steps", type=int, default=8)
    ap.add_argument("--only", choices=["conv"], default=None)
    args = ap.parse_args()
    bench_conv(args.conv_steps, repeats=max(1, args.repeats // 2))
    if args.only == "conv":
        return
    model = Decoder(CFG)
    params = jax.jit(model.init)(jax.random.key(0), jnp.zeros((1, CFG.max_len), jnp.int32))
    bench_forward(params, model, batch=32, repeats=args.repeats)
    bench_generation(params, model, batch=8, prompt=32, repeats=max(1, args.repeats // 2))
    bench_data(batches=200)


if __name__ == "__main__":
    main()
