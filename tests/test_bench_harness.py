"""The benchmark harness: the matmul counter (``dot_flops``), which the PPO floor rests on, and
the emitted line's bookkeeping (machine, device, UTC date, command)."""

import importlib.machinery
import json
import re
import sys
import types

import jax
import jax.numpy as jnp

from benchmarks.harness import dot_flops, emit


def _run_as(monkeypatch, module: str | None, argv: list[str]):
    """Make this process look started as ``python -m module argv[1:]`` (a script if None)."""
    main = types.ModuleType("__main__")
    main.__spec__ = None if module is None else importlib.machinery.ModuleSpec(module, None)
    monkeypatch.setitem(sys.modules, "__main__", main)
    monkeypatch.setattr(sys, "argv", argv)


def test_emit_adds_date_command_device_and_machine(monkeypatch, capsys):
    _run_as(monkeypatch, "benchmarks.bench_x", ["/x/bench_x.py", "--n", "256,4096", "--tag", "a b"])
    row = emit(what="w", rate=1.5)
    printed = json.loads(capsys.readouterr().out)
    assert printed == row
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", row["date"])
    assert row["command"] == "python -m benchmarks.bench_x --n 256,4096 --tag 'a b'"
    assert row["what"] == "w" and row["rate"] == 1.5
    assert row["device"] and row["machine"]["jax"] == jax.__version__


def test_emit_keeps_the_callers_date_and_command(monkeypatch, capsys):
    _run_as(monkeypatch, None, ["bench_y.py", "--quick"])
    row = emit({"what": "w", "date": "2026-01-02T03:04:05Z"}, command="given")
    assert row["date"] == "2026-01-02T03:04:05Z" and row["command"] == "given"
    row = emit(what="w")
    assert row["command"] == "python bench_y.py --quick"
    capsys.readouterr()


def test_dot_flops_counts_scans_conds_and_gradients():
    a, w = jnp.ones((4, 3)), jnp.ones((3, 5))
    one = 2 * 4 * 5 * 3
    assert dot_flops(jax.make_jaxpr(jnp.matmul)(a, w)) == one

    def scanned(a, w):
        return jax.lax.scan(lambda c, _: (c, jnp.sum(a @ w)), 0.0, None, length=7)[1]

    assert dot_flops(jax.make_jaxpr(jax.jit(scanned))(a, w)) == 7 * one

    def cond(p, a, w):  # the costlier branch: two products
        return jax.lax.cond(p, lambda: a @ w, lambda: (a @ w) @ jnp.ones((5, 5)))

    assert dot_flops(jax.make_jaxpr(cond)(True, a, w)) == one + 2 * 4 * 5 * 5
    # d/dw sum(a @ w) = a^T @ ones: forward product plus one more of the same size
    grad = jax.make_jaxpr(jax.grad(lambda w: jnp.sum(a @ w)))(w)
    assert dot_flops(grad) == 2 * one
    # batched: [b, m, k] @ [b, k, n]
    bm = jax.make_jaxpr(jnp.matmul)(jnp.ones((2, 4, 3)), jnp.ones((2, 3, 5)))
    assert dot_flops(bm) == 2 * one
