"""Constrained generation of arithmetic expressions: grammar, semantic critic and SMC methods.

The demonstration task of Loula et al. (ICLR 2025) in miniature, over any injected byte-level LM.
The target over expressions ``x`` written after a prompt and ended by a terminator token is

    g(x) ∝ p_LM(x · terminator | prompt) · Phi_eff(x) · Phi_exp(x)

(paper §2, Eq. 1), where

* ``Phi_eff`` (cheap, used in the proposal) is the grammar, with parenthesis nesting at most
  ``max_depth`` and numbers of at most ``max_digits`` digits without leading zeros::

      E_d -> T_d | T_d op E_d        T_d -> N | "(" E_{d-1} ")"   (T_0 -> N)
      N   -> "0" | [1-9] [0-9]{0, max_digits-1}        op ∈ operators ⊆ {"+", "-"}

  compiled to a token DFA (:mod:`jaxlab.decoding.grammar`) and intersected with the length limit
  (:mod:`jaxlab.decoding.length_bound`), so every locally constrained sample parses;
* ``Phi_exp`` (expensive, a critic) is the semantic check ``lo <= value(x) <= hi``, evaluated in
  JAX on the token array by a stack machine (:func:`evaluate_tokens`; jit-able, no host callback).
  Its prefix weight is a twist ``exp(-beta · dist(value_closed(x), [lo, hi]))`` where
  ``value_closed`` is the value of the prefix with its open number ended and its open
  parentheses closed; the twist cancels at the end (SMC's telescoping critic increments), so it
  only steers the particles, ``g`` does not depend on it. The closed value is a myopic guess
  (the prefix ``1`` is far from ``[10, 20]`` although ``1`` leads to ``15``), so a strong twist
  misleads the resampling; the default ``beta = 0.2`` is gentle (``beta = 0``: the critic acts
  only at the end, killing failed particles).

Numbers are bounded, so values stay far inside int32 and match Python's ``eval``; leading zeros
are excluded because Python rejects them. ``-`` is only binary (no unary minus), as in the grammar.

:func:`run_method` runs one of :data:`METHODS` (the paper's ablation ladder) and returns weighted
samples in the LM's own token ids.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray

from jaxlab.decoding import smc as smc_lib
from jaxlab.decoding.grammar import Grammar, compile_grammar
from jaxlab.decoding.interface import CausalLM, Params, with_eos_last
from jaxlab.decoding.length_bound import LengthBoundedDFAPotential, bound_length
from jaxlab.decoding.potentials import NEG_INF, BoolDFAPotential, SequencePotential

METHODS: tuple[str, ...] = ("sample", "grammar_lcd", "grammar_smc", "rerank", "smc_critic")
"""``sample``: plain LM sampling. ``grammar_lcd``: locally constrained decoding (grammar in the
proposal, no weights). ``grammar_smc``: properly weighted grammar-only SMC. ``rerank``: plain
samples weighted by ``Phi_eff · Phi_exp`` at the end. ``smc_critic``: grammar proposal, semantic
critic twist, resampling."""

PLUS, MINUS, OPEN, CLOSE, OTHER = 10, 11, 12, 13, 14
"""Character classes of :func:`char_codes` (digits are ``0 … 9``; ``-1`` pads)."""
_CLASS = {"+": PLUS, "-": MINUS, "(": OPEN, ")": CLOSE, **{str(d): d for d in range(10)}}


@dataclasses.dataclass(frozen=True)
class ExpressionTask:
    """Static description of the task (hashable; shapes depend on it).

    Attributes:
        token_strings: the LM's ``V`` token strings in its own ids (specials: characters outside
            the expression alphabet, e.g. :func:`byte_token_strings`).
        terminator_id: the LM token that ends an expression (e.g. the newline byte or EOS).
        max_tokens: most tokens before the terminator.
        max_depth: parenthesis nesting limit.
        max_digits: digits per number.
        operators: binary operators, a subset of ``"+-"``.
    """

    token_strings: tuple[str, ...]
    terminator_id: int
    max_tokens: int = 16
    max_depth: int = 2
    max_digits: int = 2
    operators: str = "+-"

    def __post_init__(self) -> None:
        vocab = len(self.token_strings)
        if not 0 <= self.terminator_id < vocab:
            raise ValueError(
                f"ExpressionTask.terminator_id={self.terminator_id!r}: expected an id in "
                f"[0, {vocab})"
            )
        for name in ("max_tokens", "max_digits"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"ExpressionTask.{name}={value!r}: expected an int >= 1")
        if not isinstance(self.max_depth, int) or self.max_depth < 0:
            raise ValueError(f"ExpressionTask.max_depth={self.max_depth!r}: expected an int >= 0")
        if not self.operators or set(self.operators) - set("+-"):
            raise ValueError(
                f"ExpressionTask.operators={self.operators!r}: expected a non-empty subset of '+-'"
            )

    @property
    def condition_strings(self) -> tuple[str, ...]:
        """Token strings of the potentials' vocabulary: the LM's without the terminator."""
        return tuple(s for i, s in enumerate(self.token_strings) if i != self.terminator_id)


def byte_token_strings(vocab_size: int) -> tuple[str, ...]:
    """Strings of a byte-level vocabulary: id ``b < 256`` is ``chr(b)``; ids ``>= 256``
    (specials such as BOS/EOS/PAD) get a character outside every expression alphabet."""
    if not isinstance(vocab_size, int) or vocab_size < 1:
        raise ValueError(f"vocab_size={vocab_size!r}: expected an int >= 1")
    return tuple(chr(i) if i < 256 else chr(0xE000 + i) for i in range(vocab_size))


def expression_grammar(max_depth: int, *, max_digits: int = 2, operators: str = "+-") -> Grammar:
    """The expression grammar of the module docstring, start symbol ``E{max_depth}``.

    Args:
        max_depth: parenthesis nesting limit (``>= 0``).
        max_digits: digits per number (``>= 1``).
        operators: binary operators.

    Returns:
        The grammar. Compile it with ``max_stack >= required_stack(max_depth, max_digits)``.
    """
    nonzero = [[c] for c in "123456789"]
    rules: dict[str, list[list[str]]] = {
        "P": nonzero,
        "D": [[c] for c in "0123456789"],
        "N": [["0"]] + [["P"] + ["D"] * k for k in range(max_digits)],
        "O": [[o] for o in operators],
    }
    for d in range(max_depth + 1):
        rules[f"E{d}"] = [[f"T{d}"], [f"T{d}", "O", f"E{d}"]]
        rules[f"T{d}"] = [["N"]] + ([["(", f"E{d - 1}", ")"]] if d > 0 else [])
    return Grammar.from_dict(rules, start=f"E{max_depth}")


def required_stack(max_depth: int, max_digits: int) -> int:
    """Pushdown stack bound under which the compiled DFA is the whole bounded-depth language:
    every open parenthesis leaves ``")" op E`` pending and the innermost number needs
    ``max_digits + 2`` more symbols; one spare slot."""
    return 3 * max_depth + max_digits + 3


def grammar_condition(task: ExpressionTask) -> LengthBoundedDFAPotential:
    """``Phi_eff``: the grammar ∩ ``|x| <= max_tokens`` over the potentials' vocabulary
    (:attr:`ExpressionTask.condition_strings`, EOS = the terminator)."""
    grammar = expression_grammar(
        task.max_depth, max_digits=task.max_digits, operators=task.operators
    )
    dfa = compile_grammar(grammar, max_stack=required_stack(task.max_depth, task.max_digits))
    tokens = BoolDFAPotential.from_char_dfa(dfa, task.condition_strings)
    return bound_length(tokens, task.max_tokens)


def char_codes(token_strings: Sequence[str]) -> Int[np.ndarray, "vocab width"]:
    """``[V, W]`` character classes of each token (digits ``0-9``, :data:`PLUS` … :data:`OTHER`),
    ``-1`` after the token's end; ``W = max(1, longest token)``."""
    width = max(1, max(len(s) for s in token_strings))
    codes = np.full((len(token_strings), width), -1, np.int32)
    for t, string in enumerate(token_strings):
        for j, char in enumerate(string):
            codes[t, j] = _CLASS.get(char, OTHER)
    return codes


