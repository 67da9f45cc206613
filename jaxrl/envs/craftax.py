"""Craftax, the JAX open-ended survival game, as gymnax-API envs: ``"craftax:<id>"``
(``pip install "jaxrl[craftax]"``).

``jaxrl.envs.make("craftax:Craftax-Classic-Symbolic-v1")`` is Craftax-Classic with its
flat symbolic observation (float32 ``[1345]``); the ids are those of craftax's
``make_craftax_env_from_name``: ``Craftax-Symbolic-v1`` (float32 ``[8268]``),
``Craftax-Classic-Symbolic-v1``, and the pixel variants ``Craftax-Pixels-v1`` (float32
``[130, 110, 3]``) and ``Craftax-Classic-Pixels-v1`` (float32 ``[63, 63, 3]``), all in
``[0, 1]``.

Craftax's own ``step`` reports one ``done`` for death, the end of the game (the final
boss beaten, in full Craftax) and its time limit ``max_timesteps`` alike. Here the time
limit is ``EnvParams.max_steps_in_episode`` (craftax's default: 100000 steps for
Craftax, 10000 for Craftax-Classic) and ends an episode ``truncated``; the game's own
ends are ``terminated`` (an episode that ends both ways at once is ``terminated``).
Everything else in a step is craftax's: ``step_env`` of craftax's env with
``max_timesteps`` set to ``max_steps_in_episode``, its reward, and its per-achievement
``info`` entries (``"Achievements/<name>"``: 100 for each achievement unlocked in an
episode that ends at this step, else 0).

``make``'s overrides set ``max_steps_in_episode`` or any field of craftax's
``EnvParams`` (held in :attr:`EnvParams.suite_params`), e.g. ``day_length``;
craftax's ``max_timesteps`` is ``max_steps_in_episode``.
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces

__all__ = ["ENV_IDS", "CraftaxEnv", "EnvParams", "check", "make", "require_craftax"]

# The ids of craftax's make_craftax_env_from_name (without auto-reset: the adapter resets).
ENV_IDS = (
    "Craftax-Symbolic-v1",
    "Craftax-Pixels-v1",
    "Craftax-Classic-Symbolic-v1",
    "Craftax-Classic-Pixels-v1",
)

_NEVER = jnp.iinfo(jnp.int32).max  # a craftax max_timesteps no episode reaches


def require_craftax():
    """craftax's ``craftax_env`` module, or an ImportError saying how to install it."""
    try:
        from craftax import craftax_env
    except ImportError as error:
        raise ImportError(
            f'"craftax:" envs need craftax ({error}); install it with pip install "jaxrl[craftax]"'
        ) from error
    return craftax_env


def check(name: str) -> None:
    """ValueError unless ``name`` is one of :data:`ENV_IDS`."""
    if name not in ENV_IDS:
        raise ValueError(f"unknown craftax env {name!r} (craftax:{name}); craftax ids: {', '.join(ENV_IDS)}")


@struct.dataclass
class EnvParams:
    """The time limit, and craftax's own ``EnvParams`` (whose ``max_timesteps`` is
    replaced by ``max_steps_in_episode``)."""

    max_steps_in_episode: int = 10000
    suite_params: Any = None


class CraftaxEnv(environment.Environment):
    """A Craftax game with the gymnax API (see the module's docstring). One env; batch
    with ``jax.vmap``. :attr:`craftax_env` is craftax's env (without auto-reset)."""

    def __init__(self, name: str):
        super().__init__()
        check(name)
        self.craftax_env = require_craftax().make_craftax_env_from_name(name, auto_reset=False)
        self.env_id = name

    @property
    def name(self) -> str:
        return f"craftax:{self.env_id}"

    @property
    def num_actions(self) -> int:
        return int(self.craftax_env.num_actions)

    @property
    def default_params(self) -> EnvParams:
        suite_params = self.craftax_env.default_params
        return EnvParams(max_steps_in_episode=int(suite_params.max_timesteps), suite_params=suite_params)

    def suite_params(self, params: EnvParams):
        """craftax's ``EnvParams`` for ``params``: ``max_timesteps`` is ``max_steps_in_episode``."""
        return params.suite_params.replace(max_timesteps=params.max_steps_in_episode)

    def _terminated(self, state, params: EnvParams) -> jax.Array:
        """craftax's game over without its time limit."""
        return self.craftax_env.is_terminal(state, params.suite_params.replace(max_timesteps=_NEVER))

    def reset_env(self, key, params):
        return self.craftax_env.reset_env(key, self.suite_params(params))

    def step_env(self, key, state, action, params):
        obs, state, reward, _, info = self.craftax_env.step_env(
            key, state, jnp.asarray(action, jnp.int32), self.suite_params(params)
        )
        info = {name: value for name, value in info.items() if name.startswith("Achievements/")}
        return obs, state, jnp.asarray(reward, jnp.float32), self._terminated(state, params), info

    def is_truncated(self, state, params):
        return (state.timestep >= params.max_steps_in_episode) & ~self._terminated(state, params)

    def observation_space(self, params=None):
        space = self.craftax_env.observation_space((self.default_params if params is None else params).suite_params)
        return spaces.Box(0.0, 1.0, tuple(space.shape), jnp.float32)

    def action_space(self, params=None):
        return spaces.Discrete(self.num_actions)


def make(name: str, **overrides):
    """``(CraftaxEnv(name), params)``: craftax's default params with ``overrides``
    (``max_steps_in_episode``, a positive int, and fields of craftax's ``EnvParams``)."""
    env = CraftaxEnv(name)
    params = env.default_params
    suite_fields = [f.name for f in dataclasses.fields(params.suite_params) if f.name != "max_timesteps"]
    if "max_timesteps" in overrides:
        raise ValueError(f"craftax:{name}: set the time limit with max_steps_in_episode, not max_timesteps")
    unknown = sorted(set(overrides) - {"max_steps_in_episode", *suite_fields})
    if unknown:
        raise ValueError(
            f"unknown env parameter(s) {unknown} for craftax:{name}; "
            f"its parameters are {['max_steps_in_episode', *suite_fields]}"
        )
    if "max_steps_in_episode" in overrides:
        params = params.replace(max_steps_in_episode=_positive_int(overrides.pop("max_steps_in_episode"), name))
    if overrides:
        params = params.replace(suite_params=params.suite_params.replace(**overrides))
    return env, params


def _positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"max_steps_in_episode must be a positive int for craftax:{name}, got {value!r}")
    return int(value)
