"""Environments: ``make`` for every gymnax id, every id registered with :func:`register`
(such as the partially observed tasks of :mod:`jaxrl.envs.partial`) and every Gymnasium
id (``"gymnasium:<id>"``, stepped on the host: see :mod:`jaxrl.envs.gymnasium`),
``EnvSpec``, and pure wrappers.

The env API is gymnax >= 1.0: ``reset(key, params) -> (obs, state)`` and
``step(key, state, action, params) -> (obs, state, reward, terminated, truncated, info)``
with auto-reset and the pre-reset observation in ``info["final_observation"]``.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import numbers
from collections.abc import Callable

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
    "register",
    "HISTORY_KWARGS",
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
    "FrameStack",
    "MaskObservation",
]


GYMNASIUM_PREFIX = "gymnasium:"

# Ids registered with ``register``: id -> factory(**overrides) -> (env, env_params).
_REGISTRY: dict[str, Callable] = {}


def register(env_id: str, factory: Callable, replace: bool = False) -> None:
    """Make ``env_id`` known to :func:`make`: ``make(env_id, **overrides)`` then returns
    ``factory(**overrides)``, which must be ``(env, env_params)`` for a gymnax-API env.

    An id that already exists (a gymnax id or a registered one) is a ``ValueError``
    unless ``replace``; a registered id shadows the gymnax id of the same name.
    ``make``'s history arguments (:data:`HISTORY_KWARGS`) never reach ``factory``.
    """
    if not isinstance(env_id, str) or not env_id:
        raise TypeError(f"env_id must be a non-empty string, got {env_id!r}")
    if env_id.startswith(GYMNASIUM_PREFIX):
        raise ValueError(
            f"env ids starting with {GYMNASIUM_PREFIX!r} name Gymnasium envs; register {env_id!r} without it"
        )
    if not callable(factory):
        raise TypeError(f"factory must be callable as factory(**overrides) -> (env, env_params), got {factory!r}")
    if not replace and (env_id in _REGISTRY or env_id in gymnax.registered_envs):
        raise ValueError(f"env id {env_id!r} is already registered; pass replace=True to replace it")
    _REGISTRY[env_id] = factory


def registered_ids() -> list[str]:
    """Every env id ``make`` accepts except ``"gymnasium:<id>"``: registered ids first,
    then gymnax ids."""
    return list(_REGISTRY) + [env_id for env_id in gymnax.registered_envs if env_id not in _REGISTRY]


def steps_on_host(env_id: str) -> bool:
    """Whether ``env_id``'s env runs on the host (its state is a handle, not arrays)."""
    return env_id.startswith(GYMNASIUM_PREFIX)


def _gymnasium_bridge():
    # Imported on demand: Gymnasium is an optional dependency.
    from jaxrl.envs import gymnasium as bridge

    return bridge


def check_env_id(env_id: str) -> None:
    """Raise ``ValueError`` (with close matches) unless ``env_id`` is known: a registered
    id, a gymnax id, or ``"gymnasium:<id>"`` for any id Gymnasium knows."""
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


# make's keyword arguments that ask for a FrameStack around any env, with their defaults.
HISTORY_KWARGS = {"frame_stack": 1, "stack_action": False, "stack_reward": False}


def _pop_history_kwargs(kwargs: dict) -> dict:
    """Take :data:`HISTORY_KWARGS` out of ``kwargs`` (in place), checked."""
    history = {name: kwargs.pop(name, default) for name, default in HISTORY_KWARGS.items()}
    frame_stack = history["frame_stack"]
    if isinstance(frame_stack, bool) or not isinstance(frame_stack, numbers.Integral) or frame_stack < 1:
        raise ValueError(f"frame_stack must be an integer >= 1 (1: no stacking), got {frame_stack!r}")
    for name in ("stack_action", "stack_reward"):
        if not isinstance(history[name], (bool, np.bool_)):
            raise ValueError(f"{name} must be a bool (True or False), got {history[name]!r}")
    return {"num_frames": int(frame_stack), **{name: bool(history[name]) for name in ("stack_action", "stack_reward")}}


def make(env_id: str, **env_param_overrides):
    """Create an env and its params, overriding any ``EnvParams`` field.

    ``make("CartPole-v1", max_steps_in_episode=200)`` gives the classic 200-step
    CartPole (time-limit override). Returns ``(env, env_params)``.

    ``make("gymnasium:<id>", **kwargs)`` gives any Gymnasium env with the same API,
    ``kwargs`` going to ``gymnasium.make`` (see :func:`jaxrl.envs.gymnasium.make`); an id
    given to :func:`register` gets ``kwargs`` in its factory.

    For every env, the history arguments ``frame_stack`` (an int >= 1), ``stack_action``
    and ``stack_reward`` (bools) are taken out of ``kwargs`` and wrap the env in
    :class:`FrameStack` ``(env, frame_stack, stack_action, stack_reward)`` unless they
    ask for nothing (``frame_stack=1`` and neither bool).
    """
    check_env_id(env_id)
    history = _pop_history_kwargs(env_param_overrides)
    if env_id.startswith(GYMNASIUM_PREFIX):
        env, params = _gymnasium_bridge().make(env_id[len(GYMNASIUM_PREFIX) :], **env_param_overrides)
    elif env_id in _REGISTRY:
        env, params = _REGISTRY[env_id](**env_param_overrides)
    else:
        env, params = gymnax.make(env_id)
        if env_param_overrides:
            known = [f.name for f in dataclasses.fields(params)]
            unknown = sorted(set(env_param_overrides) - set(known))
            if unknown:
                raise ValueError(f"unknown env parameter(s) {unknown} for {env_id!r}; its parameters are {known}")
            params = params.replace(**env_param_overrides)
    if history["num_frames"] > 1 or history["stack_action"] or history["stack_reward"]:
        env = FrameStack(env, **history)
        env.observation_space(params)  # raises now for a history the env cannot give
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


# Last: the partially observed tasks register themselves with ``register`` above.
from jaxrl.envs.partial import FrameStack, MaskObservation  # noqa: E402
