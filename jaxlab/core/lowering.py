"""Ahead-of-time lowering of a recipe's train step for a mesh (e.g. a TPU slice's, simulated on
CPU devices): catches sharding, shape and memory-layout errors without the hardware.

Every caller that lowers a train step (the TPU-config tests, ``jaxlab lower``) uses
:func:`lower`; it knows nothing of any recipe: the parts give the abstract batch and the state
shardings.
"""

from __future__ import annotations

from typing import Any

import jax

from jaxlab.core import run as run_lib
from jaxlab.core.recipe import Parts, Recipe


def lower_step(
    recipe: Recipe,
    cfg: Any,
    mesh: jax.sharding.Mesh,
    parts: Parts | None = None,
    state: Any = None,
) -> jax.stages.Lowered:
    """Lowers ``recipe``'s train step for ``cfg`` on ``mesh`` from abstract values only, without
    compiling it: the shapes, dtypes and every sharding annotation are checked here; the SPMD
    partitioner (which inserts the cross-device collectives) runs in :func:`lower`.

    The state is the abstract ``init`` output in the parts' state shardings, the batch is
    ``Parts.abstract_batch`` (``None`` for recipes without data); the state is donated as in
    the loop. ``parts`` (the recipe's parts built for ``cfg`` and ``mesh``) and ``state``
    (:func:`jaxlab.core.run.abstract_state` of them) are made here when None; a caller that
    has them saves the build and the trace of ``init``."""
    parts = recipe.parts(cfg, mesh) if parts is None else parts
    if state is None:
        state = run_lib.abstract_state(parts, jax.random.PRNGKey(cfg.seed))
    state_sh = jax.tree.map(lambda x: getattr(x, "sharding", None), state)
    batch = parts.abstract_batch
    batch_sh = None if batch is None else jax.tree.map(lambda x: x.sharding, batch)
    if parts.state_sharding is None:
        step = jax.jit(parts.train_step, donate_argnums=0)
    else:
        step = jax.jit(
            parts.train_step,
            in_shardings=(state_sh, batch_sh),
            out_shardings=(state_sh, None),
            donate_argnums=0,
        )
    return step.lower(state, batch)


def lower(recipe: Recipe, cfg: Any, mesh: jax.sharding.Mesh) -> jax.stages.Compiled:
    """Compiles ``recipe``'s train step for ``cfg`` on ``mesh`` from abstract values only
    (:func:`lower_step`, then XLA with the SPMD partitioner). Returns the compiled executable
    (``.memory_analysis()``, ``.as_text()``)."""
    return lower_step(recipe, cfg, mesh).compile()
