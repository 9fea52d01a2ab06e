"""Shared array aliases for jaxtyping annotations at module boundaries.

Use the dimension names in docstrings too (``Float[Array, "batch seq dim"]``). The test suite
checks these annotations at run time (jaxtyping's import hook with beartype, switched in
``tests/conftest.py``), so a wrong shape at a module boundary fails a test; the conventions
(``Array`` inside, ``ArrayLike`` at public boundaries that accept NumPy) are in ``docs/types.md``.
"""

from __future__ import annotations

from typing import Any

import jax
from jaxtyping import Array, ArrayLike, Bool, Float, Int, PRNGKeyArray, PyTree, Scalar, UInt8

#: a PRNG key (legacy ``uint32[2]`` or typed key)
PRNGKey = PRNGKeyArray
#: a pytree of parameters (flax variables dict, task vector, ...)
Params = PyTree[Any]
#: a scalar float array (a loss, a metric)
FloatScalar = Float[Array, ""]
#: a scalar integer array (a step counter)
IntScalar = Int[Array, ""]
#: metrics of one step: name -> scalar (or small) array
Metrics = dict[str, Array]
#: a batch of token ids
Tokens = Int[Array, "batch seq"]
#: an ``[H, W, 3]`` uint8 image
Image = UInt8[Array, "height width 3"]
#: a mesh
Mesh = jax.sharding.Mesh

__all__ = [
    "Array",
    "ArrayLike",
    "Bool",
    "Float",
    "FloatScalar",
    "Image",
    "Int",
    "IntScalar",
    "Mesh",
    "Metrics",
    "PRNGKey",
    "Params",
    "PyTree",
    "Scalar",
    "Tokens",
    "UInt8",
]
