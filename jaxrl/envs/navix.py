"""NAVIX's MiniGrid tasks as gymnax-API envs: ``"navix:<id>"`` (``pip install "jaxrl[navix]"``).

``jaxrl.envs.make("navix:Navix-Empty-5x5-v0")`` is NAVIX's env of that id (any id of
``navix.registry()``) with its default observation, the fully observed symbolic grid
(uint8 ``[height, width, 3]``: object, colour and state of each cell), and its 7
actions. ``make(id, observation=...)`` picks another of NAVIX's observation functions:
``"symbolic"``, ``"symbolic_first_person"``, ``"categorical"`` (int32 ``[height,
width]``), ``"categorical_first_person"``, ``"rgb"`` or ``"rgb_first_person"`` (uint8
images).

Each ``step`` is NAVIX's transition (``Environment._step``: the move, NAVIX's reward,
its step type); NAVIX's ``TERMINATION`` step type is ``terminated`` and the time limit
``EnvParams.max_steps_in_episode`` (NAVIX's ``max_steps``, default 100) ends an episode
``truncated`` (NAVIX's ``TRUNCATION``; an episode that ends both ways at once is
``terminated``, as in NAVIX). NAVIX resets a done episode on the following step; here
the reset happens in the same step, from the step's key, and the observation that ended
the episode is ``info["final_observation"]``. Tasks with moving obstacles draw their
moves from the key NAVIX keeps in its state, which each reset draws afresh.

The env state is NAVIX's ``Timestep``; its ``t`` counts the episode's steps.
"""

from __future__ import annotations

import numbers

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment, spaces

__all__ = ["OBSERVATIONS", "NavixEnv", "EnvParams", "check", "make", "registered_ids", "require_navix"]

# NAVIX's observation functions (navix.observations) make's ``observation`` can name.
OBSERVATIONS = (
    "symbolic",
    "symbolic_first_person",
    "categorical",
    "categorical_first_person",
    "rgb",
    "rgb_first_person",
)
DEFAULT_MAX_STEPS = 100  # navix.make's default max_steps


def require_navix():
    """The ``navix`` module, or an ImportError saying how to install it."""
    try:
        import navix
    except ImportError as error:
        raise ImportError(f'"navix:" envs need navix ({error}); install it with pip install "jaxrl[navix]"') from error
    return navix


def registered_ids() -> list[str]:
    """Every id NAVIX registers."""
    return list(require_navix().registry())


def check(name: str) -> None:
    """ValueError unless NAVIX registers ``name``."""
    ids = registered_ids()
    if name not in ids:
        raise ValueError(f"unknown navix env {name!r} (navix:{name}); navix ids: {', '.join(ids)}")


@struct.dataclass
class EnvParams:
    max_steps_in_episode: int = DEFAULT_MAX_STEPS


class NavixEnv(environment.Environment):
    """A NAVIX env with the gymnax API (see the module's docstring). One env; batch with
    ``jax.vmap``. :attr:`navix_env` is NAVIX's env."""

    def __init__(self, name: str, max_steps: int = DEFAULT_MAX_STEPS, observation: str = "symbolic"):
        super().__init__()
        check(name)
        if observation not in OBSERVATIONS:
            raise ValueError(f"unknown navix observation {observation!r}; choose one of {', '.join(OBSERVATIONS)}")
        navix = require_navix()
        self.navix_env = navix.make(name, max_steps=max_steps, observation_fn=getattr(navix.observations, observation))
        self.env_id = name
        self.observation = observation
        self.max_steps = max_steps

    @property
    def name(self) -> str:
        return f"navix:{self.env_id}"

    @property
    def num_actions(self) -> int:
        return len(self.navix_env.action_set)

    @property
    def default_params(self) -> EnvParams:
        return EnvParams(max_steps_in_episode=self.max_steps)

    def _terminated(self, timestep) -> jax.Array:
        return timestep.step_type == 2  # navix's StepType.TERMINATION

    def reset_env(self, key, params):
        timestep = self.navix_env.reset(key)
        return timestep.observation, timestep

    def step_env(self, key, state, action, params):
        timestep = self.navix_env._step(state, jnp.asarray(action, jnp.int32))
        reward = jnp.asarray(timestep.reward, jnp.float32)
        return timestep.observation, timestep, reward, self._terminated(timestep), {}

    def is_truncated(self, state, params):
        return (state.t >= params.max_steps_in_episode) & ~self._terminated(state)

    def observation_space(self, params=None):
        space = self.navix_env.observation_space
        dtype = jnp.dtype(space.dtype)
        return spaces.Box(
            np.asarray(space.minimum).astype(dtype), np.asarray(space.maximum).astype(dtype), tuple(space.shape), dtype
        )

    def action_space(self, params=None):
        return spaces.Discrete(self.num_actions)


def make(name: str, observation: str = "symbolic", **overrides):
    """``(NavixEnv(name), EnvParams(max_steps_in_episode))``: ``overrides`` may set
    ``max_steps_in_episode`` (a positive int; NAVIX's ``max_steps``); ``observation``
    names NAVIX's observation function (:data:`OBSERVATIONS`)."""
    check(name)
    unknown = sorted(set(overrides) - {"max_steps_in_episode"})
    if unknown:
        raise ValueError(
            f"unknown env parameter(s) {unknown} for navix:{name}; its parameters are ['max_steps_in_episode'] "
            "(and make's observation)"
        )
    max_steps = overrides.get("max_steps_in_episode", DEFAULT_MAX_STEPS)
    if isinstance(max_steps, bool) or not isinstance(max_steps, numbers.Integral) or max_steps < 1:
        raise ValueError(f"max_steps_in_episode must be a positive int for navix:{name}, got {max_steps!r}")
    env = NavixEnv(name, int(max_steps), observation)
    return env, env.default_params
