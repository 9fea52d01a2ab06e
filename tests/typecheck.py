"""The runtime type checker of the test suite: beartype under jaxtyping's import hook.

Switched on in one place, ``tests/conftest.py`` (``TYPECHECK``), which installs jaxtyping's import
hook for the ``jaxlab`` package with :func:`checker` before any jaxlab module is imported: every
function and dataclass of jaxlab is then wrapped by ``jaxtyping.jaxtyped(typechecker=checker)``,
so a wrong shape, dtype or type at a module boundary fails the test that passed it
(``docs/types.md`` states the conventions).

:func:`checker` is ``beartype`` with two deliberate choices:

* the PEP 484 numeric tower (``is_pep484_tower``): an ``int`` is a valid ``float`` and a
  ``float`` a valid ``complex``, as the typing spec says (``lr: float = 1`` is a float field);
* the ``__init__`` of two kinds of dataclass is not checked, because something else owns their
  fields:

  - pytree dataclasses (``flax.struct.dataclass``): JAX rebuilds them through ``__init__`` with
    batched (``vmap``), abstract (``eval_shape``: ``ShapeDtypeStruct``) or traced leaves, and
    ``tree_map`` may put anything in a field; their annotations give the per-instance shapes of
    a concrete state. Functions that take or return them are still checked (the class, and any
    annotated array arguments).
  - config dataclasses (frozen dataclasses with a ``__post_init__``): the config layer owns
    their validation (dacite's strict typing when a config is resolved, then ``__post_init__``
    raising :class:`jaxlab.core.config.ConfigError` naming the field and the value). Checking
    ``__init__`` first would replace that house error by a beartype error in the tests only,
    i.e. test a different error path than users get.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Iterator
from typing import Any

import jaxtyping
from beartype import BeartypeConf, beartype

_CONF = BeartypeConf(is_pep484_tower=True)


def _init_owned_elsewhere(cls: type) -> bool:
    """Pytree dataclasses and config dataclasses (see the module docstring)."""
    if getattr(cls, "_flax_dataclass", False):
        return True
    params = getattr(cls, "__dataclass_params__", None)
    return (
        dataclasses.is_dataclass(cls)
        and params is not None
        and params.frozen
        and hasattr(cls, "__post_init__")
    )


def checker(fn: Callable[..., Any]) -> Callable[..., Any]:
    """beartype (numeric tower) for ``fn``; a dataclass ``__init__`` skips the check for the
    classes whose fields are owned elsewhere (decided per call: the class is not bound yet when
    its ``__init__`` is decorated)."""
    checked = beartype(fn, conf=_CONF)
    if fn.__name__ != "__init__":
        return checked

    @functools.wraps(fn)
    def init(self, *args, **kwargs):
        if _init_owned_elsewhere(type(self)):
            return fn(self, *args, **kwargs)
        return checked(self, *args, **kwargs)

    return init


def unchecked(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` without the runtime check (``fn`` itself when the checks are off).

    For the tests of a library function's own validation (bad input -> the house error naming
    the argument): with the checks on, a wrong type or shape would stop at the checker before
    the function's validation runs, so such a test calls the function as a user's code runs
    it, unchecked."""
    while _is_jaxtyped_wrapper(fn):
        fn = fn.__wrapped__
    return fn


@contextlib.contextmanager
def checks_off() -> Iterator[None]:
    """The runtime checks off inside the block (jaxtyping's ``jaxtyping_disable``, read per call).

    :func:`unchecked` for what a test cannot unwrap: a flax module's ``__call__`` reached through
    ``init``/``apply``, whose own validation (bad input -> its named error) the test exercises."""
    before = jaxtyping.config.jaxtyping_disable
    jaxtyping.config.update("jaxtyping_disable", True)
    try:
        yield
    finally:
        jaxtyping.config.update("jaxtyping_disable", before)


def _is_jaxtyped_wrapper(fn: Any) -> bool:
    code = getattr(fn, "__code__", None)
    return (
        hasattr(fn, "__wrapped__")
        and code is not None
        and "jaxtyping" in code.co_filename.replace("\\", "/").split("/")
    )
