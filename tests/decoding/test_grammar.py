"""Tests for jaxlab.decoding.grammar: bounded-stack CFG compilation against reference parsers."""

import itertools

import pytest

from jaxlab.decoding import grammar


def parse_arithmetic(s, max_depth, digits="12", operators="+*"):
    """Reference recursive-descent recogniser with a parenthesis-depth limit."""

    def expr(i, depth):
        i = factor(i, depth)
        while i is not None and i < len(s) and s[i] in operators:
            i = factor(i + 1, depth)
        return i

    def factor(i, depth):
        if i is None or i >= len(s):
            return None
        if s[i] == "(":
            if depth == 0:
                return None
            j = expr(i + 1, depth - 1)
            return j + 1 if j is not None and j < len(s) and s[j] == ")" else None
        j = i
        while j < len(s) and s[j] in digits:
            j += 1
        return j if j > i else None

    return expr(0, max_depth) == len(s)


def all_strings(alphabet, max_len):
    for n in range(max_len + 1):
        for combo in itertools.product(alphabet, repeat=n):
            yield "".join(combo)


@pytest.mark.parametrize("depth", [0, 1, 2])
def test_arithmetic_grammar_matches_reference_parser(depth):
    g = grammar.arithmetic_grammar(depth, digits="12", operators="+*")
    dfa = grammar.compile_grammar(g, max_stack=3 * depth + 4)
    for s in all_strings("12+*()", 6):
        assert dfa.accepts(s) == parse_arithmetic(s, depth), s
    for s in ["((11+1)*2)+12", "(1)", "((1))", "1+(2*(1+2))", "()", "1+", "(1+2"]:
        assert dfa.accepts(s) == parse_arithmetic(s, depth), s


def test_stack_bound_is_tight_for_arithmetic():
    g = grammar.arithmetic_grammar(2, digits="12", operators="+*")
    full = grammar.compile_grammar(g, max_stack=10)
    short = grammar.compile_grammar(g, max_stack=9)
    deep = "((11+1)+1)+1"
    assert parse_arithmetic(deep, 2) and full.accepts(deep) and not short.accepts(deep)
    # The bounded language is always a subset of the grammar's language.
    for s in all_strings("12+()", 6):
        assert not short.accepts(s) or parse_arithmetic(s, 2, operators="+")


def test_epsilon_and_left_recursive_grammars():
    balanced = grammar.Grammar.from_dict({"S": [["(", "S", ")", "S"], []]}, start="S")
    dfa = grammar.compile_grammar(balanced, max_stack=12)

    def depth_ok(s):
        depth = 0
        for c in s:
            depth += 1 if c == "(" else -1
            if depth < 0:
                return False
        return depth == 0

    for s in all_strings("()", 8):
        assert dfa.accepts(s) == depth_ok(s), s
    left = grammar.Grammar.from_dict({"E": [["E", "+a"], ["a"]]}, start="E")
    # Each left-recursive expansion leaves '+', 'a' pending: a stack of 2m + 1 allows m pluses.
    dfa = grammar.compile_grammar(left, max_stack=7)
    accepted = [s for s in all_strings("a+", 11) if dfa.accepts(s)]
    assert accepted == ["a", "a+a", "a+a+a", "a+a+a+a"]


def test_grammar_validation():
    with pytest.raises(ValueError, match="start"):
        grammar.Grammar.from_dict({"S": [["a"]]}, start="T")
    with pytest.raises(ValueError, match="max_stack"):
        grammar.compile_grammar(grammar.arithmetic_grammar(0), max_stack=0)
    with pytest.raises(ValueError, match="missing terminal"):
        grammar.compile_grammar(grammar.arithmetic_grammar(0), max_stack=4, alphabet="12")
    with pytest.raises(ValueError, match="max_states"):
        grammar.compile_grammar(grammar.arithmetic_grammar(3), max_stack=13, max_states=3)
