"""The ids and prefixes every jaxrl install knows, registered with
:func:`jaxrl.envs.register` when :mod:`jaxrl.envs` is imported: one prefix per adapter
module (``"gymnasium:"``, ``"brax:"``, ...; each suite imported when first used), the
partially observed tasks, and the built-in multi-agent climbing game."""

from __future__ import annotations

import functools

from jaxrl.envs.multiagent import make_climbing
from jaxrl.envs.partial import MaskObservation
from jaxrl.envs.registry import make, register, register_adapter

ADAPTERS = ("gymnasium", "pgx", "brax", "playground", "craftax", "navix", "xminigrid", "jumanji", "envpool", "jaxmarl")


def masked(env_id: str, indices, **overrides):
    """``make(env_id, **overrides)`` seeing only the observation entries ``indices``:
    the factory of the masked ids. Returns ``(env, env_params)``."""
    env, params = make(env_id, **overrides)
    return MaskObservation(env, indices), params


def register_builtins() -> None:
    """Register every built-in prefix and id (``replace``: importing twice is harmless)."""
    for suite in ADAPTERS:
        register_adapter(suite)
    # CartPole's observation is [x, x_dot, theta, theta_dot]: positions without velocities.
    register("MaskedCartPole-v1", functools.partial(masked, "CartPole-v1", (0, 2)), replace=True)
    # Pendulum's observation is [cos theta, sin theta, theta_dot]: the angle without its velocity.
    register("MaskedPendulum-v1", functools.partial(masked, "Pendulum-v1", (0, 1)), replace=True)
    register("MultiAgentClimbing-v0", make_climbing, replace=True)


register_builtins()