@struct.dataclass
class MachineState:
    """Stack machine over expression characters; level ``l`` is parenthesis depth ``l``.

    Attributes:
        depth: current nesting depth.
        total: ``[max_depth + 1]`` signed sum of the finished terms at each level.
        sign: ``[max_depth + 1]`` sign of the term being read (``+1``/``-1``).
        number: ``[max_depth + 1]`` value of the term being read (a number, or a closed
            parenthesis' value).
        ok: no invalid character, no depth overflow, no unmatched ``)``.
    """

    depth: Int[Array, ""]
    total: Int[Array, " levels"]
    sign: Int[Array, " levels"]
    number: Int[Array, " levels"]
    ok: Bool[Array, ""]


def machine_init(max_depth: int) -> MachineState:
    """The empty expression."""
    levels = max_depth + 1
    return MachineState(
        depth=jnp.asarray(0, jnp.int32),
        total=jnp.zeros(levels, jnp.int32),
        sign=jnp.ones(levels, jnp.int32),
        number=jnp.zeros(levels, jnp.int32),
        ok=jnp.asarray(True),
    )


def machine_step(state: MachineState, code: Int[Array, ""]) -> MachineState:
    """Reads one character class (``-1``: no-op).

    digit ``c``: ``number[d] = 10 number[d] + c``; ``+``/``-``: ``total[d] += sign[d] number[d]``,
    ``sign[d] = ±1``, ``number[d] = 0``; ``(``: ``d += 1`` with a fresh level; ``)``: the level's
    value ``total[d] + sign[d] number[d]`` becomes ``number[d - 1]``.
    """
    levels = state.total.shape[0]
    d = state.depth
    value = state.total[d] + state.sign[d] * state.number[d]
    is_digit = (code >= 0) & (code < 10)
    is_op = (code == PLUS) | (code == MINUS)
    opened = jnp.minimum(d + 1, levels - 1)
    closed = jnp.maximum(d - 1, 0)

    digit_number = state.number.at[d].set(state.number[d] * 10 + jnp.maximum(code, 0))
    op_total = state.total.at[d].set(value)
    op_sign = state.sign.at[d].set(jnp.where(code == PLUS, 1, -1))
    reset_number = state.number.at[d].set(0)
    open_total = state.total.at[opened].set(0)
    open_sign = state.sign.at[opened].set(1)
    open_number = state.number.at[opened].set(0)
    close_number = state.number.at[closed].set(value)

    def pick(digit, op, open_, close, keep):
        return jnp.where(
            is_digit,
            digit,
            jnp.where(
                is_op, op, jnp.where(code == OPEN, open_, jnp.where(code == CLOSE, close, keep))
            ),
        )

    ok = state.ok & (code < OTHER)
    ok = ok & ~((code == OPEN) & (d + 1 >= levels)) & ~((code == CLOSE) & (d == 0))
    return MachineState(
        depth=pick(d, d, opened, closed, d),
        total=pick(state.total, op_total, open_total, state.total, state.total),
        sign=pick(state.sign, op_sign, open_sign, state.sign, state.sign),
        number=pick(digit_number, reset_number, open_number, close_number, state.number),
        ok=jnp.where(code < 0, state.ok, ok),
    )


