"""The road users of the driving world: their box sizes by agent type, the ego's wheelbase and the
intelligent driver model (IDM, Treiber et al. 2000) that the neighbours and the rule-based expert
drive with."""

from __future__ import annotations

import jax.numpy as jnp

CAR_LENGTH, CAR_WIDTH = 4.5, 2.0
#: the neighbours' agent types (the original's one-hot order: vehicle, pedestrian, bicycle)
AGENT_TYPES: tuple[str, ...] = ("vehicle", "pedestrian", "bicycle")
#: (length, width) in metres of each agent type's box
AGENT_SIZES: tuple[tuple[float, float], ...] = ((CAR_LENGTH, CAR_WIDTH), (0.7, 0.7), (1.8, 0.7))
#: the range (m/s) a neighbour's IDM desired speed is drawn from, per agent type
AGENT_SPEEDS: tuple[tuple[float, float], ...] = ((4.0, 9.0), (1.0, 1.8), (3.0, 6.0))
WHEELBASE = 2.7
#: IDM parameters: maximal acceleration a_max and comfortable braking b (m/s^2), jam distance
#: s0 (m), default time headway T (s).
IDM = dict(a_max=1.5, b=2.0, s0=2.0, T=1.0)


def idm(v, v0, gap, v_lead, headway=IDM["T"]):
    """IDM acceleration (the package docstring); ``headway`` is T."""
    dv = v - v_lead
    s_star = IDM["s0"] + v * headway + v * dv / (2 * jnp.sqrt(IDM["a_max"] * IDM["b"]))
    s_star = jnp.maximum(s_star, IDM["s0"])
    acc = IDM["a_max"] * (
        1 - (v / jnp.maximum(v0, 0.1)) ** 4 - (s_star / jnp.maximum(gap, 0.1)) ** 2
    )
    return jnp.clip(acc, -8.0, IDM["a_max"])


def agent_size(agent_type):
    """(..., 2) box (length, width) of agents of type ``agent_type`` (..., int; AGENT_TYPES)."""
    return jnp.asarray(AGENT_SIZES, jnp.float32)[agent_type]
