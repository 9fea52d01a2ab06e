"""Kinetix: 2D physics control tasks on ``jaxlab.physics`` (the original's env, levels and views).

Quick start::

    import jax
    from jaxlab.envs.kinetix import KinetixEnv, StaticEnvParams, load_level

    state, static_params, params = load_level("level.json")
    env = KinetixEnv(static_params, level=state, observation_type="symbolic_flat")
    obs, s = env.reset(jax.random.key(0), params)
    obs, s, reward, terminated, truncated, info = env.step(
        jax.random.key(1), s, env.noop_action(), params
    )
"""

from jaxlab.envs.kinetix.actions import (
    ACTION_TYPES,
    action_space,
    engine_actions,
    noop_action,
    process_action,
    random_action,
    to_unified,
)
from jaxlab.envs.kinetix.env import KinetixEnv, make_kinetix, make_kinetix_level
from jaxlab.envs.kinetix.generator import (
    GeneratorParams,
    make_sample_level,
    sample_level,
    sample_levels,
)
from jaxlab.envs.kinetix.levels import (
    Level,
    LevelFormatError,
    demo_level,
    expand_level,
    level_from_json,
    level_to_json,
    load_level,
    load_levels,
    make_reset_fn,
    save_level,
    stack_levels,
)
from jaxlab.envs.kinetix.library import load_library_level
from jaxlab.envs.kinetix.mutators import MUTATIONS, apply_mutations, mutate
from jaxlab.envs.kinetix.noop_filter import make_filtered_sampler, sample_filtered_levels
from jaxlab.envs.kinetix.observations import (
    OBSERVATION_TYPES,
    EntityObservation,
    PixelsObservation,
    flat_size,
    make_observation_fn,
    observation_space,
    padded_shape,
)
from jaxlab.envs.kinetix.render import make_render_pixels, save_gif, save_png, to_image
from jaxlab.envs.kinetix.state import (
    SIZES,
    EnvParams,
    EnvState,
    StaticEnvParams,
    create_empty_env,
    from_sim_state,
)

__all__ = [
    "ACTION_TYPES",
    "MUTATIONS",
    "OBSERVATION_TYPES",
    "SIZES",
    "EntityObservation",
    "EnvParams",
    "EnvState",
    "GeneratorParams",
    "KinetixEnv",
    "Level",
    "LevelFormatError",
    "PixelsObservation",
    "StaticEnvParams",
    "action_space",
    "apply_mutations",
    "create_empty_env",
    "demo_level",
    "engine_actions",
    "expand_level",
    "flat_size",
    "from_sim_state",
    "level_from_json",
    "level_to_json",
    "load_level",
    "load_library_level",
    "load_levels",
    "make_filtered_sampler",
    "make_kinetix",
    "make_kinetix_level",
    "make_observation_fn",
    "make_render_pixels",
    "make_reset_fn",
    "make_sample_level",
    "mutate",
    "noop_action",
    "observation_space",
    "padded_shape",
    "process_action",
    "random_action",
    "sample_filtered_levels",
    "sample_level",
    "sample_levels",
    "save_gif",
    "save_level",
    "save_png",
    "stack_levels",
    "to_image",
    "to_unified",
]
