"""Action and observation spaces (gymnax style): ``sample(key)`` and ``contains(x)``, both jit-able.

Every space knows its ``shape`` and ``dtype``. ``contains`` returns a scalar JAX bool, so it can be
used inside ``jit``/``vmap``; a wrong shape or a wrong kind of dtype (integer vs float vs bool) is a
static mismatch and gives ``False``.

Spaces:
    * ``Discrete(n)``: integers ``0 <= x < n``, shape ``()``.
    * ``MultiDiscrete(nvec)``: integers ``0 <= x[i] < nvec[i]``, shape ``(len(nvec),)``.
    * ``Box(low, high, shape, dtype)``: arrays with ``low <= x <= high`` element-wise (bounds may be
      infinite; floats must not be NaN).
    * ``Dict(spaces, container)``: a mapping of named sub-spaces. ``container`` (for example a
      ``flax.struct.dataclass`` class) turns the sampled dict into the observation's own type;
      ``contains`` accepts a mapping or any object with the named attributes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, PRNGKeyArray


def _kind(dtype) -> str:
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return "b"
    if np.issubdtype(dtype, np.integer):
        return "i"
    if np.issubdtype(dtype, np.floating):
        return "f"
    return dtype.kind


class Space:
    """Base class: a set of values with a fixed ``shape`` and ``dtype``."""

    shape: tuple[int, ...]
    dtype: Any

    def sample(self, key: PRNGKeyArray) -> Any:
        """A random element of the space."""
        raise TypeError(f"{type(self).__name__} does not define sample()")

    def contains(self, x: Any) -> Bool[Array, ""]:
        """Whether ``x`` is an element of the space (a scalar JAX bool, jit-able)."""
        raise TypeError(f"{type(self).__name__} does not define contains()")


def _static_mismatch(x, shape, dtype) -> bool:
    x_shape = tuple(np.shape(x))
    if x_shape != tuple(shape):
        return True
    x_dtype = getattr(x, "dtype", None)
    if x_dtype is None:
        x_dtype = np.asarray(x).dtype
    kx, kd = _kind(x_dtype), _kind(dtype)
    if kd == "i":
        return kx not in ("i",)
    if kd == "b":
        return kx not in ("b",)
    return kx not in ("f", "i", "b")


class Discrete(Space):
    """Integers ``{0, ..., n - 1}`` (shape ``()``)."""

    def __init__(self, n: int, dtype=jnp.int32):
        if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
            raise ValueError(f"Discrete n={n!r}; expected a Python int >= 1")
        self.n = int(n)
        self.shape = ()
        self.dtype = dtype

    def sample(self, key: PRNGKeyArray) -> Array:
        """Uniform over ``{0, ..., n - 1}``."""
        return jax.random.randint(key, (), 0, self.n, dtype=self.dtype)

    def contains(self, x) -> Bool[Array, ""]:
        if _static_mismatch(x, self.shape, self.dtype):
            return jnp.asarray(False)
        x = jnp.asarray(x)
        return (x >= 0) & (x < self.n)

    def __repr__(self) -> str:
        return f"Discrete({self.n})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Discrete) and other.n == self.n

    def __hash__(self) -> int:
        return hash(("Discrete", self.n))


class MultiDiscrete(Space):
    """Integer vectors with ``0 <= x[i] < nvec[i]`` (shape ``(len(nvec),)``)."""

    def __init__(self, nvec, dtype=jnp.int32):
        nv = np.asarray(nvec)
        if (
            nv.ndim != 1
            or nv.size == 0
            or not np.issubdtype(nv.dtype, np.integer)
            or np.any(nv < 1)
        ):
            raise ValueError(
                f"MultiDiscrete nvec={nvec!r}; expected a non-empty 1-D list of ints >= 1"
            )
        self.nvec = nv.astype(np.int32)
        self.shape = (int(nv.size),)
        self.dtype = dtype

    def sample(self, key: PRNGKeyArray) -> Array:
        """Independent uniform choices ``x[i] ~ U{0, ..., nvec[i] - 1}``."""
        return jax.random.randint(key, self.shape, 0, jnp.asarray(self.nvec), dtype=self.dtype)

    def contains(self, x) -> Bool[Array, ""]:
        if _static_mismatch(x, self.shape, self.dtype):
            return jnp.asarray(False)
        x = jnp.asarray(x)
        return jnp.all((x >= 0) & (x < jnp.asarray(self.nvec)))

    def __repr__(self) -> str:
        return f"MultiDiscrete({self.nvec.tolist()})"

    def __eq__(self, other) -> bool:
        return isinstance(other, MultiDiscrete) and np.array_equal(other.nvec, self.nvec)

    def __hash__(self) -> int:
        return hash(("MultiDiscrete", tuple(self.nvec.tolist())))


class Box(Space):
    """Arrays of a fixed shape with ``low <= x <= high`` element-wise.

    ``low``/``high`` broadcast to ``shape`` and may be infinite. Sampling: uniform when both bounds
    are finite, ``low + Exp(1)`` / ``high - Exp(1)`` when only one is, standard normal otherwise;
    integer boxes sample uniformly from ``{low, ..., high}``; bool boxes are fair coin flips.
    """

    def __init__(self, low, high, shape: tuple[int, ...], dtype=jnp.float32):
        shape = tuple(int(s) for s in shape)
        try:
            lo = np.broadcast_to(np.asarray(low, np.float64), shape)
            hi = np.broadcast_to(np.asarray(high, np.float64), shape)
        except ValueError as e:
            raise ValueError(
                f"Box low/high do not broadcast to shape {shape}: low {np.shape(low)}, "
                f"high {np.shape(high)}"
            ) from e
        if np.any(lo > hi):
            raise ValueError(f"Box low={low!r} > high={high!r} somewhere; expected low <= high")
        self.low, self.high = lo, hi
        self.shape = shape
        self.dtype = dtype

    def sample(self, key: PRNGKeyArray) -> Array:
        kind = _kind(self.dtype)
        if kind == "b":
            return jax.random.bernoulli(key, 0.5, self.shape)
        if kind == "i":
            lo = np.clip(self.low, -(2**31), 2**31 - 2).astype(np.int64)
            hi = np.clip(self.high, -(2**31), 2**31 - 2).astype(np.int64)
            return jax.random.randint(
                key, self.shape, jnp.asarray(lo, jnp.int32), jnp.asarray(hi + 1, jnp.int32)
            ).astype(self.dtype)
        k_u, k_e, k_n = jax.random.split(key, 3)
        lo_f, hi_f = np.isfinite(self.low), np.isfinite(self.high)
        low = jnp.asarray(np.where(lo_f, self.low, 0.0), jnp.float32)
        high = jnp.asarray(np.where(hi_f, self.high, 0.0), jnp.float32)
        u = jax.random.uniform(k_u, self.shape, minval=0.0, maxval=1.0)
        e = jax.random.exponential(k_e, self.shape)
        n = jax.random.normal(k_n, self.shape)
        x = jnp.where(
            lo_f & hi_f,
            low + u * (high - low),
            jnp.where(lo_f, low + e, jnp.where(hi_f, high - e, n)),
        )
        return x.astype(self.dtype)

    def contains(self, x) -> Bool[Array, ""]:
        if _static_mismatch(x, self.shape, self.dtype):
            return jnp.asarray(False)
        x = jnp.asarray(x)
        if _kind(x.dtype) == "b":
            x = x.astype(jnp.float32)
        ok = (x >= jnp.asarray(self.low, jnp.float32)) & (x <= jnp.asarray(self.high, jnp.float32))
        return jnp.all(ok)

    def __repr__(self) -> str:
        lo = float(self.low.min()) if self.low.size else 0.0
        hi = float(self.high.max()) if self.high.size else 0.0
        return f"Box({lo}, {hi}, {self.shape}, {np.dtype(self.dtype).name})"

    def __eq__(self, other) -> bool:
        return (
            isinstance(other, Box)
            and other.shape == self.shape
            and np.dtype(other.dtype) == np.dtype(self.dtype)
            and np.array_equal(other.low, self.low)
            and np.array_equal(other.high, self.high)
        )

    def __hash__(self) -> int:
        return hash(("Box", self.shape, np.dtype(self.dtype).name))


class Dict(Space):
    """A named collection of spaces.

    Args:
        spaces: name -> sub-space (order is kept).
        container: optional callable ``container(**values)`` turning a sampled dict into the
            observation's type (for example a ``flax.struct.dataclass``); default a plain dict.
    """

    def __init__(self, spaces: Mapping[str, Space], container: Callable[..., Any] | None = None):
        if not spaces:
            raise ValueError("Dict spaces={}; expected at least one named sub-space")
        for name, s in spaces.items():
            if not isinstance(s, Space):
                raise ValueError(f"Dict spaces[{name!r}]={s!r}; expected a Space")
        self.spaces = dict(spaces)
        self.container = container
        self.shape = ()
        self.dtype = None

    def sample(self, key: PRNGKeyArray) -> Any:
        keys = jax.random.split(key, len(self.spaces))
        values = {n: s.sample(k) for (n, s), k in zip(self.spaces.items(), keys, strict=True)}
        return self.container(**values) if self.container is not None else values

    def contains(self, x) -> Bool[Array, ""]:
        ok = jnp.asarray(True)
        for name, s in self.spaces.items():
            if isinstance(x, Mapping):
                if name not in x:
                    return jnp.asarray(False)
                v = x[name]
            elif hasattr(x, name):
                v = getattr(x, name)
            else:
                return jnp.asarray(False)
            ok = ok & s.contains(v)
        return ok

    def __getitem__(self, name: str) -> Space:
        return self.spaces[name]

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.spaces.items())
        return f"Dict({inner})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Dict) and other.spaces == self.spaces

    def __hash__(self) -> int:
        return hash(("Dict", tuple(self.spaces)))
