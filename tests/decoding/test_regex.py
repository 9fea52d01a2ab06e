"""Tests for jaxlab.decoding.regex (and the CharDFA it produces): parity with Python's ``re``."""

import itertools
import random
import re

import pytest

from jaxlab.decoding import regex

ALPHABET = tuple("ab01+-x. _\n")
PATTERNS = [
    r"a*b",
    r"(a|b)+",
    r"[0-9]+(\+[0-9]+)*",
    r"a{2,3}b?",
    r"a{2}|b{1,}",
    r"(?:ab|)*1",
    r"[^a]*",
    r".x.",
    r"\d\s?\w",
    r"[a-b0\-]*",
    r"\D+\W",
    r"(a|)(b|)x{0,2}",
    r"[.+]a\.",
    r"",
]


def strings(max_len, count, seed):
    chars = "".join(ALPHABET)
    for n in range(max_len + 1):
        for combo in itertools.product("ab0+x.\n", repeat=min(n, 3)):
            yield "".join(combo)
    rng = random.Random(seed)
    for _ in range(count):
        yield "".join(rng.choice(chars) for _ in range(rng.randint(0, max_len)))


@pytest.mark.parametrize("pattern", PATTERNS)
def test_dfa_agrees_with_re_fullmatch(pattern):
    dfa = regex.compile_regex(pattern, ALPHABET)
    for s in strings(8, 400, seed=len(pattern)):
        assert dfa.accepts(s) == (re.fullmatch(pattern, s) is not None), (pattern, s)


def test_minimal_dfa_sizes():
    # (ab)* needs: start/accept, after 'a', dead.
    assert regex.compile_regex(r"(ab)*", "ab").num_states == 3
    # a{3} over {a}: 0, 1, 2, 3 a's, dead.
    assert regex.compile_regex(r"a{3}", "a").num_states == 5
    # Equivalent patterns minimise to the same size.
    assert (
        regex.compile_regex(r"(a|b)*", "ab").num_states
        == regex.compile_regex(r"(a*b*)*", "ab").num_states
        == 1
    )


def test_liveness_and_token_lifting():
    dfa = regex.compile_regex(r"ab+", "abc")
    live = dfa.live()
    dead = dfa.run("b")
    assert not live[dead] and live[dfa.run("a")] and live[dfa.start]
    table, accepting = dfa.token_transitions(["a", "bb", "", "c", "ab", "z"])
    sink = dfa.num_states
    for state in range(dfa.num_states):
        for t, tok in enumerate(["a", "bb", "", "c", "ab"]):
            assert table[state, t] == dfa.run(tok, state)
        assert table[state, 5] == sink  # 'z' is outside the alphabet
    assert table[sink].tolist() == [sink] * 6 and not accepting[sink]


@pytest.mark.parametrize(
    "pattern,message",
    [
        ("^a", "anchor"),
        ("a$", "anchor"),
        ("(a", "missing"),
        ("a)", "unexpected"),
        ("*a", "nothing to repeat"),
        ("a{3,1}", "max < min"),
        (r"\1", "unsupported escape"),
        ("(?=a)", "group extension"),
        ("[z-a]", "bad range"),
    ],
)
def test_unsupported_or_malformed_patterns_raise(pattern, message):
    with pytest.raises(ValueError, match=message):
        regex.compile_regex(pattern, "az")
