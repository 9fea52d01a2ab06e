"""Arithmetic-expression task: grammar vs an independent parser, semantic critic vs Python's eval,
length-bounded grammar potential contract, and SMC over a randomly initialised jaxlab decoder."""

from __future__ import annotations

import dataclasses
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.commands.generate import decoder_lm
from jaxlab.decoding import arithmetic, tabulated
from jaxlab.decoding.grammar import compile_grammar
from jaxlab.decoding.length_bound import bound_length, distance_to_accept
from jaxlab.decoding.potentials import BoolDFAPotential, regex_potential
from jaxlab.lm.model import Decoder, DecoderConfig
from jaxlab.lm.tokenizer import BOS_ID, VOCAB_SIZE
from tests.decoding.decoding_toys import chi_square_pvalue
from tests.typecheck import unchecked

MAX_DEPTH, MAX_DIGITS, MAX_TOKENS = 2, 2, 12
TERMINATOR = ord("\n")


class ParseError(Exception):
    pass


def reference_value(text: str, max_depth: int = MAX_DEPTH, max_digits: int = MAX_DIGITS):
    """Independent recursive-descent parser: the value of ``text`` or ``None`` if it is not an
    expression of the bounded grammar (no leading zeros, nesting <= max_depth)."""
    pos = 0

    def number() -> int:
        nonlocal pos
        start = pos
        while pos < len(text) and text[pos].isdigit():
            pos += 1
        digits = text[start:pos]
        if not digits or len(digits) > max_digits or (len(digits) > 1 and digits[0] == "0"):
            raise ParseError(text)
        return int(digits)

    def term(depth: int) -> int:
        nonlocal pos
        if pos < len(text) and text[pos] == "(":
            if depth == 0:
                raise ParseError(text)
            pos += 1
            value = expr(depth - 1)
            if pos >= len(text) or text[pos] != ")":
                raise ParseError(text)
            pos += 1
            return value
        return number()

    def expr(depth: int) -> int:
        nonlocal pos
        value = term(depth)
        while pos < len(text) and text[pos] in "+-":
            op = text[pos]
            pos += 1
            rhs = term(depth)
            value = value + rhs if op == "+" else value - rhs
        return value

    try:
        value = expr(max_depth)
    except ParseError:
        return None
    return value if pos == len(text) else None


@pytest.fixture(scope="module")
def task():
    return arithmetic.ExpressionTask(
        arithmetic.byte_token_strings(VOCAB_SIZE),
        terminator_id=TERMINATOR,
        max_tokens=MAX_TOKENS,
        max_depth=MAX_DEPTH,
        max_digits=MAX_DIGITS,
    )


@pytest.fixture(scope="module")
def enumerated():
    """All strings of length 1-6 over a small alphabet and the parser's verdict on each."""
    strings = [
        "".join(chars) for n in range(1, 7) for chars in itertools.product("019+-()", repeat=n)
    ]
    return strings, [reference_value(s) for s in strings]


def random_expression(rng: np.random.Generator, depth: int) -> str:
    terms = []
    for _ in range(rng.integers(1, 4)):
        if depth > 0 and rng.random() < 0.3:
            terms.append("(" + random_expression(rng, depth - 1) + ")")
        else:
            terms.append(str(rng.integers(0, 10 ** rng.integers(1, MAX_DIGITS + 1))))
    ops = rng.choice(["+", "-"], size=len(terms) - 1)
    return terms[0] + "".join(o + t for o, t in zip(ops, terms[1:], strict=True))


def encode(task, strings, width):
    index = {s: i for i, s in enumerate(task.condition_strings)}
    tokens = np.zeros((len(strings), width), np.int32)
    for r, s in enumerate(strings):
        tokens[r, : len(s)] = [index[c] for c in s]
    return jnp.asarray(tokens), jnp.asarray([len(s) for s in strings], jnp.int32)


