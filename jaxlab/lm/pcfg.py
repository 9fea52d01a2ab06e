"""A probabilistic context-free grammar corpus with known derivations (progressive distillation §5).

Panigrahi et al. (arXiv 2410.05464) train masked and autoregressive models on sentences of
layered synthetic PCFGs (Allen-Zhu & Li's ``cfg3`` family): every non-terminal of level ``ℓ``
rewrites to a sequence of 2 or 3 non-terminals of level ``ℓ+1`` with given probabilities, and the
last level rewrites to terminals. Because the grammar is layered, every sentence comes with its
derivation, so the constituents (spans and labels of every non-terminal) are known: the paper's
probes (n-gram context dependence, boundary / non-terminal prediction) read them.

Generation is host-side NumPy (a recursive expansion, like a data loader's work), seeded by an
explicit ``numpy.random.Generator``; :func:`to_arrays` pads a corpus to fixed shapes for JAX, and
:func:`mlm_batch` / :func:`autoregressive_batch` make the two training objectives' batches.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from jaxlab.core.config import ConfigError

Rule = tuple[tuple[str, ...], float]


@dataclasses.dataclass(frozen=True)
class PCFG:
    """A grammar: ``rules[symbol]`` lists ``(right-hand side, probability)``; symbols without
    rules are terminals, numbered in :attr:`terminals` order (token id = index).

    Attributes:
      rules: productions per non-terminal (probabilities sum to 1 per non-terminal).
      start: the start symbol.
    """

    rules: Mapping[str, tuple[Rule, ...]]
    start: str = "S"

    def __post_init__(self) -> None:
        if self.start not in self.rules:
            raise ConfigError("start", self.start, "a non-terminal with rules")
        for lhs, options in self.rules.items():
            if not options:
                raise ConfigError(f"rules.{lhs}", options, "at least one production")
            total = sum(p for _, p in options)
            if not np.isclose(total, 1.0) or any(p < 0 for _, p in options):
                raise ConfigError(f"rules.{lhs}", total, "non-negative probabilities summing to 1")

    @property
    def nonterminals(self) -> tuple[str, ...]:
        return tuple(self.rules)

    @property
    def terminals(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for options in self.rules.values():
            for rhs, _ in options:
                for sym in rhs:
                    if sym not in self.rules:
                        seen.setdefault(sym)
        return tuple(sorted(seen))


def layered_grammar() -> PCFG:
    """A small 4-level layered grammar (``S`` → level-2 → level-3 → terminals ``a b c``), in the
    style of ``cfg3``: binary and ternary rules, several productions per non-terminal, sentences
    of 8 to 27 tokens."""
    rules: dict[str, tuple[Rule, ...]] = {
        "S": ((("X1", "X2"), 0.4), (("X2", "X3", "X1"), 0.35), (("X3", "X3"), 0.25)),
        "X1": ((("Y1", "Y2"), 0.5), (("Y2", "Y3", "Y1"), 0.5)),
        "X2": ((("Y3", "Y1"), 0.6), (("Y1", "Y1", "Y2"), 0.4)),
        "X3": ((("Y2", "Y3"), 0.7), (("Y3", "Y2", "Y2"), 0.3)),
        "Y1": ((("a", "b"), 0.5), (("c", "a", "a"), 0.5)),
        "Y2": ((("b", "c"), 0.6), (("a", "c", "b"), 0.4)),
        "Y3": ((("c", "c"), 0.3), (("b", "a", "c"), 0.7)),
    }
    return PCFG(rules=rules)


def random_layered_grammar(
    seed: int = 0,
    *,
    symbols_per_level: Sequence[int] = (1, 3, 3, 3),
    n_terminals: int = 3,
    rules_per_symbol: int = 2,
    rhs_lengths: Sequence[int] = (2, 3),
) -> PCFG:
    """A random layered grammar in the style of Allen-Zhu & Li's ``cfg3`` family (the paper's
    ``yuanzhi_cfg3*`` grammars, small): level ``ℓ`` has ``symbols_per_level[ℓ]`` non-terminals
    (level 0 is ``S``), each with ``rules_per_symbol`` distinct productions of a length drawn from
    ``rhs_lengths`` into the symbols of level ``ℓ+1`` (the terminals after the last level), with
    probabilities from a flat Dirichlet. Non-terminals are named ``N<level>_<i>``, terminals
    ``t0, t1, …``. Deterministic in ``seed``.

    Raises:
      ConfigError: a level with no symbols, fewer than 2 terminals, or no rule lengths.
    """
    if not symbols_per_level or symbols_per_level[0] != 1 or min(symbols_per_level) < 1:
        raise ConfigError("symbols_per_level", symbols_per_level, "(1, m1, m2, ...) with m >= 1")
    if n_terminals < 2:
        raise ConfigError("n_terminals", n_terminals, "an int >= 2")
    if not rhs_lengths or min(rhs_lengths) < 1:
        raise ConfigError("rhs_lengths", rhs_lengths, "positive rule lengths")
    rng = np.random.default_rng(seed)
    names = [["S"]] + [[f"N{lv}_{i}" for i in range(m)] for lv, m in enumerate(symbols_per_level)][
        1:
    ]
    names.append([f"t{i}" for i in range(n_terminals)])
    rules: dict[str, tuple[Rule, ...]] = {}
    for lv, level in enumerate(names[:-1]):
        below = names[lv + 1]
        for sym in level:
            seen: set[tuple[str, ...]] = set()
            while len(seen) < rules_per_symbol:
                length = int(rng.choice(rhs_lengths))
                seen.add(tuple(below[j] for j in rng.integers(0, len(below), length)))
            probs = rng.dirichlet(np.ones(rules_per_symbol))
            rules[sym] = tuple(
                (rhs, float(p)) for rhs, p in zip(sorted(seen), probs / probs.sum(), strict=True)
            )
    return PCFG(rules=rules)


@dataclasses.dataclass(frozen=True)
class Sentence:
    """One sample: terminal token ids and its derivation.

    Attributes:
      tokens: terminal ids.
      constituents: ``(start, end, non-terminal)`` spans (``end`` exclusive), parents first.
      rules: the production index chosen at each expansion, in the same order.
    """

    tokens: tuple[int, ...]
    constituents: tuple[tuple[int, int, str], ...]
    rules: tuple[int, ...]


def _expand(
    rng: np.random.Generator,
    grammar: PCFG,
    symbol: str,
    term_id: Mapping[str, int],
    tokens: list[int],
    spans: list[tuple[int, int, str]],
    chosen: list[int],
) -> None:
    """Expands ``symbol`` in place: appends its terminals, constituents and rule choices."""
    if symbol not in grammar.rules:
        tokens.append(term_id[symbol])
        return
    options = grammar.rules[symbol]
    cumulative = np.cumsum([p for _, p in options])
    k = min(
        int(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right")),
        len(options) - 1,
    )
    chosen.append(k)
    slot = len(spans)
    spans.append((len(tokens), -1, symbol))
    for child in options[k][0]:
        _expand(rng, grammar, child, term_id, tokens, spans, chosen)
    spans[slot] = (spans[slot][0], len(tokens), symbol)


def sample(rng: np.random.Generator, grammar: PCFG, count: int) -> list[Sentence]:
    """``count`` sentences drawn from ``grammar`` (top-down, left-to-right expansion)."""
    if count < 1:
        raise ConfigError("count", count, "a positive int")
    term_id = {t: i for i, t in enumerate(grammar.terminals)}
    out = []
    for _ in range(count):
        tokens: list[int] = []
        spans: list[tuple[int, int, str]] = []
        chosen: list[int] = []
        _expand(rng, grammar, grammar.start, term_id, tokens, spans, chosen)
        out.append(Sentence(tuple(tokens), tuple(spans), tuple(chosen)))
    return out


def to_arrays(
    sentences: Sequence[Sentence], max_len: int, pad_id: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(tokens [n, max_len] int32 padded with pad_id, lengths [n])``.

    Raises:
      ConfigError: a sentence longer than ``max_len`` (naming ``max_len``).
    """
    longest = max(len(s.tokens) for s in sentences)
    if longest > max_len:
        raise ConfigError("max_len", max_len, f">= the longest sentence ({longest})")
    arr = np.full((len(sentences), max_len), pad_id, np.int32)
    for i, s in enumerate(sentences):
        arr[i, : len(s.tokens)] = s.tokens
    return arr, np.asarray([len(s.tokens) for s in sentences], np.int32)


