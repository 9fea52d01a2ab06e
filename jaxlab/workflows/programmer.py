"""The programmer operator's evaluator: an arithmetic expression, never arbitrary code.

AFlow's Programmer runs model-written Python in a subprocess with a timeout. Here the program is
an arithmetic expression (the language of :func:`jaxlab.decoding.arithmetic.expression_grammar`,
plus ``*`` and unary signs) and is *interpreted*: :func:`safe_eval` parses it with :mod:`ast`
and walks a whitelist of node types (integer literals, ``+ - *``, unary ``+ -``, parentheses).
Any other node (names, calls, attributes, subscripts, strings, ``**``, comprehensions, lambdas…)
raises :class:`ProgrammerError` before anything is evaluated, so nothing outside the whitelist
can run. Sizes are bounded (source length, literal size, result size) so a hostile expression
cannot exhaust memory either.
"""

from __future__ import annotations

import ast

MAX_SOURCE = 200
MAX_ABS = 10**9

_BINOPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b}
_UNARY = {ast.UAdd: lambda a: a, ast.USub: lambda a: -a}


class ProgrammerError(ValueError):
    """The code given to the programmer is not a bounded arithmetic expression."""


def safe_eval(code: str) -> int:
    """Value of an integer arithmetic expression (``+ - *``, unary signs, parentheses).

    Args:
        code: the expression, e.g. ``"12+7-(3*2)"``.

    Returns:
        Its integer value.

    Raises:
        ProgrammerError: naming the code and the first disallowed construct.
    """
    if not isinstance(code, str):
        raise ProgrammerError(f"programmer code {code!r}: expected a string")
    if len(code) > MAX_SOURCE:
        raise ProgrammerError(
            f"programmer code of {len(code)} characters: expected at most {MAX_SOURCE}"
        )
    try:
        tree = ast.parse(code.strip(), mode="eval")
    except SyntaxError as e:
        raise ProgrammerError(f"programmer code {code!r}: not an expression ({e.msg})") from None
    _check(tree.body, code)  # whole tree first: nothing runs unless every node is allowed
    return _value(tree.body, code)


def _check(node: ast.AST, code: str) -> None:
    if isinstance(node, ast.Constant):
        if type(node.value) is not int:
            raise ProgrammerError(
                f"programmer code {code!r}: literal {node.value!r} is not an integer"
            )
        if abs(node.value) > MAX_ABS:
            raise ProgrammerError(f"programmer code {code!r}: literal {node.value} too large")
        return
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        _check(node.left, code)
        _check(node.right, code)
        return
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        _check(node.operand, code)
        return
    what = type(node.op).__name__ if isinstance(node, ast.BinOp | ast.UnaryOp) else None
    what = what or type(node).__name__
    raise ProgrammerError(
        f"programmer code {code!r}: {what} is not allowed (only integers, + - * and parentheses)"
    )


def _value(node: ast.AST, code: str) -> int:
    if isinstance(node, ast.Constant):
        return int(node.value)
    if isinstance(node, ast.UnaryOp):
        out = _UNARY[type(node.op)](_value(node.operand, code))
    else:
        out = _BINOPS[type(node.op)](_value(node.left, code), _value(node.right, code))
    if abs(out) > MAX_ABS:
        raise ProgrammerError(f"programmer code {code!r}: intermediate value {out} too large")
    return out
