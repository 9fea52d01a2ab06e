"""Code text -> workflow: reads what :meth:`Workflow.to_code` prints (and an optimizer writes).

The text is parsed with :mod:`ast` and walked; nothing in it is ever executed. Each statement
must have one of the shapes the printer writes (``answer = generate(problem, prompt="plain")``,
``feedback = review(...)``, ``if not valid(answer):``, the bounded ``for`` loop of
review/revise, ``return answer``), every call must name an operator of
:data:`~jaxlab.workflows.program.OPERATORS` and every argument must be a literal. The result
is checked by :func:`~jaxlab.workflows.program.validate`.

A text that fails raises :class:`ParseError` with a ``reason`` (one of :data:`REASONS`), so a
search can count its rejections by reason: ``no_program`` (no code in the reply), ``syntax``
(not Python), ``unknown_operator`` (a call outside the operator set), ``malformed`` (Python,
but not a workflow's shape) and ``invalid`` (a workflow, but against the grammar).
"""

from __future__ import annotations

import ast
import re
from typing import Any

from jaxlab.workflows.program import (
    OPERATORS,
    SOLVERS,
    Step,
    Workflow,
    WorkflowError,
    validate,
)

REASONS: tuple[str, ...] = ("no_program", "syntax", "unknown_operator", "malformed", "invalid")
MAX_TEXT = 20_000
_FENCE = re.compile(r"```(?:python)?\n(.*?)```", re.S)
_GRAPH = re.compile(r"<graph>(.*?)</graph>", re.S)


class ParseError(ValueError):
    """A text that is not a valid workflow; ``reason`` is one of :data:`REASONS`."""

    def __init__(self, reason: str, message: str):
        super().__init__(f"{reason}: {message}")
        self.reason = reason


def extract_code(text: str) -> str:
    """The program in an optimizer's reply: inside ``<graph>`` tags, else the first fenced code
    block, else the text from its first ``def`` on."""
    if not isinstance(text, str) or len(text) > MAX_TEXT:
        raise ParseError("no_program", f"expected a text of at most {MAX_TEXT} characters")
    for pattern in (_GRAPH, _FENCE):
        m = pattern.search(text)
        if m:
            return m.group(1).strip("\n")
    start = text.find("def ")
    if start < 0:
        raise ParseError("no_program", "no <graph> tags, code block or 'def' in the text")
    return text[start:]


def parse_workflow(text: str) -> Workflow:
    """The validated workflow that ``text`` (code, or a reply holding code) describes.

    Raises:
        ParseError: with the reason and the line of the first problem.
    """
    code = extract_code(text)
    try:
        tree = ast.parse(code)
    except SyntaxError as e:
        raise ParseError("syntax", f"line {e.lineno}: {e.msg}") from None
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    if len(tree.body) != 1 or not funcs:
        raise ParseError("malformed", "expected exactly one function definition")
    fn = funcs[0]
    if [a.arg for a in fn.args.args] != ["problem"] or fn.decorator_list:
        raise ParseError("malformed", f"line {fn.lineno}: expected 'def NAME(problem):'")
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # a docstring
    last = body[-1] if body else fn
    if not (isinstance(last, ast.Return) and _is_name(last.value, "answer")):
        raise ParseError("malformed", f"line {last.lineno}: expected 'return answer' last")
    steps = _block(body[:-1], top=True)
    try:
        return validate(Workflow(steps))
    except WorkflowError as e:
        raise ParseError("invalid", str(e)) from None