def test_compiled_grammar_equals_the_reference_parser(enumerated):
    strings, values = enumerated
    grammar = arithmetic.expression_grammar(MAX_DEPTH, max_digits=MAX_DIGITS)
    dfa = compile_grammar(grammar, max_stack=arithmetic.required_stack(MAX_DEPTH, MAX_DIGITS))
    accepted = [dfa.accepts(s) for s in strings]
    assert accepted == [v is not None for v in values]
    assert 100 < sum(accepted) < len(strings) // 10
    deeper = ["((" + "(1)" + "))", "1+(2-(3+(4)))", "010", "123", "1+", "()", "(1)(2)"]
    assert [dfa.accepts(s) for s in deeper] == [reference_value(s) is not None for s in deeper]
    rng = np.random.default_rng(0)
    for s in (random_expression(rng, MAX_DEPTH) for _ in range(200)):
        assert dfa.accepts(s) and reference_value(s) == eval(s)  # noqa: S307


def test_token_condition_accepts_exactly_parsable_strings_within_the_length_limit(task):
    condition = arithmetic.grammar_condition(task)
    rng = np.random.default_rng(1)
    alphabet = list("0123456789+-()") + ["x"]
    strings = ["".join(rng.choice(alphabet, size=rng.integers(1, 10))) for _ in range(400)]
    strings += [random_expression(rng, MAX_DEPTH) for _ in range(200)]
    strings = [s.replace("x", "a") for s in strings if len(s) <= 24]
    tokens, lengths = encode(task, strings, 24)
    complete = jax.jit(jax.vmap(condition.complete))(tokens, lengths)
    expected = [reference_value(s) is not None and len(s) <= MAX_TOKENS for s in strings]
    np.testing.assert_array_equal(np.asarray(complete) == 0.0, expected)
    assert 150 < sum(expected) < len(strings)


def test_length_bound_prefix_means_a_completion_fits(task):
    grammar = arithmetic.expression_grammar(MAX_DEPTH, max_digits=MAX_DIGITS)
    dfa = compile_grammar(grammar, max_stack=arithmetic.required_stack(MAX_DEPTH, MAX_DIGITS))
    unbounded = BoolDFAPotential.from_char_dfa(dfa, task.condition_strings)
    cases = [("((1", 5, True), ("((1", 4, False), ("1+", 3, True), ("1+", 2, False)]
    for prefix, budget, live in cases:
        tokens, lengths = encode(task, [prefix], 8)
        assert float(unbounded.prefix(tokens[0], lengths[0])) == 0.0
        bounded = bound_length(unbounded, budget)
        assert (float(bounded.prefix(tokens[0], lengths[0])) == 0.0) == live, (prefix, budget)
    table = np.array([[1, 0], [2, 1], [2, 2]])
    np.testing.assert_array_equal(
        distance_to_accept(table, np.array([False, False, True])), [2, 1, 0]
    )


def test_condition_and_critic_satisfy_the_autoregressive_factorisation(task):
    pots = arithmetic.build_potentials(task, 3, 5, beta=0.7)
    strings = ["1+(2-3)", "12-(3", "9+", "40-1", "(1"]
    tokens, lengths = encode(task, strings, MAX_TOKENS)
    for pot in (pots.condition, pots.critic):

        def factorised(tokens, length, pot=pot):
            def body(state, inputs):
                token, position = inputs
                w = pot.token_logw(state, token)
                nxt = pot.step(state, token)
                keep = position < length
                state = jax.tree.map(lambda a, b: jnp.where(keep, a, b), nxt, state)
                return state, jnp.where(keep, w, 0.0)

            state, ws = jax.lax.scan(
                body, pot.initial_state(), (tokens, jnp.arange(tokens.shape[0]))
            )
            return jnp.sum(ws) + pot.token_logw(state, jnp.int32(pot.vocab_size))

        lhs = jax.jit(jax.vmap(pot.complete))(tokens, lengths) - pot.prefix(tokens[0], 0)
        rhs = jax.jit(jax.vmap(factorised))(tokens, lengths)
        np.testing.assert_allclose(np.asarray(rhs), np.asarray(lhs), atol=1e-5)
    # the condition's table-based next-token weights equal stepping every token
    state = pots.condition.step(pots.condition.initial_state(), tokens[0, 0])
    fast = pots.condition.logw_next(state)
    slow = super(type(pots.condition), pots.condition).logw_next(state)
    np.testing.assert_array_equal(np.asarray(fast), np.asarray(slow))
    assert 0 < int(jnp.sum(fast == 0.0)) < 20


