"""Decoding demonstrations on the project's own small models, one JSON line each.

Two ``lm-tiny`` byte-level decoders are trained on the shipped corpus with the recipe (a small
drafter and a larger verifier; checkpoints are cached in ``--run-root``, git-ignored ``runs/``,
so a second invocation only restores them). Then:

* ``train``: final validation loss of each model (bits/byte) and training wall time.
* ``arith_*`` (constrained generation, :mod:`jaxlab.decoding.arithmetic`): after the prompt
  ``BOS ">>> "`` the verifier writes an arithmetic expression ended by a newline; the semantic
  check is ``low <= value <= high`` (``--checks``; default a range and an exact value). Methods: plain sampling, locally constrained grammar-only
  decoding (LCD), grammar-only SMC, sample-then-rerank, and SMC with the semantic critic. Each
  method runs ``--runs`` independent times with ``N`` particles; a run's output is its posterior
  (normalised weights; uniform for the unweighted samplers; a run whose weights are all zero
  outputs nothing and counts as a failure). Reported: fraction of outputs that parse (an
  ``ast``-based checker independent of the grammar DFA), fraction that satisfy the check, mean
  LM log-probability ``log p(x newline | prompt)`` of the outputs, particle tokens/s. The critic
  SMC is repeated for each twist strength in ``--betas`` (traced: one compilation per method).
* ``target_only`` / ``draft_only`` / ``cascade`` (speculative decoding and each cascade rule of
  :mod:`jaxlab.decoding.speculative` with drafter -> verifier) over prompts cut from validation
  documents: acceptance rate, mean accepted length, verifier calls per token, tokens/s and the
  speed-up against target-only decoding (interleaved timing), mean log-likelihood per generated
  token under the verifier, and teacher-forced quality of the rule's per-position target
  ``pi = delta(q, p)`` on held-out validation windows: next-byte accuracy of ``argmax pi``,
  ``-log pi(next byte)`` in bits/byte and the expected rejection rate ``E TV(q, pi)`` (the
  deferral cost; ``lossy`` has no closed-form ``pi`` and reports null there).

Usage: ``nice -n 5 python -m benchmarks.bench_decoding_lm [--quick] [--run-root DIR]``.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.harness import emit, timed
from jaxlab.commands.generate import decoder_lm
from jaxlab.core import loop
from jaxlab.core import recipe as recipe_lib
from jaxlab.core.tracking import read_metrics
from jaxlab.decoding import arithmetic, generate, sampling, speculative
from jaxlab.decoding.sampling import SamplingParams
from jaxlab.lm.data import load_corpus, token_streams
from jaxlab.lm.model import Decoder
from jaxlab.lm.tokenizer import BOS_ID, EOS_ID, VOCAB_SIZE

ROOT = Path(__file__).resolve().parent

MODELS = {
    # name: (lm-tiny preset, overrides); the drafter differs from the verifier only in width.
    "full": {
        "verifier": ("cpu", ["loop.total_steps=800", "loop.progress=false"]),
        "drafter": (
            "cpu",
            [
                "loop.total_steps=800",
                "loop.progress=false",
                "model.d_model=32",
                "model.n_heads=2",
                "model.head_dim=16",
                "model.d_ff=64",
            ],
        ),
    },
    "quick": {
        "verifier": (
            "tiny",
            [
                "loop.total_steps=20",
                "loop.steps_per_call=10",
                "model.max_len=64",
                "model.d_model=48",
            ],
        ),
        "drafter": (
            "tiny",
            [
                "loop.total_steps=20",
                "loop.steps_per_call=10",
                "model.max_len=64",
                "model.d_model=16",
                "model.n_layers=1",
            ],
        ),
    },
}

CASCADE_GRID = {
    "speed": [0.0],
    "lossy": [0.3, 0.7],
    "chow": [0.2, 0.5, 0.8],
    "diff": [-0.2, 0.0, 0.2],
    "opt": [0.0, 0.5, 2.0],
    "token_v1": [-0.1, 0.1],
    "token_v2": [0.0, 0.2],
    "token_v3": [0.2, 0.6],
}


def train_model(name: str, preset: str, overrides: list[str], run_dir: Path):
    """Trains (or restores a finished run of) lm-tiny; returns (model, params, record)."""
    r = recipe_lib.get("lm-tiny")
    cfg = r.config(preset, overrides)
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr):
        result = loop.run(r, cfg, run_dir)
    seconds = time.perf_counter() - t0
    val = result.eval_metrics.get("val_bits_per_byte") if result.eval_metrics else None
    if val is None:
        val = _last_eval(run_dir)
    m = cfg.model
    record = {
        "what": "train",
        "model": name,
        "size": {"d_model": m.d_model, "n_layers": m.n_layers, "d_ff": m.d_ff},
        "steps": cfg.loop.total_steps,
        "time_s": round(seconds, 1),
        "val_bits_per_byte": None if val is None else round(float(val), 4),
        "run_dir": str(run_dir),
    }
    return Decoder(cfg.model), result.state.params, record


def _last_eval(run_dir: Path) -> float | None:
    value = None
    for row in read_metrics(run_dir):
        value = row.get("eval/val_bits_per_byte", value)
    return value


def token_log_probs(lm, params, tokens):
    """``[B, L-1]`` log p(tokens[:, t+1] | tokens[:, :t+1]) from one cached-model pass."""
    batch, length = tokens.shape
    state = lm.init_state(params, batch, length)
    logits, _ = lm.apply(params, state, tokens, jnp.zeros(batch, jnp.int32))
    logp = jax.nn.log_softmax(logits[:, :-1].astype(jnp.float32), axis=-1)
    return jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1)[..., 0]


# ----------------------------------------------------------------------------------------------
# (a) arithmetic expressions


def expression_value(text: str, max_depth: int, max_digits: int) -> int | None:
    """Value of ``text`` if it is an expression of the task's language, else ``None``
    (Python's ``ast`` parser plus checks of the node types, digits and nesting)."""
    if not text or set(text) - set("0123456789+-()"):
        return None
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        return None
    depth = 0
    for char in text:
        depth += (char == "(") - (char == ")")
        if depth > max_depth:
            return None

    def ok(node) -> bool:
        if isinstance(node, ast.BinOp):
            return isinstance(node.op, (ast.Add, ast.Sub)) and ok(node.left) and ok(node.right)
        return isinstance(node, ast.Constant) and type(node.value) is int

    if not ok(tree.body):
        return None
    numbers = "".join(c if c.isdigit() else " " for c in text).split()
    if any(len(n) > max_digits or (len(n) > 1 and n[0] == "0") for n in numbers):
        return None
    return int(eval(compile(tree, "<expr>", "eval")))  # noqa: S307 - checked AST


def summarize(out, args, task, n, method, target, seq_logp):
    """Posterior-weighted parse / semantic rates and LM log-probability over the runs."""
    low, high = target
    tokens = out.tokens.reshape(-1, task.max_tokens)
    lengths = out.lengths.reshape(-1)
    log_w = np.asarray(out.log_weights)
    parse, hit, lp, empty = [], [], [], 0
    for run in range(args.runs):
        finite = np.isfinite(log_w[run])
        if method in ("sample", "grammar_lcd"):
            weights = finite / max(finite.sum(), 1)
        elif finite.any():
            weights = np.exp(log_w[run] - log_w[run][finite].max()) * finite
            weights = weights / weights.sum()
        else:
            weights = np.zeros(n)
        if weights.sum() == 0:
            empty += 1
            parse.append(0.0)
            hit.append(0.0)
            continue
        values = []
        for i in range(n):
            row = run * n + i
            ln = int(lengths[row])
            ok = ln <= task.max_tokens and finite[i]
            text = bytes(int(t) for t in tokens[row, :ln] if t < 256).decode("latin-1")
            values.append(expression_value(text, task.max_depth, task.max_digits) if ok else None)
        parses = np.asarray([v is not None for v in values], float)
        hits = np.asarray([v is not None and low <= v <= high for v in values], float)
        parse.append(float(weights @ parses))
        hit.append(float(weights @ hits))
        lp.append(float(weights @ np.where(finite, seq_logp[run], 0.0)))
    return parse, hit, lp, empty


def bench_arithmetic(args, model, params) -> None:
    task = arithmetic.ExpressionTask(
        arithmetic.byte_token_strings(VOCAB_SIZE),
        terminator_id=ord("\n"),
        max_tokens=args.expr_tokens,
        max_depth=2,
        max_digits=2,
    )
    lm = decoder_lm(model)
    prompt = jnp.asarray([BOS_ID, *b">>> "], jnp.int32)
    keys = jax.random.split(jax.random.key(args.seed), args.runs)
    n = args.particles
    plen = prompt.shape[0]
    score = jax.jit(lambda p, t: token_log_probs(lm, p, t))
    checks = [tuple(int(v) for v in c.split(":")) for c in args.checks.split(",")]
    betas = [float(b) for b in args.betas.split(",")]
    for method in arithmetic.METHODS:
        fn = jax.jit(
            jax.vmap(
                lambda k, p, pots, method=method: arithmetic.run_method(
                    k, lm, p, prompt, pots, task=task, method=method, num_particles=n
                ),
                in_axes=(0, None, None),
            )
        )
        compile_s = None
        for low, high in checks:
            for beta in betas if method == "smc_critic" else betas[:1]:
                pots = arithmetic.build_potentials(task, low, high, beta=beta)
                if compile_s is None:
                    compile_s, seconds, out, compiled = timed(
                        fn, keys, params, pots, repeats=args.repeats
                    )
                else:
                    out = jax.block_until_ready(compiled(keys, params, pots))
                    seconds = float("inf")
                    for _ in range(args.repeats):
                        t0 = time.perf_counter()
                        out = jax.block_until_ready(compiled(keys, params, pots))
                        seconds = min(seconds, time.perf_counter() - t0)
                out = jax.device_get(out)
                tokens = out.tokens.reshape(-1, task.max_tokens)
                lengths = np.minimum(out.lengths.reshape(-1), task.max_tokens)
                full = np.zeros((tokens.shape[0], plen + task.max_tokens + 1), np.int32)
                full[:, :plen] = np.asarray(prompt)
                for r in range(tokens.shape[0]):
                    full[r, plen : plen + lengths[r]] = tokens[r, : lengths[r]]
                    full[r, plen + lengths[r]] = task.terminator_id
                logp = np.asarray(score(params, full))
                seq_logp = np.asarray(
                    [logp[r, plen - 1 : plen + lengths[r]].sum() for r in range(tokens.shape[0])]
                ).reshape(args.runs, n)
                parse, hit, lp, empty = summarize(out, args, task, n, method, (low, high), seq_logp)
                particle_tokens = int(np.sum(lengths + 1))
                weighted = method not in ("sample", "grammar_lcd")
                finite_ml = np.isfinite(out.log_ml)
                emit(
                    {
                        "what": f"arith_{method}",
                        "size": {"particles": n, "runs": args.runs, "max_tokens": task.max_tokens},
                        "check": f"{low} <= value <= {high}",
                        "beta": beta if method == "smc_critic" else None,
                        "compile_s": round(compile_s, 3),
                        "time_s": round(seconds, 4),
                        "rate": round(particle_tokens / seconds, 1),
                        "unit": "particle tokens/s",
                        "parse_rate": round(float(np.mean(parse)), 4),
                        "semantic_rate": round(float(np.mean(hit)), 4),
                        "mean_lm_logprob": round(float(np.mean(lp)), 3) if lp else None,
                        "empty_posterior_runs": empty,
                        "mean_log_ml": round(float(np.mean(out.log_ml[finite_ml])), 3)
                        if weighted and finite_ml.any()
                        else None,
                    }
                )


# ----------------------------------------------------------------------------------------------
# (b) cascades


def validation_data(prompt_len: int, new_tokens: int, count: int, window: int, windows: int):
    """Prompts (BOS + the first ``prompt_len - 1`` bytes of a random window inside a validation
    document) and teacher-forcing windows from the validation token stream."""
    tokens_val = token_streams(load_corpus(), split="document", val_fraction=0.05)[1]
    bounds = np.flatnonzero(tokens_val == BOS_ID)
    ends = np.concatenate([bounds[1:], [tokens_val.size]])
    rng = np.random.default_rng(0)
    prompts = []
    docs = [(s, e) for s, e in zip(bounds, ends, strict=True) if e - s > prompt_len + new_tokens]
    for i in rng.permutation(len(docs))[:count]:
        s, e = docs[i]
        off = rng.integers(s + 1, e - prompt_len - new_tokens)
        prompts.append(np.concatenate([[BOS_ID], tokens_val[off : off + prompt_len - 1]]))
    starts = rng.integers(0, tokens_val.size - window - 1, size=windows)
    held_out = np.stack([tokens_val[s : s + window + 1] for s in starts])
    return np.asarray(prompts, np.int32), held_out.astype(np.int32)


def bench_cascades(args, small, small_params, large, large_params) -> None:
    prompts, held_out = validation_data(
        args.prompt_len, args.new_tokens, args.prompts, args.window, args.windows
    )
    batch, prompt_len = prompts.shape
    max_len = prompt_len + args.new_tokens
    lengths = jnp.full((batch,), prompt_len, jnp.int32)
    prompts = jnp.asarray(prompts)
    draft_lm, target_lm = decoder_lm(small), decoder_lm(large)
    sp = SamplingParams(temperature=args.temperature)
    size = {"batch": batch, "prompt_len": prompt_len, "new_tokens": args.new_tokens}
    score = jax.jit(lambda p, t: token_log_probs(target_lm, p, t))
    stop = jnp.asarray([EOS_ID])

    def quality(tokens, lengths_out):
        logp = np.asarray(score(large_params, jnp.asarray(tokens)))
        pos = np.arange(1, tokens.shape[1])[None, :]
        mask = (pos >= prompt_len) & (pos < np.asarray(lengths_out)[:, None])
        return float((logp * mask).sum() / max(mask.sum(), 1)), int(mask.sum())

    base = {}
    for name, lm, params in (
        ("target_only", target_lm, large_params),
        ("draft_only", draft_lm, small_params),
    ):
        fn = jax.jit(
            lambda k, p, lm=lm: generate.generate(
                k, lm, p, prompts, lengths, max_len=max_len, sampling_params=sp, stop_tokens=stop
            )
        )
        compile_s, seconds, out, compiled = timed(
            fn, jax.random.key(1), params, repeats=args.repeats
        )
        ll, count = quality(out.tokens, out.lengths)
        base[name] = (compiled, params, seconds)
        emit(
            {
                "what": name,
                "size": size,
                "temperature": args.temperature,
                "compile_s": round(compile_s, 3),
                "time_s": round(seconds, 4),
                "rate": round(count / seconds, 1),
                "unit": "tokens/s",
                "target_calls_per_token": 1.0 if name == "target_only" else 0.0,
                "large_loglik_per_token": round(ll, 4),
            }
        )

    # teacher-forced quality of pi = delta(q, p) on held-out windows
    inputs, targets = jnp.asarray(held_out[:, :-1]), jnp.asarray(held_out[:, 1:])
    q_logits = jax.jit(small.apply)(small_params, inputs)
    p_logits = jax.jit(large.apply)(large_params, inputs)

    @jax.jit
    def teacher_forced(q_logits, p_logits, targets, rule):
        pi = speculative.target_from_logits(q_logits, p_logits, rule, sp)
        q = jnp.exp(sampling.processed_log_probs(q_logits, sp))
        pi_true = jnp.take_along_axis(pi, targets[..., None], axis=-1)[..., 0]
        return (
            jnp.mean(jnp.argmax(pi, -1) == targets),
            -jnp.mean(jnp.log(jnp.maximum(pi_true, 1e-30))) / jnp.log(2.0),
            jnp.mean(jnp.sum(jnp.maximum(q - pi, 0.0), -1)),
        )

    @jax.jit
    def spec(k, sparams, lparams, rule):
        return speculative.speculative_decode(
            k,
            draft_lm,
            target_lm,
            sparams,
            lparams,
            prompts,
            lengths,
            config=speculative.SpeculativeConfig(gamma=args.gamma, max_len=max_len),
            rule=rule,
            sampling_params=sp,
            stop_tokens=stop,
        )

    t_compiled, _, _ = base["target_only"]
    first = True
    for name, alphas in CASCADE_GRID.items():
        for alpha in alphas:
            rule = speculative.cascade_rule(name, alpha)
            spec_args = (jax.random.key(2), small_params, large_params, rule)
            if first:
                t0 = time.perf_counter()
                compiled = spec.lower(*spec_args).compile()
                compile_s = time.perf_counter() - t0
                first = False
            out = jax.block_until_ready(compiled(*spec_args))
            t, t_base = float("inf"), float("inf")
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                jax.block_until_ready(t_compiled(jax.random.key(1), large_params))
                t_base = min(t_base, time.perf_counter() - t0)
                t0 = time.perf_counter()
                jax.block_until_ready(compiled(*spec_args))
                t = min(t, time.perf_counter() - t0)
            ll, count = quality(out.tokens, out.lengths)
            stats = out.stats
            acc, bits, cost = (float(x) for x in teacher_forced(q_logits, p_logits, targets, rule))
            emit(
                {
                    "what": "cascade",
                    "rule": name,
                    "alpha": alpha,
                    "size": {**size, "gamma": args.gamma},
                    "temperature": args.temperature,
                    "compile_s": round(compile_s, 3),
                    "time_s": round(t, 4),
                    "rate": round(count / t, 1),
                    "unit": "tokens/s",
                    "target_only_time_s": round(t_base, 4),
                    "wall_speedup": round(t_base / t, 3),
                    "acceptance_rate": round(float(stats.acceptance_rate), 4),
                    "mean_accepted_length": round(float(stats.mean_accepted_length), 4),
                    "target_calls_per_token": round(1 / float(stats.tokens_per_target_call), 4),
                    "large_loglik_per_token": round(ll, 4),
                    "heldout_next_byte_acc": None if name == "lossy" else round(acc, 4),
                    "heldout_bits_per_byte": None if name == "lossy" else round(bits, 4),
                    "heldout_rejection_rate": None if name == "lossy" else round(cost, 4),
                }
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny models, few steps (< 3 min)")
    ap.add_argument("--run-root", default=str(ROOT / "runs" / "decoding_lm"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--checks", default="10:20,10:10", help="semantic checks LOW:HIGH, comma-separated"
    )
    ap.add_argument(
        "--betas", default="0.2,0.0,1.0", help="critic twist strengths (first: all methods)"
    )
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--gamma", type=int, default=4)
    args = ap.parse_args()
    mode = "quick" if args.quick else "full"
    if args.quick:
        args.runs, args.particles, args.expr_tokens, args.repeats = 4, 16, 12, 1
        args.prompt_len, args.new_tokens, args.prompts = 16, 16, 4
        args.window, args.windows = 32, 8
    else:
        args.runs, args.particles, args.expr_tokens, args.repeats = 20, 32, 16, 2
        args.prompt_len, args.new_tokens, args.prompts = 32, 48, 16
        args.window, args.windows = 128, 32
    run_root = Path(args.run_root)
    trained = {}
    for name in ("drafter", "verifier"):
        preset, overrides = MODELS[mode][name]
        model, params, record = train_model(name, preset, overrides, run_root / f"{mode}-{name}")
        emit(record)
        trained[name] = (model, params)
    bench_arithmetic(args, *trained["verifier"])
    bench_cascades(args, *trained["drafter"], *trained["verifier"])


if __name__ == "__main__":
    main()