def closed_value(state: MachineState) -> Int[Array, ""]:
    """Value of the expression read so far with every open parenthesis closed:
    ``v_d = total[d] + sign[d] number[d]``, ``v_l = total[l] + sign[l] v_{l+1}`` for ``l < d``."""
    levels = state.total.shape[0]

    def body(inner, level):
        here = state.total[level] + state.sign[level] * jnp.where(
            level == state.depth, state.number[level], inner
        )
        return jnp.where(level <= state.depth, here, inner), None

    value, _ = jax.lax.scan(body, jnp.asarray(0, jnp.int32), jnp.arange(levels - 1, -1, -1))
    return value


def evaluate_tokens(
    codes: Int[Array, "vocab width"],
    tokens: Int[Array, " max_len"],
    length: Int[Array, ""],
    max_depth: int,
) -> MachineState:
    """Runs the stack machine over ``tokens[:length]`` (characters from ``codes``).

    For a string of the grammar, ``closed_value`` of the result equals Python's ``eval`` and
    ``depth`` is zero.

    Args:
        codes: ``[V, W]`` from :func:`char_codes`.
        tokens: ``[L]`` token ids.
        length: number of valid tokens.
        max_depth: nesting limit (static).

    Returns:
        The final :class:`MachineState`.
    """
    chars = codes[tokens]
    valid = (jnp.arange(tokens.shape[0]) < length)[:, None]
    flat = jnp.where(valid, chars, -1).reshape(-1)
    state, _ = jax.lax.scan(lambda s, c: (machine_step(s, c), None), machine_init(max_depth), flat)
    return state


