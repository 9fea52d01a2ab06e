"""jaxlab's compile options (jaxlab.core.compile): which options, when they are withheld, that
``jit`` is lazy, and that the physics engine compiled with them agrees with XLA's defaults to
float32 round-off over a contact-rich rollout."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core import compile as jc


@pytest.fixture
def fresh_options(monkeypatch):
    monkeypatch.delenv("JAXLAB_XLA_DEFAULTS", raising=False)
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    options = jc.compiler_options
    options.cache_clear()
    yield monkeypatch
    options.cache_clear()


def test_cpu_keeps_ynn_fusions_for_dots_only(fresh_options):
    assert jax.default_backend() == "cpu"
    assert jc.compiler_options() == {jc.YNN_OPTION: "LIBRARY_FUSION_TYPE_DOT"}


@pytest.mark.parametrize(
    "name, value",
    [
        ("JAXLAB_XLA_DEFAULTS", "1"),
        (
            "XLA_FLAGS",
            "--xla_force_host_platform_device_count=8 --xla_cpu_experimental_ynn_fusion_type=",
        ),
    ],
)
def test_options_withheld_when_the_user_chose(fresh_options, name, value):
    fresh_options.setenv(name, value)
    assert jc.compiler_options() is None
    # and jit still works, with XLA's defaults
    assert float(jc.jit(lambda x: x * 2)(jnp.float32(3))) == 6.0


def test_jit_is_lazy_and_merges_explicit_options(fresh_options):
    calls = []

    def spy():
        calls.append(1)
        return {jc.YNN_OPTION: "LIBRARY_FUSION_TYPE_DOT"}

    fresh_options.setattr(jc, "compiler_options", spy)
    f = jc.jit(lambda x, n: x * n, static_argnums=1)
    assert calls == []  # building it decides nothing (import-time jits start no backend)
    assert float(f(jnp.float32(2), 3)) == 6.0 and calls == [1]
    assert f.lower(jnp.float32(2), 3).compile() is not None
    g = jc.jit(lambda x: x + 1, compiler_options={jc.YNN_OPTION: ""})
    assert float(g(jnp.float32(1))) == 2.0


def test_jit_nested_in_another_jit_compiles_with_the_callers_options(fresh_options):
    inner = jc.jit(lambda x, n: x * n, static_argnums=1)
    assert float(jax.jit(lambda x: inner(x, 3) + 1)(jnp.float32(2))) == 7.0
    assert float(jc.jit(lambda x: inner(x, 3) + 1)(jnp.float32(2))) == 7.0
    assert float(jax.vmap(lambda x: inner(x, 2))(jnp.ones(3)).sum()) == 6.0
    assert float(inner(jnp.float32(2), 3)) == 6.0


def test_engine_under_jaxlab_options_matches_xla_defaults():
    """20 steps of the L-capacity angry-birds scene (the solver's multi-batch path), 8 scenes with
    perturbed velocities: positions agree with the default compile to 1e-4 m."""
    from benchmarks.bench_physics import load_scene
    from jaxlab import physics as px

    sim, params, sp = load_scene("l")
    n = 8
    key = jax.random.PRNGKey(0)
    states = jax.tree.map(lambda x: jnp.broadcast_to(x, (n, *jnp.shape(x))), sim)
    dv = 0.5 * jax.random.normal(key, states.polygon.velocity.shape)
    states = states.replace(polygon=states.polygon.replace(velocity=states.polygon.velocity + dv))
    actions = jnp.zeros((sp.num_joints + sp.num_thrusters,), jnp.float32)

    def run(s):
        def body(s, _):
            return jax.vmap(lambda x: px.step(x, params, sp, actions)[0])(s), None

        return jax.lax.scan(body, s, None, length=20)[0]

    ours = jc.jit(run, compiler_options=jc.CPU_OPTIONS)(states)
    default = jax.jit(run)(states)
    for a, b in ((ours.polygon, default.polygon), (ours.circle, default.circle)):
        np.testing.assert_allclose(np.asarray(a.position), np.asarray(b.position), atol=1e-4)
        np.testing.assert_allclose(np.asarray(a.rotation), np.asarray(b.rotation), atol=1e-4)