def boundary_labels(sentences: Sequence[Sentence], max_len: int, level_symbols: Sequence[str]):
    """``[n, max_len]`` int32: at position ``i``, 1 + the index in ``level_symbols`` of the
    constituent of those symbols that *ends* at token ``i`` (0: none) — the boundary /
    non-terminal prediction probe's target."""
    index = {s: j for j, s in enumerate(level_symbols)}
    out = np.zeros((len(sentences), max_len), np.int32)
    for i, s in enumerate(sentences):
        for _, end, sym in s.constituents:
            if sym in index and end - 1 < max_len:
                out[i, end - 1] = 1 + index[sym]
    return out


def mlm_batch(
    rng: np.random.Generator, tokens: np.ndarray, lengths: np.ndarray, mask_id: int, rate: float
) -> tuple[np.ndarray, np.ndarray]:
    """Masked-LM inputs (a ``rate`` fraction of real tokens replaced by ``mask_id``) and the
    boolean mask of the positions to predict."""
    real = np.arange(tokens.shape[1])[None, :] < lengths[:, None]
    masked = real & (rng.random(tokens.shape) < rate)
    return np.where(masked, mask_id, tokens).astype(np.int32), masked


def autoregressive_batch(tokens: np.ndarray, lengths: np.ndarray):
    """``(inputs, targets, weights)``: next-token prediction over the real tokens."""
    weights = (np.arange(tokens.shape[1] - 1)[None, :] < (lengths[:, None] - 1)).astype(np.float32)
    return tokens[:, :-1], tokens[:, 1:], weights
