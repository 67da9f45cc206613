"""Environments: ``make`` for every gymnax id and every Gymnasium id (``"gymnasium:<id>"``,
stepped on the host: see :mod:`jaxrl.envs.gymnasium`), ``EnvSpec``, and pure wrappers.

The env API is gymnax >= 1.0: ``reset(key, params) -> (obs, state)`` and
``step(key, state, action, params) -> (obs, state, reward, terminated, truncated, info)``
with auto-reset and the pre-reset observation in ``info["final_observation"]``.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools

import gymnax
import numpy as np
from gymnax.environments import spaces

from jaxrl.envs.wrappers import (
    ClipAction,
    EpisodeStatistics,
    NormalizeObservation,
    RunningStats,
    ScaleReward,
    Wrapper,
    normalize,
    running_stats_init,
    running_stats_update,
)

__all__ = [
    "make",
    "EnvSpec",
    "spec",
    "config_spec",
    "registered_ids",
    "check_env_id",
    "steps_on_host",
    "ClipAction",
    "EpisodeStatistics",
    "NormalizeObservation",
    "ScaleReward",
    "Wrapper",
    "RunningStats",
    "running_stats_init",
    "running_stats_update",
    "normalize",
]


def registered_ids() -> list[str]:
    """Every env id ``make`` accepts."""
    return list(gymnax.registered_envs)


GYMNASIUM_PREFIX = "gymnasium:"


def steps_on_host(env_id: str) -> bool:
    """Whether ``env_id``'s env runs on the host (its state is a handle, not arrays)."""
    return env_id.startswith(GYMNASIUM_PREFIX)


def _gymnasium_bridge():
    # Imported on demand: Gymnasium is an optional dependency.
    from jaxrl.envs import gymnasium as bridge

    return bridge


def check_env_id(env_id: str) -> None:
    """Raise ``ValueError`` (with close matches) unless ``env_id`` is known: a gymnax id,
    or ``"gymnasium:<id>"`` for any id Gymnasium knows."""
    if not isinstance(env_id, str):
        raise TypeError(f"env_id must be a string, got {env_id!r}")
    if env_id.startswith(GYMNASIUM_PREFIX):
        _gymnasium_bridge().check_id(env_id[len(GYMNASIUM_PREFIX) :])
        return
    ids = registered_ids()
    if env_id not in ids:
        close = difflib.get_close_matches(env_id, ids, n=3, cutoff=0.4)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise ValueError(f"unknown env_id {env_id!r}.{hint} Known ids: {', '.join(ids)}")


def make(env_id: str, **env_param_overrides):
    """Create a gymnax env and its params, overriding any ``EnvParams`` field.

    ``make("CartPole-v1", max_steps_in_episode=200)`` gives the classic 200-step
    CartPole (time-limit override). Returns ``(env, env_params)``.

    ``make("gymnasium:<id>", **kwargs)`` gives any Gymnasium env with the same API,
    ``kwargs`` going to ``gymnasium.make`` (see :func:`jaxrl.envs.gymnasium.make`).
    """
    check_env_id(env_id)
    if env_id.startswith(GYMNASIUM_PREFIX):
        return _gymnasium_bridge().make(env_id[len(GYMNASIUM_PREFIX) :], **env_param_overrides)
    env, params = gymnax.make(env_id)
    if env_param_overrides:
        known = [f.name for f in dataclasses.fields(params)]
        unknown = sorted(set(env_param_overrides) - set(known))
        if unknown:
            raise ValueError(f"unknown env parameter(s) {unknown} for {env_id!r}; its parameters are {known}")
        params = params.replace(**env_param_overrides)
    return env, params


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """Static facts about an env's spaces.

    ``action_kind`` is ``"discrete"`` (``num_actions`` choices, integer actions of shape
    ``()``) or ``"continuous"`` (float actions of ``action_shape`` within
    ``[action_low, action_high]``).
    """

    obs_shape: tuple
    obs_dtype: np.dtype
    action_kind: str
    action_shape: tuple
    num_actions: int | None = None
    action_low: np.ndarray | None = None
    action_high: np.ndarray | None = None
    max_episode_steps: int | None = None

    @property
    def discrete(self) -> bool:
        return self.action_kind == "discrete"

    def from_unit(self, action):
        """Map actions in ``[-1, 1]`` (a tanh policy's range) onto ``[action_low, action_high]``."""
        return self.action_low + 0.5 * (action + 1.0) * (self.action_high - self.action_low)

    def to_unit(self, action):
        """The inverse of :meth:`from_unit`: env actions onto ``[-1, 1]``."""
        return 2.0 * (action - self.action_low) / (self.action_high - self.action_low) - 1.0


def spec(env, env_params) -> EnvSpec:
    """Describe ``env``'s observation and action spaces."""
    obs_space = env.observation_space(env_params)
    action_space = env.action_space(env_params)
    max_steps = getattr(env_params, "max_steps_in_episode", None)
    common = dict(
        obs_shape=tuple(obs_space.shape),
        obs_dtype=np.dtype(obs_space.dtype),
        max_episode_steps=int(max_steps) if max_steps is not None else None,
    )
    if isinstance(action_space, spaces.Discrete):
        return EnvSpec(action_kind="discrete", action_shape=(), num_actions=int(action_space.n), **common)
    if isinstance(action_space, spaces.Box):
        shape = tuple(action_space.shape)
        low = np.broadcast_to(np.asarray(action_space.low, np.float32), shape)
        high = np.broadcast_to(np.asarray(action_space.high, np.float32), shape)
        return EnvSpec(action_kind="continuous", action_shape=shape, action_low=low, action_high=high, **common)
    raise ValueError(f"unsupported action space {type(action_space).__name__} for {env.name}")


@functools.cache
def _cached_spec(env_id: str, env_kwargs: tuple) -> EnvSpec:
    return spec(*make(env_id, **dict(env_kwargs)))


def config_spec(config) -> EnvSpec:
    """The :class:`EnvSpec` of an algorithm config's ``env_id`` / ``env_kwargs`` (cached)."""
    return _cached_spec(config.env_id, config.env_kwargs)