def _semantic_weights(params, tokens, length, max_depth):
    codes, low, high, beta = params
    state = evaluate_tokens(codes, tokens, length, max_depth)
    value = closed_value(state)
    distance = jnp.maximum(low - value, 0) + jnp.maximum(value - high, 0)
    prefix = jnp.where(state.ok, -beta * distance.astype(jnp.float32), NEG_INF)
    complete = jnp.where(state.ok & (state.depth == 0) & (distance == 0), 0.0, NEG_INF)
    return prefix, complete


@functools.cache
def _semantic_fns(max_depth: int):
    """``(prefix_fn, complete_fn)`` for one nesting limit; cached so that critics built with
    other bounds or ``beta`` share the static part of their pytree (no recompilation)."""

    def prefix_fn(params, tokens, length):
        return _semantic_weights(params, tokens, length, max_depth)[0]

    def complete_fn(params, tokens, length):
        return _semantic_weights(params, tokens, length, max_depth)[1]

    return prefix_fn, complete_fn


def semantic_critic(
    task: ExpressionTask,
    low: Int[Array, ""] | int,
    high: Int[Array, ""] | int,
    beta: Float[Array, ""] | float = 0.2,
) -> SequencePotential:
    """``Phi_exp``: ``complete(x) = 1[ok(x), balanced, low <= value(x) <= high]``, twisted prefix
    ``exp(-beta · dist(closed_value(x), [low, high]))`` (``0`` on invalid characters).

    On strings of the grammar ``complete`` is exactly ``1[low <= eval(x) <= high]``; on other
    strings it is a best-effort reading, which is why it is multiplied with the grammar.
    ``low``, ``high`` and ``beta`` are traced (vmap over targets); the whole sequence is replayed
    at every call, which is what makes it the expensive potential.

    Args:
        task: the task (vocabulary, ``max_tokens``, ``max_depth``).
        low: smallest accepted value.
        high: largest accepted value.
        beta: twist strength (``0``: the critic only acts at the end).

    Returns:
        The critic over the potentials' vocabulary (:attr:`ExpressionTask.condition_strings`).
    """
    prefix_fn, complete_fn = _semantic_fns(task.max_depth)
    codes = jnp.asarray(char_codes(task.condition_strings))
    params = (
        codes,
        jnp.asarray(low, jnp.int32),
        jnp.asarray(high, jnp.int32),
        jnp.asarray(beta, jnp.float32),
    )
    return SequencePotential(
        params=params,
        prefix_fn=prefix_fn,
        complete_fn=complete_fn,
        max_len=task.max_tokens,
        num_tokens=len(task.condition_strings),
    )


@struct.dataclass
class ExpressionPotentials:
    """The two factors of the target, over the potentials' vocabulary (a pytree).

    Attributes:
        condition: ``Phi_eff`` (:func:`grammar_condition`).
        critic: ``Phi_exp`` (:func:`semantic_critic`).
    """

    condition: LengthBoundedDFAPotential
    critic: SequencePotential


