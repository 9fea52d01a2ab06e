"""Quantisation costs: training steps/s with fake quantisation on vs off, GPTQ time per layer.

Measured:

- ``train_step``: one AdamW step of the shared LM train step (``jaxlab.lm.training``) on a decoder
  with ``model.quant`` off and with ``(P_w, P_a, P_kv)`` fake quantisation on: compile seconds,
  steady-state steps/s and tokens/s, and the overhead ratio ``rate_off / rate_on``;
- ``gptq_matrix``: GPTQ of one ``[d_in, d_out]`` layer with a ``d_in x d_in`` Hessian (compile
  seconds separately, then seconds per layer), next to round-to-nearest of the same layer;
- ``gptq_decoder``: GPTQ of a whole decoder (calibration forward passes included), per layer.

Timings on a shared 2-core CPU are noisy. Prints one JSON line per measurement::

    python -m benchmarks.bench_quant                 # d_model 128, 2 layers, batch 16 x 128
    python -m benchmarks.bench_quant --d-model 256 --layers 4 --seconds 5
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.harness import emit, steady_rate
from jaxlab.lm import training
from jaxlab.lm.model import Decoder, DecoderConfig
from jaxlab.lm.quant import gptq_matrix, gptq_quantize, quantize_dequantize
from jaxlab.nn.quantization import QuantConfig


def bench_train(args) -> None:
    rates = {}
    for name, quant in (
        ("off", QuantConfig()),
        ("w4", QuantConfig(w_bits=4)),
        ("w4a8kv4", QuantConfig(w_bits=4, a_bits=8, kv_bits=4)),
    ):
        cfg = DecoderConfig(
            d_model=args.d_model, n_layers=args.layers, n_heads=args.d_model // 32, head_dim=32,
            d_ff=4 * args.d_model, max_len=args.seq, quant=quant,
        )  # fmt: skip
        model = Decoder(cfg)
        optim = training.OPTIM
        init = training.make_init(model, optim, 1000, args.seq)
        step = jax.jit(training.make_train_step(model, optim, 1000), donate_argnums=0)
        state = jax.jit(init)(jax.random.key(0))
        batch = {"tokens": jnp.asarray(
            np.random.default_rng(0).integers(0, cfg.vocab_size, (args.batch, args.seq + 1)),
            jnp.int32)}  # fmt: skip
        t0 = time.perf_counter()
        compiled = step.lower(state, batch).compile()
        compile_s = time.perf_counter() - t0
        elapsed, calls, _ = steady_rate(
            lambda s, b, c=compiled: c(s, b)[0], state, (batch,), args.seconds
        )
        rate = calls / elapsed
        rates[name] = rate
        emit({
            "what": "train_step", "quant": name, "d_model": args.d_model, "layers": args.layers,
            "batch": args.batch, "seq": args.seq,
            "compile_s": round(compile_s, 3), "time": round(1 / rate, 5),
            "rate": round(rate, 2), "tokens_per_s": round(rate * args.batch * args.seq, 1),
            "overhead_vs_off": round(rates["off"] / rate, 3),
        })  # fmt: skip


def bench_gptq(args) -> None:
    for d_in, d_out in ((args.d_model, args.d_model), (args.d_model, 4 * args.d_model),
                        (4 * args.d_model, args.d_model)):  # fmt: skip
        x = jax.random.normal(jax.random.key(0), (2048, d_in))
        w = jax.random.normal(jax.random.key(1), (d_in, d_out))
        h = 2.0 * x.T @ x / x.shape[0]
        t0 = time.perf_counter()
        jax.block_until_ready(gptq_matrix(w, h, bits=4, block_size=128))
        first = time.perf_counter() - t0
        reps, t0 = 3, time.perf_counter()
        for b in (3, 4, 8):
            jax.block_until_ready(gptq_matrix(w, h, bits=b, block_size=128))
        per = (time.perf_counter() - t0) / reps
        rtn = jax.jit(lambda w: quantize_dequantize(w, 4, 0))
        jax.block_until_ready(rtn(w))
        t0 = time.perf_counter()
        jax.block_until_ready(rtn(w))
        rtn_s = time.perf_counter() - t0
        emit({
            "what": "gptq_matrix", "d_in": d_in, "d_out": d_out, "block_size": 128,
            "compile_s": round(first - per, 3), "time": round(per, 4), "rtn_time": round(rtn_s, 5),
            "rate": round(1 / per, 2), "unit": "layers/s",
        })  # fmt: skip

    cfg = DecoderConfig(
        d_model=args.d_model, n_layers=args.layers, n_heads=args.d_model // 32, head_dim=32,
        d_ff=4 * args.d_model, max_len=args.seq,
    )  # fmt: skip
    tokens = jnp.asarray(
        np.random.default_rng(1).integers(0, cfg.vocab_size, (16, args.seq)), jnp.int32
    )
    params = jax.jit(Decoder(cfg).init)(jax.random.key(0), tokens)
    times = []
    for _ in range(2):  # the first call compiles
        t0 = time.perf_counter()
        jax.block_until_ready(gptq_quantize(cfg, params, tokens, 4))
        times.append(time.perf_counter() - t0)
    n_linear = 7 * args.layers
    emit({
        "what": "gptq_decoder", "d_model": args.d_model, "layers": args.layers,
        "calibration_tokens": int(tokens.size), "linear_maps": n_linear,
        "compile_s": round(times[0] - times[1], 3), "time": round(times[1], 3),
        "time_per_layer": round(times[1] / n_linear, 4),
    })  # fmt: skip


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--only", choices=("train", "gptq"), default=None)
    args = p.parse_args(argv)
    if args.only in (None, "train"):
        bench_train(args)
    if args.only in (None, "gptq"):
        bench_gptq(args)


if __name__ == "__main__":
    main()
