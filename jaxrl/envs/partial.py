"""Partial observability: :class:`MaskObservation` (hide parts of the observation) and
:class:`FrameStack` (give back a short history); :mod:`jaxrl.envs.builtin` registers the
partially observed ids ``"MaskedCartPole-v1"`` and ``"MaskedPendulum-v1"``. ::

    env, env_params = jaxrl.envs.make("MaskedCartPole-v1", frame_stack=4)

Both wrappers are pure, act on one env (batch with ``jax.vmap``) and wrap any gymnax-API
env, the Gymnasium bridge's included: their own state is device arrays around the
wrapped env's state.
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import spaces

from jaxrl.envs.wrappers import Wrapper

__all__ = ["MaskObservation", "FrameStack", "FrameStackState"]


def _array_space(space, what: str):
    """``(low, high, shape, dtype)`` of a Box or Discrete observation space, ``low`` and
    ``high`` broadcast to ``shape``; any other space is a ``ValueError``."""
    if isinstance(space, spaces.Box):
        shape = tuple(space.shape)
        low, high = jnp.broadcast_to(space.low, shape), jnp.broadcast_to(space.high, shape)
        return low, high, shape, np.dtype(space.dtype)
    if isinstance(space, spaces.Discrete):  # gymnax's FrozenLake, for one: a scalar int
        dtype = np.dtype(getattr(space, "dtype", np.int32))
        return jnp.zeros((), dtype), jnp.asarray(space.n - 1, dtype), (), dtype
    raise ValueError(f"{what} needs an array observation (a Box or Discrete space), got {space}")


# ----------------------------------------------------------------------------- masking


class MaskObservation(Wrapper):
    """Keep only the entries ``indices`` of a vector observation ``[D]`` (also in
    ``info["final_observation"]``): the observation becomes ``[len(indices)]``, in the
    order of ``indices``. Rewards, flags and the env state are unchanged."""

    def __init__(self, env, indices):
        super().__init__(env)
        indices = tuple(indices) if not isinstance(indices, (str, bytes)) else ()
        if not indices or any(isinstance(i, bool) or not isinstance(i, numbers.Integral) or i < 0 for i in indices):
            raise ValueError(f"indices must be a non-empty sequence of integers >= 0, got {indices!r}")
        self.indices = tuple(int(i) for i in indices)
        self.observation_space(env.default_params)  # indices the observation lacks fail here

    def _check(self, shape: tuple) -> None:
        if len(shape) != 1 or max(self.indices) >= shape[0]:
            raise ValueError(
                f"MaskObservation indices {list(self.indices)} need a vector observation with more than "
                f"{max(self.indices)} entries, got shape {shape}"
            )

    def observation_space(self, params=None):
        low, high, shape, dtype = _array_space(self._env.observation_space(params), "MaskObservation")
        self._check(shape)
        index = np.asarray(self.indices)
        return spaces.Box(low[index], high[index], (len(self.indices),), dtype)

    def _mask(self, obs: jax.Array) -> jax.Array:
        self._check(jnp.shape(obs))
        return obs[np.asarray(self.indices)]

    def reset(self, key, params=None):
        obs, state = self._env.reset(key, params)
        return self._mask(obs), state

    def step(self, key, state, action, params=None):
        obs, state, reward, terminated, truncated, info = self._env.step(key, state, action, params)
        info = dict(info)
        if "final_observation" in info:
            info["final_observation"] = self._mask(info["final_observation"])
        return self._mask(obs), state, reward, terminated, truncated, info


# ----------------------------------------------------------------------------- history


@struct.dataclass
class FrameStackState:
    env_state: Any
    stack: jax.Array  # the stacked observation last returned: [*stack_shape]


@dataclasses.dataclass(frozen=True)
class _Layout:
    """Where things sit in a frame and in the stack (all static)."""

    obs_shape: tuple  # the wrapped env's observation
    frame_shape: tuple  # one frame: the observation (as [1] if a scalar), then the extras
    stack_shape: tuple  # num_frames frames along the last axis
    dtype: np.dtype
    num_actions: int | None  # Discrete actions: one-hot size; None for Box actions
    action_size: int  # entries the previous action takes (0 unless stack_action)


class FrameStack(Wrapper):
    """The last ``num_frames`` frames concatenated along the observation's last axis,
    newest last.

    A frame is the wrapped env's observation, followed for vector observations ``[D]``
    by the previous action if ``stack_action`` (one-hot ``[n]`` for ``Discrete(n)``
    actions, the action vector for ``Box`` actions) and the previous reward ``[1]`` if
    ``stack_reward``; before an episode's first step both are zeros. Image observations
    (``[H, W, C]``) stack along channels: ``[H, W, num_frames * C]``; a scalar
    observation is a vector ``[1]``. Frames before an episode's first observation are
    zeros, and the stack restarts at every episode end (terminated or truncated): the
    observation returned on that step stacks the reset observation alone, while
    ``info["final_observation"]`` stacks the ended episode's last frames, ending with its
    final observation. The dtype is the observation's, promoted to float with
    ``stack_action`` or ``stack_reward``.
    """

    def __init__(self, env, num_frames: int, stack_action: bool = False, stack_reward: bool = False):
        super().__init__(env)
        if isinstance(num_frames, bool) or not isinstance(num_frames, numbers.Integral) or num_frames < 1:
            raise ValueError(f"num_frames must be an integer >= 1, got {num_frames!r}")
        for name, value in (("stack_action", stack_action), ("stack_reward", stack_reward)):
            if not isinstance(value, (bool, np.bool_)):
                raise ValueError(f"{name} must be a bool (True or False), got {value!r}")
        self.num_frames = int(num_frames)
        self.stack_action = bool(stack_action)
        self.stack_reward = bool(stack_reward)
        self._layout(env.default_params)  # a history the env cannot give fails here

    def _layout(self, params) -> _Layout:
        if params is None:
            params = self._env.default_params
        _, _, obs_shape, dtype = _array_space(self._env.observation_space(params), "FrameStack")
        if len(obs_shape) >= 2:
            for name in ("stack_action", "stack_reward"):
                if getattr(self, name):
                    raise ValueError(
                        f"{name}=True needs a vector observation, but the observation has shape {obs_shape} "
                        "(image frames stack along channels and have no room for actions or rewards)"
                    )
        num_actions, action_size = None, 0
        if self.stack_action:
            action_space = self._env.action_space(params)
            if isinstance(action_space, spaces.Discrete):
                num_actions = action_size = int(action_space.n)
            elif isinstance(action_space, spaces.Box):
                action_size = int(np.prod(action_space.shape, dtype=int))
            else:
                raise ValueError(f"stack_action=True needs a Discrete or Box action space, got {action_space}")
        if self.stack_action or self.stack_reward:
            dtype = np.dtype(jnp.promote_types(dtype, jnp.float32))
        frame_shape = obs_shape or (1,)
        frame_shape = frame_shape[:-1] + (frame_shape[-1] + action_size + int(self.stack_reward),)
        stack_shape = frame_shape[:-1] + (self.num_frames * frame_shape[-1],)
        return _Layout(obs_shape, frame_shape, stack_shape, dtype, num_actions, action_size)

    def observation_space(self, params=None):
        layout = self._layout(params)
        params = self._env.default_params if params is None else params
        low, high, _, _ = _array_space(self._env.observation_space(params), "FrameStack")
        # The zero frames before an episode's start must lie within the bounds too.
        low = jnp.minimum(low, 0).reshape(layout.frame_shape[:-1] + (-1,)).astype(layout.dtype)
        high = jnp.maximum(high, 0).reshape(layout.frame_shape[:-1] + (-1,)).astype(layout.dtype)
        if self.stack_action or self.stack_reward:  # vector frames: low and high are [D]
            action_low, action_high = (0.0, 1.0) if layout.num_actions is not None else (-jnp.inf, jnp.inf)
            rewards = int(self.stack_reward)
            low = jnp.concatenate(
                [low, jnp.full((layout.action_size,), action_low, layout.dtype), jnp.full((rewards,), -jnp.inf)]
            )
            high = jnp.concatenate(
                [high, jnp.full((layout.action_size,), action_high, layout.dtype), jnp.full((rewards,), jnp.inf)]
            )
        low = jnp.concatenate([low] * self.num_frames, axis=-1).astype(layout.dtype)
        high = jnp.concatenate([high] * self.num_frames, axis=-1).astype(layout.dtype)
        return spaces.Box(low, high, layout.stack_shape, layout.dtype)

    def _frame(self, layout: _Layout, obs: jax.Array, action=None, reward=None) -> jax.Array:
        """One frame ``[*frame_shape]``; ``action`` and ``reward`` ``None`` before an
        episode's first step."""
        parts = [jnp.reshape(obs, layout.obs_shape or (1,)).astype(layout.dtype)]
        if self.stack_action:
            if action is None:
                parts.append(jnp.zeros((layout.action_size,), layout.dtype))
            elif layout.num_actions is not None:
                parts.append(jax.nn.one_hot(action, layout.num_actions, dtype=layout.dtype).reshape(-1))
            else:
                parts.append(jnp.reshape(action, (-1,)).astype(layout.dtype))
        if self.stack_reward:
            parts.append(
                jnp.zeros((1,), layout.dtype) if reward is None else jnp.reshape(reward, (1,)).astype(layout.dtype)
            )
        return jnp.concatenate(parts, axis=-1)

    @staticmethod
    def _push(stack: jax.Array, frame: jax.Array) -> jax.Array:
        """Drop the oldest frame of ``stack``, append ``frame`` (newest last)."""
        return jnp.concatenate([stack[..., frame.shape[-1] :], frame], axis=-1)

    def reset(self, key, params=None):
        layout = self._layout(params)
        obs, env_state = self._env.reset(key, params)
        stack = self._push(jnp.zeros(layout.stack_shape, layout.dtype), self._frame(layout, obs))
        return stack, FrameStackState(env_state, stack)

    def step(self, key, state, action, params=None):
        layout = self._layout(params)
        obs, env_state, reward, terminated, truncated, info = self._env.step(key, state.env_state, action, params)
        # Where no episode ended the final observation is the observation itself.
        final_stack = self._push(state.stack, self._frame(layout, info.get("final_observation", obs), action, reward))
        fresh_stack = self._push(jnp.zeros(layout.stack_shape, layout.dtype), self._frame(layout, obs))
        stack = jnp.where(jnp.logical_or(terminated, truncated), fresh_stack, final_stack)
        info = {**info, "final_observation": final_stack}
        return stack, FrameStackState(env_state, stack), reward, terminated, truncated, info
