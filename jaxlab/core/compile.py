"""The XLA compile options jaxlab compiles its programs with, and ``jit`` that applies them.

On the CPU backend, XLA hands dot, elementwise and reduction fusions to YNNPACK by default
(``--xla_cpu_experimental_ynn_fusion_type``). For dots that pays; for jaxlab's elementwise-heavy
programs (the physics solver's sequential impulses, observation building, the PPO update's
optimizer and activations) XLA's own fused loops are faster. jaxlab therefore compiles with YNN
fusions for dots only; turning YNN fusions off entirely would slow the dots (the entity
transformer's update). Rates are recorded with the options in force on every line of
``docs/results/core_speed_cpu.md`` and ``docs/results/ppo_cpu.md`` (``compiler_options``).

The option changes which kernels run, not the program: results agree to float32 round-off (the
physics fidelity tests pass under both). It is applied only where jaxlab compiles (the shared
training loop, the engine's ``make_step``, Kinetix evaluation, the benchmarks); a program a user
jits with ``jax.jit`` gets XLA's defaults unless it uses :func:`jit`. Off the CPU backend, when
``XLA_FLAGS`` already sets the YNN option (the user's choice wins), when ``JAXLAB_XLA_DEFAULTS``
is set to anything but ``0``, or when this jaxlib does not know the option, no options are
passed.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

YNN_OPTION = "xla_cpu_experimental_ynn_fusion_type"
CPU_OPTIONS = {YNN_OPTION: "LIBRARY_FUSION_TYPE_DOT"}


@functools.cache
def compiler_options() -> dict[str, str] | None:
    """The options :func:`jit` passes to XLA here (None: XLA's defaults). Decided once per
    process: the backend, ``XLA_FLAGS`` and ``JAXLAB_XLA_DEFAULTS`` are read on the first call."""
    if os.environ.get("JAXLAB_XLA_DEFAULTS", "0") != "0":
        return None
    if YNN_OPTION in os.environ.get("XLA_FLAGS", ""):
        return None
    if jax.default_backend() != "cpu":
        return None
    try:
        jax.jit(lambda x: x + 1, compiler_options=CPU_OPTIONS).lower(jnp.zeros(())).compile()
    except Exception:  # noqa: BLE001 - an older or newer jaxlib without this option
        return None
    return dict(CPU_OPTIONS)


try:  # private, but the exact test; the fallback misses a nested call without traced arguments
    from jax._src.core import trace_state_clean as _trace_state_clean
except ImportError:  # pragma: no cover - a jax without it
    _trace_state_clean = None


def _at_top_level(args, kwargs) -> bool:
    """Whether a call runs outside any trace (so it compiles its own program)."""
    if _trace_state_clean is not None:
        return _trace_state_clean()
    return not any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves((args, kwargs)))


class _Jit:
    """``jax.jit(fun, ...)`` created on first use, so that building one (e.g. at import) does not
    start a backend before the caller has chosen its platform and flags."""

    def __init__(self, fun: Callable, kwargs: dict[str, Any]):
        self._fun, self._kwargs = fun, kwargs
        functools.update_wrapper(self, fun)

    @functools.cached_property
    def _jitted(self):
        kw = dict(self._kwargs)
        opts = {**(compiler_options() or {}), **(kw.pop("compiler_options", None) or {})}
        return jax.jit(self._fun, compiler_options=opts or None, **kw)

    @functools.cached_property
    def _nested(self):
        kw = dict(self._kwargs)
        kw.pop("compiler_options", None)
        return jax.jit(self._fun, **kw)

    def __call__(self, *args, **kwargs):
        # Inside another trace (a jitted caller) XLA compiles the caller's program, with the
        # caller's options; jax refuses compiler_options on a nested jit.
        if _at_top_level(args, kwargs):
            return self._jitted(*args, **kwargs)
        return self._nested(*args, **kwargs)

    def __getattr__(self, name: str):
        if name.startswith("__") or name in ("_fun", "_kwargs", "_jitted", "_nested"):
            raise AttributeError(name)
        return getattr(self._jitted, name)


def jit(fun: Callable | None = None, **kwargs: Any):
    """``jax.jit(fun, compiler_options=compiler_options(), **kwargs)``, made on first use (call,
    ``lower``, ...); also a decorator, with or without keyword arguments. Explicit
    ``compiler_options`` are merged over jaxlab's."""
    if fun is None:
        return functools.partial(jit, **kwargs)
    return _Jit(fun, kwargs)
