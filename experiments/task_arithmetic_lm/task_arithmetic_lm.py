"""Task arithmetic on a real model of the project: two fine-tunes of a small byte-level decoder
(the lm-tiny architecture) on two domains of the shipped corpus, added and negated.

Domains (by the module a docstring comes from): **A** = ``typing, inspect, ast, dis, enum,
dataclasses, functools, abc`` (the language and its introspection), **B** = ``ipaddress, socket,
http, urllib, selectors, base64, hmac, uuid`` (networking and encodings). ``Ψ_0`` is pre-trained on
the rest of the corpus; ``Ψ_A``, ``Ψ_B`` are fine-tuned from it on A and B; the task vectors
``ΔΨ_A = Ψ_A − Ψ_0``, ``ΔΨ_B = Ψ_B − Ψ_0`` are combined as ``Ψ_0 + λ_A ΔΨ_A + λ_B ΔΨ_B`` (full,
rank-``--rank`` per matrix and 50 %-pruned) and evaluated by the next-token loss (nats/byte) on
held-out documents of A and B. Addition should lower both losses together; negating ``ΔΨ_B``
should raise the B loss above ``Ψ_0``'s while keeping most of A's gain.

One JSON line per edit. Usage:
``python -m experiments.task_arithmetic_lm.task_arithmetic_lm [--quick]``.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from benchmarks.harness import emit
from jaxlab.lm import task_vectors as tv
from jaxlab.lm.data import document_split, load_corpus
from jaxlab.lm.model import Decoder, DecoderConfig, next_token_loss
from jaxlab.lm.tokenizer import ByteTokenizer

DOMAIN_A = ("typing", "inspect", "ast", "dis", "enum", "dataclasses", "functools", "abc")
DOMAIN_B = ("ipaddress", "socket", "http", "urllib", "selectors", "base64", "hmac", "uuid")


def _streams(docs):
    tok = ByteTokenizer()
    train, val = document_split(len(docs), val_fraction=0.15, seed=0)
    enc = [tok.encode(d, add_bos=True, add_eos=True) for d in docs]
    return (
        np.concatenate([enc[i] for i in train]).astype(np.int32),
        np.concatenate([enc[i] for i in val]).astype(np.int32),
    )


def _windows(stream, window, count, seed):
    starts = np.random.default_rng(seed).integers(0, stream.size - window, count)
    return np.stack([stream[s : s + window] for s in starts])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rank", type=int, default=4)
    args = ap.parse_args()
    pre_steps, ft_steps = (150, 60) if args.quick else (600, 200)
    seq, batch = 64, 16
    cfg = DecoderConfig(d_model=64, n_layers=2, n_heads=4, head_dim=16, d_ff=192, max_len=seq)
    model = Decoder(cfg)

    docs = load_corpus()
    module = [d.split("\n", 1)[0].split(".")[0] for d in docs]
    a = [d for d, m in zip(docs, module, strict=True) if m in DOMAIN_A]
    b = [d for d, m in zip(docs, module, strict=True) if m in DOMAIN_B]
    rest = [d for d, m in zip(docs, module, strict=True) if m not in DOMAIN_A + DOMAIN_B]
    (rest_tr, _), (a_tr, a_val), (b_tr, b_val) = _streams(rest), _streams(a), _streams(b)
    val = {
        "A": jnp.asarray(_windows(a_val, seq + 1, 256, 1)),
        "B": jnp.asarray(_windows(b_val, seq + 1, 256, 2)),
    }

    def loss(params, tokens):
        return next_token_loss(model.apply(params, tokens[:, :-1]), tokens[:, 1:])

    def train(params, data, lr):
        steps = data.shape[0]
        opt = optax.adamw(optax.warmup_cosine_decay_schedule(0.0, lr, 20, steps, lr * 0.1))

        def step(carry, tokens):
            p, s = carry
            value, g = jax.value_and_grad(loss)(p, tokens)
            u, s = opt.update(g, s, p)
            return (optax.apply_updates(p, u), s), value

        (params, _), losses = jax.lax.scan(step, (params, opt.init(params)), data)
        return params, losses

    train = jax.jit(train, static_argnums=2)

    def batches(stream, steps, seed):
        windows = _windows(stream, seq + 1, steps * batch, seed)
        return jnp.asarray(windows).reshape(steps, batch, seq + 1)

    t0 = time.perf_counter()
    p0 = model.init(jax.random.PRNGKey(0), jnp.zeros((1, seq), jnp.int32))
    p0, _ = train(p0, batches(rest_tr, pre_steps, 0), 3e-3)
    pa, _ = train(p0, batches(a_tr, ft_steps, 1), 1e-3)
    pb, _ = train(p0, batches(b_tr, ft_steps, 2), 1e-3)
    da, db = tv.task_vector(pa, p0), tv.task_vector(pb, p0)
    train_s = time.perf_counter() - t0

    @jax.jit
    def evaluate(vectors, lam):
        p = tv.edit(p0, vectors, lam)
        return jnp.stack([loss(p, val["A"]), loss(p, val["B"])])

    variants = {
        "full": [da, db],
        f"rank{args.rank}": [tv.low_rank(da, args.rank), tv.low_rank(db, args.rank)],
        "pruned50": [tv.magnitude_prune(da, 0.5), tv.magnitude_prune(db, 0.5)],
    }
    edits = [
        (0.0, 0.0),
        (1.0, 0.0),
        (0.0, 1.0),
        (1.0, 1.0),
        (0.5, 0.5),
        (1.0, -1.0),
        (1.0, -0.5),
        (0.0, -1.0),
    ]
    emit(
        {
            "what": "task_arithmetic_lm_setup",
            "pretrain_steps": pre_steps,
            "finetune_steps": ft_steps,
            "seq": seq,
            "batch": batch,
            "train_s": round(train_s, 1),
            "cos(dA, dB)": round(float(tv.cosine(da, db)), 4),
        }
    )
    for name, vecs in variants.items():
        for lam in edits:
            la, lb = (float(v) for v in evaluate(vecs, jnp.asarray(lam)))
            emit(
                {
                    "what": "task_arithmetic_lm",
                    "variant": name,
                    "lambda_A": lam[0],
                    "lambda_B": lam[1],
                    "val_loss_A": round(la, 4),
                    "val_loss_B": round(lb, 4),
                }
            )


if __name__ == "__main__":
    main()
