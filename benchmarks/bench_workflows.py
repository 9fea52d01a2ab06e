"""AFlow workflow search: throughput of workflow evaluation and the search ablations,
one JSON line per measurement.

* ``standin_eval``: workflow evaluations/s on the stand-in (validation split of 200 problems),
  compile time separate; ``model_share``: share of wall time inside operator calls (the rest is
  interpreter and scoring bookkeeping).
* ``experience``: the stand-in search with and without experience over ``--seeds`` seeds: the
  best validation score after 5, 10 and 20 rounds (mean over seeds) and the best workflow's test
  score.
* ``lm_eval``: the LM executor on a decoder (a random tiny one, or ``--lm-run-dir``): workflow
  evaluations/s, prompts per model call, output tokens/s, particle decoding steps/s,
  ``model_share`` (wall time inside the jit-compiled decoding calls) and ``operator_share``
  (inside operator calls, i.e. also prompt building and output parsing on the host).
* ``text``: a Hugging Face model (``--hf-dir``, default the tiny test fixture) as the text
  executor on the GSM8K sample (repeated to ``--text-problems`` problems) and as the optimizer:
  workflow evaluations/s and generated tokens/s with the prompts of an operator call batched
  (``batched``) and sent one at a time (``one_at_a_time``), and the optimizer's replies/s and
  tokens/s for ``--text-problems`` prompts batched and one at a time.
* ``constrained``: the LM optimizer's decoding on a random tiny byte decoder (no vocabulary
  gap: every byte is a token): replies/s, generated tokens/s and the fraction of replies that
  parse, for free sampling (``model_generator``) and for SMC under the workflow grammar
  (``constrained_generator``, ``--constrained-particles`` particles), the same prompts and
  token budget (``--constrained-max-new-tokens``).
* ``--train-lm DIR``: trains a small byte decoder on the executor's prompt formats
  (:func:`jaxlab.workflows.lm_executor.training_text` over word problems disjoint from the
  search's) with the ``lm-tiny`` recipe's pieces and the shared loop, saved as an ``lm-tiny``
  run, then runs the LM search on it (``lm_search``): initial vs best validation score.

Usage: ``python -m benchmarks.bench_workflows [--quick] [--seeds 8] [--train-lm runs/wf-lm]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.harness import emit
from jaxlab.workflows import interpreter, search, tasks
from jaxlab.workflows.optimizer import EditOptimizer
from jaxlab.workflows.program import Step, Workflow, initial_workflow
from jaxlab.workflows.standin import StandInExecutor

WORKFLOWS = {
    "generate": initial_workflow(),
    "ensemble5+review": Workflow(
        (
            Step.make("sc_ensemble", solver="generate", n=5, prompt="plain"),
            Step.make("review", prompt="plain"),
            Step.make("revise", prompt="plain"),
        )
    ),
    "programmer+format+test": Workflow(
        (
            Step.make("programmer", prompt="plain"),
            Step.make("format"),
            Step.make("test", max_loops=2),
        )
    ),
}


class _Timed:
    """Wraps an executor and accumulates the seconds spent inside its operator calls."""

    def __init__(self, inner):
        self.inner, self.seconds = inner, 0.0

    def __getattr__(self, name):
        fn = getattr(self.inner, name)

        def call(*a, **k):
            t = time.perf_counter()
            out = jax.block_until_ready(fn(*a, **k))
            self.seconds += time.perf_counter() - t
            return out

        return call


def bench_eval(label, executor, problems, seconds, **extra):
    for name, wf in WORKFLOWS.items():
        t = time.perf_counter()
        interpreter.evaluate(jax.random.key(0), wf, executor, problems, 1)
        compile_s = time.perf_counter() - t
        timed = _Timed(executor)
        stats0 = dict(getattr(executor, "stats", {}))
        n, t = 0, time.perf_counter()
        while time.perf_counter() - t < seconds or n < 2:
            interpreter.evaluate(jax.random.key(n + 1), wf, timed, problems, 1)
            n += 1
        wall = time.perf_counter() - t
        row = dict(
            what=label,
            workflow=name,
            problems=len(problems),
            compile_s=round(compile_s, 3),
            time=round(wall / n, 5),
            rate=round(n / wall, 3),
            unit="evaluations/s",
            model_share=round(timed.seconds / wall, 3),
            **extra,
        )
        if stats0:
            st = executor.stats
            calls = st["calls"] - stats0["calls"]
            row.update(
                prompts_per_call=round((st["prompts"] - stats0["prompts"]) / calls, 1),
                model_share=round((st["model_seconds"] - stats0["model_seconds"]) / wall, 3),
                operator_share=row["model_share"],
                tokens_per_s=round((st["tokens"] - stats0["tokens"]) / wall, 1),
                particle_steps_per_s=round(
                    (st["particle_steps"] - stats0["particle_steps"]) / wall, 1
                ),
            )
        emit(**row)


def bench_experience(val, test, seeds, rounds):
    for use in (True, False):
        best = {5: [], 10: [], 20: []}
        tests = []
        for seed in range(seeds):
            cfg = search.SearchConfig(seed=seed, max_rounds=rounds, check_convergence=False)
            st = search.run_search(
                initial_workflow(), StandInExecutor(), val, EditOptimizer(use_experience=use), cfg
            )
            scores = [r["score"] for r in st.rounds]
            for k in best:
                best[k].append(max(scores[:k]))
            b = st.best()
            tests.append(
                interpreter.evaluate(
                    jax.random.key(seed + 1000),
                    Workflow.from_json(b["workflow"]),
                    StandInExecutor(),
                    test,
                    3,
                ).mean
            )
        emit(
            what="experience",
            use_experience=use,
            seeds=seeds,
            **{f"best_val_at_{k}": round(float(np.mean(v)), 4) for k, v in best.items()},
            **{f"best_val_at_{k}_sd": round(float(np.std(v)), 4) for k, v in best.items()},
            best_test=round(float(np.mean(tests)), 4),
        )


def tiny_text_lm(seed=0):
    from jaxlab.commands.workflows import byte_text_lm
    from jaxlab.lm.model import Decoder, DecoderConfig
    from jaxlab.lm.tokenizer import VOCAB_SIZE

    cfg = DecoderConfig(
        d_model=32, n_layers=2, n_heads=2, head_dim=16, d_ff=64, max_len=256, vocab_size=VOCAB_SIZE
    )
    model = Decoder(cfg)
    return byte_text_lm(model, model.init(jax.random.key(seed), jnp.zeros((1, 4), jnp.int32)))


def train_lm(run_dir: Path, steps: int, max_terms: int):
    """An ``lm-tiny`` run trained on the executor's prompt formats (see module docstring): the
    recipe's own parts with the training data replaced, so the run opens as any lm-tiny run."""
    from jaxlab.core import loop
    from jaxlab.core import run as run_lib
    from jaxlab.lm import training
    from jaxlab.lm.data import ByteLMDataConfig, split_windows, train_dataset
    from jaxlab.lm.model import DecoderConfig
    from jaxlab.recipes import lm_tiny
    from jaxlab.workflows.lm_executor import training_text

    cfg = lm_tiny.LmTinyConfig(
        model=DecoderConfig(d_model=128, n_layers=2, n_heads=4, head_dim=32, d_ff=384, max_len=256),
        data=ByteLMDataConfig(seq_len=128, batch_size=32),
        optim=dataclasses.replace(training.OPTIM, warmup_steps=100),
        loop=loop.LoopConfig(
            total_steps=steps,
            steps_per_call=10,
            log_every=100,
            eval_every=steps,
            checkpoint_every=steps,
            progress=False,
        ),
    )
    rng = np.random.default_rng(12345)
    # seed disjoint from the search's problems
    probs = tasks.make_problems(12345, 20000, max_terms=max_terms)
    docs = [
        training_text(rng, q, e, int(a))
        for q, e, a in zip(probs.questions, probs.expressions, probs.answers, strict=True)
    ]
    train_w, _ = split_windows(cfg.data, docs)
    parts = run_lib.build(lm_tiny.RECIPE, cfg, jax.devices()[:1])
    parts = dataclasses.replace(
        parts,
        data=lambda: iter(train_dataset(train_w, batch_size=cfg.data.batch_size, seed=0)),
        evaluate=None,
    )
    t = time.perf_counter()
    result = loop.run(lm_tiny.RECIPE, cfg, run_dir, parts=parts)
    emit(
        what="train_lm",
        steps=result.step,
        loss=round(float(result.metrics.get("loss", np.nan)), 4),
        time=round(time.perf_counter() - t, 1),
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument(
        "--parts",
        default="standin,experience,lm",
        help="comma-separated subset (also text, constrained)",
    )
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--lm-run-dir", default=None)
    ap.add_argument("--train-lm", default=None, help="train an arithmetic LM into this run dir")
    ap.add_argument("--train-steps", type=int, default=1500)
    ap.add_argument("--lm-problems", type=int, default=60)
    ap.add_argument("--lm-rounds", type=int, default=10)
    ap.add_argument("--max-terms", type=int, default=2, help="LM task: numbers per problem")
    ap.add_argument("--hf-dir", default=None, help="text part: a Hugging Face model directory")
    ap.add_argument("--text-problems", type=int, default=16)
    ap.add_argument("--text-max-new-tokens", type=int, default=16)
    ap.add_argument("--constrained-max-new-tokens", type=int, default=224)
    ap.add_argument("--constrained-particles", type=int, default=4)
    args = ap.parse_args()
    val, test = tasks.split(tasks.make_problems(0, 1000), 0)
    seeds = 2 if args.quick else args.seeds
    parts = set(args.parts.split(","))
    if "standin" in parts:
        bench_standin(val, 0.5 if args.quick else args.seconds)
    if "experience" in parts:
        bench_experience(val, test, seeds, 20)
    if "lm" in parts:
        lm_val, _ = tasks.split(tasks.make_problems(0, 1000, max_terms=args.max_terms), 0)
        bench_lm(args, lm_val)
    if "text" in parts:
        bench_text(args, 0.5 if args.quick else args.seconds)
    if "constrained" in parts:
        bench_constrained(args, 0.5 if args.quick else args.seconds)


def bench_constrained(args, seconds):
    """The ``constrained`` part (module docstring)."""
    from jaxlab.commands.workflows import constrained_generator, model_generator
    from jaxlab.lm.model import Decoder, DecoderConfig
    from jaxlab.workflows.parse import ParseError, parse_workflow

    new = args.constrained_max_new_tokens
    cfg = DecoderConfig(
        d_model=32, n_layers=2, n_heads=2, head_dim=16, d_ff=64, max_len=2 * new + 64
    )
    model = Decoder(cfg)
    params = model.init(jax.random.key(0), jnp.zeros((1, 4), jnp.int32))
    prompt = "Improve the workflow below.\n<graph>\ndef workflow(problem):\n"
    t = time.perf_counter()
    gens = {
        "free": model_generator(model, params, max_new_tokens=new),
        "constrained": constrained_generator(
            model, params, max_new_tokens=new, num_particles=args.constrained_particles
        ),
    }
    grammar_s = time.perf_counter() - t
    for mode, gen in gens.items():
        seeds, out = iter(range(10**6)), {"tokens": 0, "parsed": 0, "replies": 0}

        def ask(gen=gen, seeds=seeds, out=out):
            text, usage = gen(prompt, next(seeds))
            out["tokens"] += usage["generated_tokens"]
            out["replies"] += 1
            try:
                parse_workflow(text)
                out["parsed"] += 1
            except ParseError:
                pass

        compile_s, per, rate = _timed_rate(ask, seconds)
        emit(
            what="optimizer_decoding",
            mode=mode,
            particles=args.constrained_particles if mode == "constrained" else 1,
            max_new_tokens=new,
            grammar_build_s=round(grammar_s, 3) if mode == "constrained" else 0.0,
            compile_s=round(compile_s, 3),
            time=round(per, 5),
            rate=round(rate, 3),
            unit="replies/s",
            generated_tokens_per_s=round(out["tokens"] / out["replies"] * rate, 1),
            parsed=f"{out['parsed']}/{out['replies']}",
        )


def _timed_rate(fn, seconds):
    """``fn()`` once untimed (compiles), then until ``seconds`` pass (at least twice):
    ``(compile_s, seconds per call, calls/s)``."""
    t = time.perf_counter()
    fn()
    compile_s = time.perf_counter() - t
    n, t = 0, time.perf_counter()
    while time.perf_counter() - t < seconds or n < 2:
        fn()
        n += 1
    wall = time.perf_counter() - t
    return compile_s, wall / n, n / wall


def bench_text(args, seconds):
    """The ``text`` part (module docstring)."""
    from jaxlab.commands.workflows import batch_generator
    from jaxlab.lm.hub import load_hf, load_tokenizer
    from jaxlab.lm.model import Decoder
    from jaxlab.workflows import formats
    from jaxlab.workflows.text_executor import TextExecutor

    hf = Path(args.hf_dir or Path(__file__).parents[1] / "tests/lm/fixtures/tiny_llama")
    loaded = load_hf(hf)
    tok = load_tokenizer(hf, model_vocab_size=loaded.cfg.vocab_size)
    model, n = Decoder(loaded.cfg), args.text_problems
    task = formats.load_task("gsm8k", formats.sample_path("gsm8k"))
    items = [task.items[i % len(task)] for i in range(n)]
    task = formats.TaskSet("gsm8k", tuple(items), tuple(it["question"] for it in items))
    new = args.text_max_new_tokens
    for mode, bucket in (("batched", 8), ("one_at_a_time", 1)):
        gen = batch_generator(model, loaded.params, tok, max_new_tokens=new, batch_bucket=bucket)
        if bucket == 1:
            batched = gen

            def gen(prompts, seed, batched=batched):
                outs = [batched([p], seed + i) for i, p in enumerate(prompts)]
                usage = {k: sum(o[1][k] for o in outs) for k in outs[0][1]}
                return [o[0][0] for o in outs], usage

        ex = TextExecutor(gen, task)
        problems = ex.problems()
        keys = iter(range(10**6))
        before = dict(ex.stats)
        compile_s, per, rate = _timed_rate(
            lambda ex=ex, problems=problems, keys=keys: interpreter.evaluate(
                jax.random.key(next(keys)), initial_workflow(), ex, problems, 1
            ),
            seconds,
        )
        tokens = ex.stats["tokens"] - before["tokens"]
        evals = ex.stats["calls"] - before["calls"]
        emit(
            what="text_executor_eval",
            mode=mode,
            model=hf.name,
            problems=n,
            max_new_tokens=new,
            compile_s=round(compile_s, 3),
            time=round(per, 5),
            rate=round(rate, 3),
            unit="evaluations/s",
            generated_tokens_per_s=round(tokens / evals * rate, 1),
        )
        prompts = [f"Improve this workflow {i}.\n<graph>" for i in range(n)]
        seeds = iter(range(10**6))
        out = {}

        def ask(gen=gen, prompts=prompts, seeds=seeds, out=out):
            out["usage"] = gen(prompts, next(seeds))[1]

        compile_s, per, rate = _timed_rate(ask, seconds)
        emit(
            what="text_optimizer_replies",
            mode=mode,
            model=hf.name,
            prompts=n,
            max_new_tokens=new,
            compile_s=round(compile_s, 3),
            time=round(per, 5),
            rate=round(rate * n, 3),
            unit="replies/s",
            generated_tokens_per_s=round(out["usage"]["generated_tokens"] * rate, 1),
        )


def bench_standin(val, seconds):
    bench_eval("standin_eval", StandInExecutor(), val, seconds)
    t = time.perf_counter()
    st = search.run_search(
        initial_workflow(),
        StandInExecutor(),
        val,
        EditOptimizer(),
        search.SearchConfig(seed=0, check_convergence=False),
    )
    emit(
        what="standin_search",
        rounds=len(st.rounds),
        time=round(time.perf_counter() - t, 3),
        initial_val=round(st.rounds[0]["score"], 4),
        best_val=round(st.best()["score"], 4),
    )


def bench_lm(args, val):
    from jaxlab.workflows.lm_executor import LMExecutor

    if args.train_lm:
        train_lm(
            Path(args.train_lm), args.train_steps, args.max_terms
        )  # resumes if the run already exists
        args.lm_run_dir = args.train_lm
    if args.lm_run_dir:
        from jaxlab.commands.workflows import load_text_lm

        text_lm, label = load_text_lm("lm-tiny", args.lm_run_dir), "lm_eval_trained"
    else:
        text_lm, label = tiny_text_lm(), "lm_eval_random_tiny"
    lm_val = val.take(np.arange(min(args.lm_problems, len(val))))
    ex = LMExecutor(text_lm, num_particles=4)
    bench_eval(label, ex, lm_val, 0.5 if args.quick else args.seconds, particles=4)
    if args.lm_run_dir:
        for solver in ("generate", "programmer"):
            wf = Workflow((Step.make(solver, prompt="plain"),))
            emit(
                what="lm_solver_accuracy",
                solver=solver,
                val=interpreter.evaluate(jax.random.key(7), wf, ex, lm_val, 2).mean,
            )
        t = time.perf_counter()
        st = search.run_search(
            initial_workflow(),
            ex,
            lm_val,
            EditOptimizer(),
            search.SearchConfig(
                seed=0, max_rounds=args.lm_rounds, validation_runs=1, check_convergence=False
            ),
        )
        b = st.best()
        emit(
            what="lm_search",
            rounds=len(st.rounds),
            problems=len(lm_val),
            time=round(time.perf_counter() - t, 1),
            initial_val=round(st.rounds[0]["score"], 4),
            best_val=round(b["score"], 4),
            best_workflow=Workflow.from_json(b["workflow"]).to_code(),
        )


if __name__ == "__main__":
    main()
