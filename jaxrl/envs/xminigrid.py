"""XLand-MiniGrid's MiniGrid tasks as gymnax-API envs: ``"xminigrid:<id>"``
(``pip install "jaxrl[xminigrid]"``).

``jaxrl.envs.make("xminigrid:MiniGrid-Empty-6x6")`` is ``xminigrid.make`` of that id:
any of xminigrid's ``MiniGrid-*`` ids. The observation is xminigrid's egocentric view,
uint8 ``[view_size, view_size, 2]`` (tile id and colour of each cell in view; view_size
7 by default), and there are 6 actions.

Each ``step`` is xminigrid's ``step`` (the move, the rules, the goal check, and its
reward ``1 - 0.9 * steps / max_steps`` on success); xminigrid's goal (a step with
discount 0) is ``terminated`` and the time limit ``EnvParams.max_steps_in_episode``
(xminigrid's ``max_steps``, whose default depends on the task) ends an episode
``truncated`` (an episode that ends both ways at once is ``terminated``). The reset
happens in the step that ends an episode, from the step's key, and the observation that
ended it is ``info["final_observation"]``.

``make``'s overrides set ``max_steps_in_episode`` (also xminigrid's ``max_steps``, so the
reward's scale) or another field of xminigrid's ``EnvParams`` (``view_size``,
``height``, ``width``, held in :attr:`EnvParams.suite_params`). The env state is
xminigrid's ``TimeStep``.

The XLand ids (``XLand-MiniGrid-R*``) are left out: their tasks are rulesets from
xminigrid's benchmarks, which are data downloaded at run time.
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment, spaces

__all__ = ["XMiniGridEnv", "EnvParams", "check", "make", "registered_ids", "require_xminigrid"]


def require_xminigrid():
    """The ``xminigrid`` module, or an ImportError saying how to install it."""
    try:
        import xminigrid
    except ImportError as error:
        raise ImportError(
            f'"xminigrid:" envs need xminigrid ({error}); install it with pip install "jaxrl[xminigrid]"'
        ) from error
    return xminigrid


def registered_ids() -> list[str]:
    """xminigrid's ``MiniGrid-*`` ids (the XLand ids need downloaded rulesets)."""
    return [env_id for env_id in require_xminigrid().registered_environments() if env_id.startswith("MiniGrid-")]


def check(name: str) -> None:
    """ValueError unless ``name`` is one of :func:`registered_ids`."""
    ids = registered_ids()
    if name not in ids:
        xland = " (XLand ids need rulesets downloaded at run time: not supported)" if name.startswith("XLand") else ""
        raise ValueError(f"unknown xminigrid env {name!r} (xminigrid:{name}){xland}; xminigrid ids: {', '.join(ids)}")


@struct.dataclass
class EnvParams:
    """The time limit, and xminigrid's own ``EnvParams`` (static fields; its
    ``max_steps`` is the reward's scale)."""

    max_steps_in_episode: int = 100
    suite_params: Any = None


class XMiniGridEnv(environment.Environment):
    """An xminigrid env with the gymnax API (see the module's docstring). One env; batch
    with ``jax.vmap``. :attr:`xminigrid_env` is xminigrid's env."""

    def __init__(self, name: str):
        super().__init__()
        check(name)
        self.xminigrid_env, self._suite_defaults = require_xminigrid().make(name)
        self.env_id = name

    @property
    def name(self) -> str:
        return f"xminigrid:{self.env_id}"

    @property
    def num_actions(self) -> int:
        return int(self.xminigrid_env.num_actions(self._suite_defaults))

    @property
    def default_params(self) -> EnvParams:
        return EnvParams(max_steps_in_episode=int(self._suite_defaults.max_steps), suite_params=self._suite_defaults)

    def _terminated(self, timestep) -> jax.Array:
        return timestep.last() & (timestep.discount == 0.0)

    def reset_env(self, key, params):
        timestep = self.xminigrid_env.reset(params.suite_params, key)
        return timestep.observation, timestep

    def step_env(self, key, state, action, params):
        timestep = self.xminigrid_env.step(params.suite_params, state, jnp.asarray(action, jnp.int32))
        reward = jnp.asarray(timestep.reward, jnp.float32)
        return timestep.observation, timestep, reward, self._terminated(timestep), {}

    def is_truncated(self, state, params):
        return (state.state.step_num >= params.max_steps_in_episode) & ~self._terminated(state)

    def observation_space(self, params=None):
        from xminigrid.core.constants import NUM_COLORS, NUM_TILES

        suite_params = (self.default_params if params is None else params).suite_params
        shape = tuple(self.xminigrid_env.observation_shape(suite_params))
        high = np.broadcast_to(np.array([NUM_TILES - 1, NUM_COLORS - 1], np.uint8), shape)
        return spaces.Box(np.zeros(shape, np.uint8), high, shape, jnp.uint8)

    def action_space(self, params=None):
        return spaces.Discrete(self.num_actions)


def make(name: str, **overrides):
    """``(XMiniGridEnv(name), params)``: xminigrid's default params of ``name`` with
    ``overrides`` (``max_steps_in_episode``, a positive int, and fields of xminigrid's
    ``EnvParams``)."""
    env = XMiniGridEnv(name)
    params = env.default_params
    suite_fields = [f.name for f in dataclasses.fields(params.suite_params) if f.name != "max_steps"]
    if "max_steps" in overrides:
        raise ValueError(f"xminigrid:{name}: set the time limit with max_steps_in_episode, not max_steps")
    unknown = sorted(set(overrides) - {"max_steps_in_episode", *suite_fields})
    if unknown:
        raise ValueError(
            f"unknown env parameter(s) {unknown} for xminigrid:{name}; "
            f"its parameters are {['max_steps_in_episode', *suite_fields]}"
        )
    max_steps = overrides.pop("max_steps_in_episode", params.max_steps_in_episode)
    if isinstance(max_steps, bool) or not isinstance(max_steps, numbers.Integral) or max_steps < 1:
        raise ValueError(f"max_steps_in_episode must be a positive int for xminigrid:{name}, got {max_steps!r}")
    for field in ("height", "width", "view_size"):
        value = overrides.get(field)
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1):
            raise ValueError(f"{field} must be a positive int for xminigrid:{name}, got {value!r}")
    suite_params = params.suite_params.replace(max_steps=int(max_steps), **overrides)
    return env, EnvParams(max_steps_in_episode=int(max_steps), suite_params=suite_params)
