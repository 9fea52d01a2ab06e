"""DEPT benchmark: one JSON line per measurement.

* ``throughput``: tokens/s of one DEPT round (glob/trim/spec) vs the same tokens as ``N``
  synchronous data-parallel steps (``lax.scan``), equal model size; compile seconds; bytes
  communicated per token (the formula of ``jaxlab.lm.dept``).
* ``quality``: per-source held-out perplexity and bits per character (comparable across
  tokenizers) of each variant vs data parallel at equal tokens, over seeds.
* ``plasticity``: a trained body (DEPT-GLOB vs data parallel) continued on a held-out language
  with fresh embeddings (its own BPE vocabulary); training loss after a few steps.

    python -m benchmarks.bench_dept [--quick] [--seeds 3] [--rounds 40]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.harness import emit
from jaxlab.lm import dept as D
from jaxlab.lm import sources as S
from jaxlab.lm.model import DecoderConfig


def setup(args, seed=0):
    gc = S.GrammarConfig(seed=seed)
    g = S.make_grammar(gc)
    texts = [S.render(g, gc, k, args.chars) for k in range(args.sources + 1)]
    model = DecoderConfig(
        d_model=args.d, n_layers=args.layers, n_heads=4, head_dim=args.d // 4,
        d_ff=2 * args.d, max_len=args.seq,
    )  # fmt: skip
    return texts, model


def timed_compile(fn, *a):
    t0 = time.perf_counter()
    c = jax.jit(fn).lower(*a).compile()
    return c, time.perf_counter() - t0


def steady(fn, state, batch, seconds):
    state, _ = fn(state, batch)
    jax.block_until_ready(state)
    n, t0 = 0, time.perf_counter()
    while True:
        state, _ = fn(state, batch)
        jax.block_until_ready(state)
        n += 1
        if time.perf_counter() - t0 >= seconds and n >= 2:
            return (time.perf_counter() - t0) / n


def dept_cfg(args, variant):
    return D.DeptConfig(
        variant=variant, sources_per_round=args.sources, local_steps=args.local_steps
    )


def dept_optim(args):
    """The clients' clipped AdamW at ``--lr`` and DiLoCo's Nesterov SGD (0.7, momentum 0.9)."""
    return D.DeptOptim(inner=dataclasses.replace(D.DeptOptim().inner, lr=args.lr))


def dp_runner(args, model, vocab):
    _, init, step = D.make_dp(dept_optim(args).inner, model, vocab)

    def call(state, tokens):  # tokens [K, N, B, T+1] -> N DP steps of all sources' batches
        return jax.lax.scan(step, state, jnp.swapaxes(tokens, 0, 1))

    return init, call


def bench_throughput(args):
    texts, model = setup(args)
    texts = texts[: args.sources]
    k, n, b, t = args.sources, args.local_steps, args.batch, args.seq
    tokens = k * n * b * t
    for variant in D.VARIANTS:
        src = D.tokenize_sources(texts, variant, args.vocab)
        dept = D.Dept(dept_cfg(args, variant), model, src.vocabs, optim=dept_optim(args))
        state = dept.init(jax.random.PRNGKey(0))
        batch = jnp.asarray(D.round_windows(src.train, 0, 0, n, b, t))
        fn, comp = timed_compile(dept.round_step, state, batch)
        sec = steady(fn, state, batch, args.seconds)
        n_body = D.param_count(state.body)
        by = D.round_bytes(variant, n_body, model.d_model, src.vocabs.sizes, src.vocabs.server_size)
        emit(what="dept_round", variant=variant, size=dict(K=k, N=n, B=b, T=t, d=model.d_model),
             compile_s=round(comp, 2), time=sec, rate=tokens / sec, unit="tok/s",
             bytes_per_round=by, bytes_per_token=by / tokens, **dept.counts())  # fmt: skip
    src = D.tokenize_sources(texts, "glob", args.vocab)
    init, call = dp_runner(args, model, src.vocabs.server_size)
    state = init(jax.random.PRNGKey(0))
    batch = jnp.asarray(D.round_windows(src.train, 0, 0, n, b, t))
    fn, comp = timed_compile(call, state, batch)
    sec = steady(fn, state, batch, args.seconds)
    n_body = D.param_count(D.split_params(state.params)[0])
    by = D.dp_bytes(n_body, model.d_model, src.vocabs.server_size, steps=n, workers=k)
    emit(what="dp_steps", variant="dp", size=dict(K=k, N=n, B=b, T=t, d=model.d_model),
         compile_s=round(comp, 2), time=sec, rate=tokens / sec, unit="tok/s",
         bytes_per_round=by, bytes_per_token=by / tokens)  # fmt: skip


def train_variant(args, texts, model, variant, seed):
    n, b, t = args.local_steps, args.batch, args.seq
    src = D.tokenize_sources(texts, "glob" if variant == "dp" else variant, args.vocab)
    val = jnp.asarray(D.eval_windows(src.val, 32, t))
    if variant == "dp":
        init, call = dp_runner(args, model, src.vocabs.server_size)
        state = init(jax.random.PRNGKey(seed))
        call = jax.jit(call)
        for r in range(args.rounds):
            state, _ = call(state, jnp.asarray(D.round_windows(src.train, seed, r, n, b, t)))
        full = D.Dept(dept_cfg(args, "glob"), model, src.vocabs, optim=dept_optim(args))
        body, emb = D.split_params(state.params)
        ds = full.init(jax.random.PRNGKey(0)).replace(body=body, server_emb=emb)
        losses = np.asarray(jax.jit(full.evaluate)(ds, val))
        return losses, src, body
    dept = D.Dept(dept_cfg(args, variant), model, src.vocabs, optim=dept_optim(args))
    state = dept.init(jax.random.PRNGKey(seed))
    step = jax.jit(dept.round_step)
    for r in range(args.rounds):
        state, _ = step(state, jnp.asarray(D.round_windows(src.train, seed, r, n, b, t)))
    return np.asarray(jax.jit(dept.evaluate)(state, val)), src, state.body


def bench_quality(args):
    bodies = {}
    for seed in range(args.seeds):
        texts, model = setup(args, seed)
        held_out, texts = texts[-1], texts[: args.sources]
        for variant in ("dp", *D.VARIANTS):
            t0 = time.perf_counter()
            losses, src, body = train_variant(args, texts, model, variant, seed)
            bpc = [
                float(x / np.log(2) / c) for x, c in zip(losses, src.chars_per_token, strict=True)
            ]
            emit(what="quality", variant=variant, seed=seed, rounds=args.rounds,
                 tokens=args.rounds * args.sources * args.local_steps * args.batch * args.seq,
                 ppl=[round(float(np.exp(x)), 3) for x in losses],
                 bits_per_char=[round(x, 4) for x in bpc], mean_bpc=round(float(np.mean(bpc)), 4),
                 time=round(time.perf_counter() - t0, 1))  # fmt: skip
            bodies[(variant, seed)] = body
        # plasticity: continue each body on the held-out language with fresh embeddings
        tok = S.train_bpe([held_out], args.vocab)
        stream = S.encode(tok, held_out)
        steps = args.adapt_steps
        toks = jnp.asarray(D.round_windows((stream,), seed, 10_000, steps, args.batch, args.seq)[0])
        inner = dept_optim(args).inner
        adapt = functools.partial(
            D.adapt, model_cfg=model, inner=inner, vocab_size=tok.get_vocab_size(), lr=args.lr
        )
        fn = jax.jit(lambda key, body, toks, adapt=adapt: adapt(key, body, tokens=toks))
        fresh = D.Dept(
            dept_cfg(args, "spec"), model, D.tokenize_sources(texts, "spec", args.vocab).vocabs
        )
        rand_body = fresh.init(jax.random.PRNGKey(seed + 100)).body
        for name, body in (("dept-glob", bodies[("glob", seed)]), ("dept-spec", bodies[("spec", seed)]),
                           ("dp", bodies[("dp", seed)]), ("random", rand_body)):  # fmt: skip
            curve = np.asarray(fn(jax.random.PRNGKey(seed + 7), body, toks))
            emit(what="plasticity", body=name, seed=seed, steps=steps,
                 loss_at=[round(float(curve[i]), 4) for i in (0, steps // 4, steps // 2, steps - 1)],
                 mean_loss_last_quarter=round(float(curve[-steps // 4 :].mean()), 4))  # fmt: skip


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--sources", type=int, default=3)
    p.add_argument("--local-steps", type=int, default=8)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--d", type=int, default=32)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--vocab", type=int, default=96)
    p.add_argument("--chars", type=int, default=30_000)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--adapt-steps", type=int, default=40)
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--only", choices=("throughput", "quality"), default=None)
    args = p.parse_args()
    if args.quick:
        args.seeds, args.rounds, args.adapt_steps, args.seconds = 1, 5, 8, 0.5
    if args.only in (None, "throughput"):
        bench_throughput(args)
    if args.only in (None, "quality"):
        bench_quality(args)


if __name__ == "__main__":
    main()