def test_semantic_critic_agrees_with_python_eval(task, enumerated):
    strings, values = enumerated
    valid = [s for s, v in zip(strings, values, strict=True) if v is not None]
    rng = np.random.default_rng(2)
    valid += [s for s in (random_expression(rng, MAX_DEPTH) for _ in range(300)) if len(s) <= 16]
    codes = jnp.asarray(arithmetic.char_codes(task.condition_strings))
    tokens, lengths = encode(task, valid, 16)

    @jax.jit
    @jax.vmap
    def value(tokens, length):
        state = arithmetic.evaluate_tokens(codes, tokens, length, MAX_DEPTH)
        return arithmetic.closed_value(state), state.ok, state.depth

    got, ok, depth = value(tokens, lengths)
    want = np.asarray([eval(s) for s in valid])  # noqa: S307
    np.testing.assert_array_equal(np.asarray(got), want)
    assert bool(jnp.all(ok)) and bool(jnp.all(depth == 0))
    # complete(x) = 1[eval(x) in [low, high]] on the grammar's strings
    critic = arithmetic.semantic_critic(dataclasses.replace(task, max_tokens=16), 0, 9)
    complete = jax.jit(jax.vmap(critic.complete))(tokens, lengths)
    np.testing.assert_array_equal(np.asarray(complete) == 0.0, (want >= 0) & (want <= 9))
    # prefixes ending in a digit: the closed value is eval with the open parentheses closed
    prefixes = ["1+(2-(3", "10-(4", "(7+8", "5-(1-(2+3"]
    closes = [p + ")" * (p.count("(") - p.count(")")) for p in prefixes]
    tokens, lengths = encode(task, prefixes, 16)
    got, _, _ = value(tokens, lengths)
    np.testing.assert_array_equal(np.asarray(got), [eval(c) for c in closes])  # noqa: S307


@pytest.fixture(scope="module")
def decoder_runs(task):
    """LCD and critic-SMC samples from a random 1-layer decoder, 8 seeds x 32 particles."""
    cfg = DecoderConfig(d_model=16, n_layers=1, n_heads=2, head_dim=8, d_ff=32, max_len=24)
    model = Decoder(cfg)
    params = model.init(jax.random.key(0), jnp.zeros((1, 4), jnp.int32))
    lm = decoder_lm(model)
    prompt = jnp.asarray([BOS_ID, *b">>> "], jnp.int32)
    pots = arithmetic.build_potentials(task, 7, 7, beta=0.5)
    keys = jax.random.split(jax.random.key(1), 8)
    out = {}
    for method in ("grammar_lcd", "smc_critic"):
        run = jax.jit(
            jax.vmap(
                lambda k, method=method: arithmetic.run_method(
                    k, lm, params, prompt, pots, task=task, method=method, num_particles=32
                )
            )
        )
        out[method] = jax.device_get(run(keys))
    return out


def texts(result, seed):
    return [
        bytes(int(t) for t in row[:n]).decode("latin-1")
        for row, n in zip(result.tokens[seed], result.lengths[seed], strict=True)
    ]


def test_every_constrained_sample_parses(decoder_runs):
    # LCD never gets stuck (length-bounded grammar); critic-SMC weights are -inf only where the
    # semantic check failed, syntax holds for every particle of both.
    assert np.all(np.isfinite(decoder_runs["grammar_lcd"].log_weights))
    for method, result in decoder_runs.items():
        for seed in range(result.tokens.shape[0]):
            for text in texts(result, seed):
                assert reference_value(text) is not None, (method, text)
                assert len(text) <= MAX_TOKENS


def test_semantic_critic_raises_the_fraction_satisfying_the_check(decoder_runs):
    lcd = decoder_runs["grammar_lcd"]
    smc = decoder_runs["smc_critic"]
    lcd_rate = np.mean([reference_value(t) == 7 for seed in range(8) for t in texts(lcd, seed)])
    smc_rates = []
    for seed in range(8):
        weights = np.asarray(jax.nn.softmax(jnp.asarray(smc.log_weights[seed])))
        hits = np.asarray([reference_value(t) == 7 for t in texts(smc, seed)])
        smc_rates.append(float(np.sum(weights * hits)) if np.any(hits) else 0.0)
    assert lcd_rate < 0.2
    assert np.mean(smc_rates) > lcd_rate + 0.5