def build_potentials(
    task: ExpressionTask, low: int, high: int, beta: float = 0.2
) -> ExpressionPotentials:
    """Host-side compilation of both potentials (grammar DFA, character table)."""
    return ExpressionPotentials(
        condition=grammar_condition(task), critic=semantic_critic(task, low, high, beta)
    )


def run_method(
    key: PRNGKeyArray,
    lm: CausalLM,
    lm_params: Params,
    prompt: Int[Array, " prompt_len"],
    potentials: ExpressionPotentials,
    *,
    task: ExpressionTask,
    method: str,
    num_particles: int,
    ess_threshold: Float[Array, ""] | float = 0.5,
    resampling: str = "multinomial",
    pad_id: int = 0,
) -> smc_lib.SMCResult:
    """Generates weighted expressions with one of :data:`METHODS` (jit with ``lm``, ``task``,
    ``method``, ``num_particles``, ``resampling`` and ``pad_id`` static).

    The LM is renumbered so that the terminator is its EOS (:func:`with_eos_last`); the returned
    tokens are mapped back to the LM's own ids. Unweighted methods (``sample``, ``grammar_lcd``)
    return zero log weights for particles that ended (``-inf`` if the length limit cut them).

    Args:
        key: PRNG key.
        lm: the injected LM over ``len(task.token_strings)`` tokens.
        lm_params: its parameters.
        prompt: ``[P]`` prompt ids (LM ids, ``P >= 1``).
        potentials: from :func:`build_potentials`.
        task: the static task.
        method: one of :data:`METHODS`.
        num_particles: ``N``.
        ess_threshold: resampling threshold of the SMC methods.
        resampling: resampling scheme.
        pad_id: id written after each particle's end.

    Returns:
        :class:`jaxlab.decoding.smc.SMCResult` with ``tokens`` in LM ids (terminator not stored).
    """
    if method not in METHODS:
        raise ValueError(f"method={method!r}: expected one of {METHODS}")
    if lm.vocab_size != len(task.token_strings):
        raise ValueError(
            f"lm.vocab_size={lm.vocab_size}: expected len(task.token_strings)="
            f"{len(task.token_strings)}"
        )
    renumbered = with_eos_last(lm, task.terminator_id)
    inverse = np.asarray([i for i in range(lm.vocab_size) if i != task.terminator_id], np.int32)
    prompt = jnp.asarray(prompt, jnp.int32)
    prompt = jnp.where(
        prompt == task.terminator_id, lm.vocab_size - 1, prompt - (prompt > task.terminator_id)
    )

    def config(proposal: str) -> smc_lib.SMCConfig:
        return smc_lib.SMCConfig(
            num_particles=num_particles,
            max_tokens=task.max_tokens,
            proposal=proposal,
            resampling=resampling,
        )

    cond, critic = potentials.condition, potentials.critic
    if method == "rerank":
        result = smc_lib.sample_rerank(
            key,
            renumbered,
            lm_params,
            prompt,
            num_samples=num_particles,
            max_tokens=task.max_tokens,
            potentials=(cond, critic),
        )
    elif method in ("sample", "grammar_lcd"):
        proposal = "direct" if method == "sample" else "constrained_unweighted"
        result = smc_lib.importance_sampling(
            key,
            renumbered,
            lm_params,
            prompt,
            config=config(proposal),
            condition=None if method == "sample" else cond,
        )
    else:
        result = smc_lib.smc(
            key,
            renumbered,
            lm_params,
            prompt,
            config=config("constrained"),
            condition=cond,
            critic=critic if method == "smc_critic" else None,
            ess_threshold=ess_threshold,
        )
    positions = jnp.arange(result.tokens.shape[1])[None, :]
    tokens = jnp.where(
        positions < result.lengths[:, None], jnp.asarray(inverse)[result.tokens], pad_id
    )
    return result.replace(tokens=tokens)