def _is_name(node: Any, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _block(stmts: list[ast.stmt], *, top: bool) -> tuple[Step, ...]:
    steps: list[Step] = []
    for node in stmts:
        if isinstance(node, ast.Assign):
            steps.append(_assign(node))
        elif isinstance(node, ast.If) and top:
            steps.append(_if(node))
        elif isinstance(node, ast.For) and top:
            steps.append(_loop(node))
        else:
            raise ParseError(
                "malformed", f"line {node.lineno}: {type(node).__name__} is not a workflow step"
            )
    return tuple(steps)


def _call(node: Any, line: int) -> tuple[str, list[ast.expr], dict[str, Any]]:
    """``(operator, positional args, literal keywords)`` of a call to an operator."""
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ParseError("malformed", f"line {line}: expected a call of an operator by name")
    name = node.func.id
    if name not in OPERATORS or name in ("if", "loop"):
        raise ParseError("unknown_operator", f"line {line}: {name!r} is not an operator")
    kwargs = {}
    for kw in node.keywords:
        if kw.arg is None or not isinstance(kw.value, ast.Constant):
            raise ParseError("malformed", f"line {line}: {name}: arguments must be literals")
        kwargs[kw.arg] = kw.value.value
    return name, list(node.args), kwargs


def _expect_args(name: str, args: list[ast.expr], names: tuple[str, ...], line: int) -> None:
    if len(args) != len(names) or not all(_is_name(a, n) for a, n in zip(args, names, strict=True)):
        raise ParseError("malformed", f"line {line}: {name} takes ({', '.join(names)})")


_ARGS = {
    "generate": ("problem",),
    "answer_generate": ("problem",),
    "custom": ("problem",),
    "programmer": ("problem",),
    "review": ("problem", "answer"),
    "revise": ("problem", "answer", "feedback"),
    "format": ("problem", "answer"),
    "test": ("problem", "answer"),
}


def _assign(node: ast.Assign) -> Step:
    line = node.lineno
    if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
        raise ParseError("malformed", f"line {line}: expected 'answer = ...' or 'feedback = ...'")
    target = node.targets[0].id
    name, args, kwargs = _call(node.value, line)
    if (target == "feedback") != (name == "review") or target not in ("answer", "feedback"):
        raise ParseError("malformed", f"line {line}: {target} = {name}(...): wrong target")
    if name in ("sc_ensemble", "md_ensemble"):
        comp = args[-1] if args else None
        lead = ("problem",) if name == "md_ensemble" else ()
        _expect_args(name, args[:-1], lead, line)
        solver, n, inner = _comprehension(comp, line)
        return Step.make(name, solver=solver, n=n, **inner, **kwargs)
    _expect_args(name, args, _ARGS[name], line)
    return Step.make(name, **kwargs)


def _comprehension(node: Any, line: int) -> tuple[str, Any, dict[str, Any]]:
    """``[SOLVER(problem, ...) for _ in range(N)]`` -> ``(solver, N, keywords)``."""
    if not (
        isinstance(node, ast.ListComp)
        and len(node.generators) == 1
        and not node.generators[0].ifs
        and _is_name(node.generators[0].target, "_")
    ):
        raise ParseError("malformed", f"line {line}: expected [SOLVER(...) for _ in range(N)]")
    n = _range(node.generators[0].iter, line)
    name, args, kwargs = _call(node.elt, line)
    if name not in SOLVERS:
        raise ParseError("malformed", f"line {line}: an ensemble samples one of {SOLVERS}")
    _expect_args(name, args, ("problem",), line)
    return name, n, kwargs


def _range(node: Any, line: int) -> Any:
    if not (
        isinstance(node, ast.Call)
        and _is_name(node.func, "range")
        and len(node.args) == 1
        and isinstance(node.args[0], ast.Constant)
    ):
        raise ParseError("malformed", f"line {line}: expected range(N) with a literal N")
    return node.args[0].value


def _if(node: ast.If) -> Step:
    line, test = node.lineno, node.test
    if node.orelse or not isinstance(test, ast.UnaryOp) or not isinstance(test.op, ast.Not):
        raise ParseError(
            "malformed", f"line {line}: expected 'if not valid(answer):' or 'if not feedback:'"
        )
    inner = test.operand
    if _is_name(inner, "feedback"):
        cond = "rejected"
    elif (
        isinstance(inner, ast.Call)
        and _is_name(inner.func, "valid")
        and len(inner.args) == 1
        and _is_name(inner.args[0], "answer")
    ):
        cond = "invalid"
    else:
        raise ParseError("malformed", f"line {line}: unknown condition")
    return Step.make("if", cond=cond, body=_block(node.body, top=False))


def _loop(node: ast.For) -> Step:
    """The bounded review/revise loop: review, ``if feedback: break``, revise."""
    line = node.lineno
    body = node.body
    brk = body[1] if len(body) == 3 else None
    if not (
        _is_name(node.target, "_")
        and not node.orelse
        and isinstance(brk, ast.If)
        and _is_name(brk.test, "feedback")
        and len(brk.body) == 1
        and isinstance(brk.body[0], ast.Break)
        and not brk.orelse
        and isinstance(body[0], ast.Assign)
        and isinstance(body[2], ast.Assign)
    ):
        raise ParseError(
            "malformed",
            f"line {line}: expected for _ in range(N): feedback = review(...); "
            "if feedback: break; answer = revise(...)",
        )
    n = _range(node.iter, line)
    return Step.make("loop", n=n, body=(_assign(body[0]), _assign(body[2])))