def test_validation(task):
    with pytest.raises(ValueError, match="terminator_id"):
        arithmetic.ExpressionTask(("a", "b"), terminator_id=2)
    with pytest.raises(ValueError, match="operators"):
        arithmetic.ExpressionTask(("a", "b"), terminator_id=0, operators="*")
    with pytest.raises(ValueError, match="method"):
        unchecked(arithmetic.run_method)(  # its own validation (None for the unused parts)
            jax.random.key(0),
            None,
            None,
            jnp.zeros(1, jnp.int32),
            None,
            task=task,
            method="beam",
            num_particles=2,
        )
    with pytest.raises(ValueError, match="max_tokens"):
        bound_length(regex_potential("1", ("1",)), -1)


# Exact enumeration for run_method: a 6-token LM whose terminator sits in the middle of the
# vocabulary (so the renumbering to "EOS last" and back is exercised), depth 1, one digit, "+".
ENUM_TOKENS = ("1", "2", "\n", "+", "(", ")")
ENUM_TERMINATOR = 2
ENUM_MAX_TOKENS = 4
ENUM_LOW, ENUM_HIGH = 2, 3


@pytest.fixture(scope="module")
def enum_problem():
    """Task, bigram table and the exact law of every sequence of <= 4 non-terminator tokens:
    ``p(x) = p_LM(x · terminator | terminator)`` and the indicator of each potential."""
    task = arithmetic.ExpressionTask(
        ENUM_TOKENS,
        terminator_id=ENUM_TERMINATOR,
        max_tokens=ENUM_MAX_TOKENS,
        max_depth=1,
        max_digits=1,
        operators="+",
    )
    # random logits plus a bias towards well-formed continuations (rows: previous token), so
    # that the grammar (Z ~ 0.2) and the critic (Z ~ 0.1) keep enough plain LM samples
    bias = np.zeros((6, 6))
    bias[ENUM_TERMINATOR, [0, 1, 4]] = 2.0  # BOS -> digit or "("
    bias[[0, 1], 3], bias[[0, 1], ENUM_TERMINATOR], bias[[0, 1], 5] = 2.0, 1.5, 1.0
    bias[3, [0, 1, 4]] = bias[4, [0, 1]] = bias[5, [ENUM_TERMINATOR, 3]] = 2.0
    noise = tabulated.random_table(jax.random.key(1, impl="rbg"), (6, 6), scale=0.5)
    table = jnp.asarray(np.asarray(noise) + bias, jnp.float32)
    probs = np.exp(np.asarray(table, np.float64))
    probs /= probs.sum(axis=1, keepdims=True)
    symbols = [i for i in range(6) if i != ENUM_TERMINATOR]
    seqs, p_lm, grammar, semantic = [], [], [], []
    for n in range(ENUM_MAX_TOKENS + 1):
        for seq in itertools.product(symbols, repeat=n):
            p, prev = 1.0, ENUM_TERMINATOR
            for tok in (*seq, ENUM_TERMINATOR):
                p, prev = p * probs[prev, tok], tok
            value = reference_value("".join(ENUM_TOKENS[t] for t in seq), 1, 1)
            seqs.append(seq)
            p_lm.append(p)
            grammar.append(value is not None)
            semantic.append(value is not None and ENUM_LOW <= value <= ENUM_HIGH)
    exact = {
        "index": {s: i for i, s in enumerate(seqs)},
        "p_lm": np.asarray(p_lm),
        "grammar": np.asarray(grammar),
        "semantic": np.asarray(semantic),
    }
    pots = arithmetic.build_potentials(task, ENUM_LOW, ENUM_HIGH, beta=0.0)
    return task, table, pots, exact


def run_enum(enum_problem, method, seeds, particles):
    task, table, pots, _ = enum_problem
    lm = tabulated.bigram_lm(6)
    prompt = jnp.asarray([ENUM_TERMINATOR], jnp.int32)

    @jax.jit
    def run(keys, table, pots):
        return jax.vmap(
            lambda k: arithmetic.run_method(
                k, lm, table, prompt, pots, task=task, method=method, num_particles=particles
            )
        )(keys)

    keys = jax.random.split(jax.random.key(11, impl="rbg"), seeds)
    return jax.device_get(run(keys, table, pots))


def pooled_measure(result, index):
    """``Σ_seeds Ẑ_s Σ_i W_si δ_{x_si}`` over the enumeration, normalised, and the ``Ẑ_s``:
    the unnormalised particle measure of SMC/IS is unbiased for ``Z · g``, so pooling seeds by
    their evidence converges to ``g`` for any fixed ``N``."""
    measure = np.zeros(len(index))
    log_w = np.asarray(result.log_weights, np.float64)
    n = log_w.shape[1]
    for s in range(log_w.shape[0]):
        for i in range(n):
            if np.isfinite(log_w[s, i]):
                seq = tuple(int(t) for t in result.tokens[s, i, : result.lengths[s, i]])
                measure[index[seq]] += np.exp(log_w[s, i]) / n
    return measure / measure.sum(), np.exp(np.asarray(result.log_ml, np.float64))


def assert_evidence(z_hat, z):
    stderr = z_hat.std() / np.sqrt(z_hat.size)
    assert abs(z_hat.mean() - z) < 4 * stderr + 1e-3 * z, (z_hat.mean(), z, stderr)


def tv(a, b):
    return 0.5 * float(np.abs(a / a.sum() - b / b.sum()).sum())


def test_run_method_sample_draws_from_the_truncated_lm(enum_problem):
    _, _, _, exact = enum_problem
    result = run_enum(enum_problem, "sample", seeds=8, particles=500)
    ended = np.isfinite(result.log_weights)
    assert np.all(result.log_weights[ended] == 0.0)  # unweighted
    counts = np.zeros(len(exact["index"]))
    for s, i in zip(*np.nonzero(ended), strict=True):
        counts[
            exact["index"][tuple(int(t) for t in result.tokens[s, i, : result.lengths[s, i]])]
        ] += 1
    # plain LM sampling: no grammar, only the length limit (particles cut by it get -inf)
    z_trunc = exact["p_lm"].sum()
    assert 0.05 < 1 - z_trunc < 0.95
    assert chi_square_pvalue(counts, exact["p_lm"]) > 1e-3
    assert abs(ended.mean() - z_trunc) < 4 * np.sqrt(z_trunc * (1 - z_trunc) / ended.size)
    assert counts[~exact["grammar"]].sum() > 0.3 * counts.sum()  # unconstrained: mostly junk


def test_run_method_grammar_smc_targets_the_grammar_posterior(enum_problem):
    _, _, _, exact = enum_problem
    result = run_enum(enum_problem, "grammar_smc", seeds=256, particles=16)
    target = exact["p_lm"] * exact["grammar"]
    measure, z_hat = pooled_measure(result, exact["index"])
    assert_evidence(z_hat, target.sum())
    assert tv(measure, target) < 0.05, tv(measure, target)
    # the critic is not part of this target: semantic failures keep their mass
    assert measure[exact["grammar"] & ~exact["semantic"]].sum() > 0.3
    assert np.all(measure[~exact["grammar"]] == 0.0)


def test_run_method_rerank_weights_lm_samples_by_both_potentials(enum_problem):
    _, _, _, exact = enum_problem
    result = run_enum(enum_problem, "rerank", seeds=8, particles=500)
    target = exact["p_lm"] * exact["semantic"]
    z_hat = np.exp(np.asarray(result.log_ml, np.float64))
    assert_evidence(z_hat, target.sum())
    # LM samples weighted by Phi_eff · Phi_exp in {0, 1}: the survivors are draws from g
    kept = np.isfinite(result.log_weights)
    assert np.all(result.log_weights[kept] == 0.0)
    counts = np.zeros(len(exact["index"]))
    for s, i in zip(*np.nonzero(kept), strict=True):
        counts[
            exact["index"][tuple(int(t) for t in result.tokens[s, i, : result.lengths[s, i]])]
        ] += 1
    assert counts.sum() > 200
    assert np.all(counts[~exact["semantic"]] == 0)
    assert chi_square_pvalue(counts, target) > 1e-3
