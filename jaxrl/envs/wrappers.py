"""Pure gymnax-API wrappers. Each keeps what it needs in the env state.

Wrappers act on a single env (batching is the caller's ``jax.vmap``), so running
statistics kept by :class:`NormalizeObservation` and :class:`ScaleReward` are per env
lane. Policies that must act on raw observations (PPO's ``normalize_observations``) keep
shared statistics in their params instead, using the same :class:`RunningStats`.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import spaces

# --------------------------------------------------------------------------------------
# Running mean / variance, as pure functions over a small pytree.


@struct.dataclass
class RunningStats:
    """Running mean and variance of a stream of arrays of shape ``shape``."""

    mean: jax.Array
    var: jax.Array
    count: jax.Array  # float32 scalar: number of samples seen (starts at a small epsilon)


def running_stats_init(shape=()) -> RunningStats:
    return RunningStats(
        mean=jnp.zeros(shape, jnp.float32),
        var=jnp.ones(shape, jnp.float32),
        count=jnp.asarray(1e-4, jnp.float32),
    )


def running_stats_update(stats: RunningStats, batch: jax.Array) -> RunningStats:
    """Merge a batch ``[B, *shape]`` into the statistics."""
    batch = jnp.asarray(batch, jnp.float32)
    return running_stats_merge(stats, jnp.mean(batch, axis=0), jnp.var(batch, axis=0), batch.shape[0])


def running_stats_merge(stats: RunningStats, batch_mean, batch_var, batch_count) -> RunningStats:
    """Merge the mean and variance ``[*shape]`` of ``batch_count`` samples into the
    statistics (Chan et al.'s parallel update)."""
    delta = batch_mean - stats.mean
    total = stats.count + batch_count
    mean = stats.mean + delta * batch_count / total
    m2 = stats.var * stats.count + batch_var * batch_count + delta**2 * stats.count * batch_count / total
    return RunningStats(mean=mean, var=m2 / total, count=total)


def normalize(stats: RunningStats, x: jax.Array, clip: float = 10.0, eps: float = 1e-8) -> jax.Array:
    """``(x - mean) / std`` clipped to ``[-clip, clip]``; ``x`` is ``[..., *shape]``."""
    return jnp.clip((x - stats.mean) / jnp.sqrt(stats.var + eps), -clip, clip)


def observation_stats_init(observation, one_hot: tuple = ()):
    """Running statistics for observations described by ``observation`` (an
    ``EnvSpec.observation``): one :class:`RunningStats` for an array observation; for a
    structured one a list over its leaves (``jax.tree.leaves`` order), with None for
    the leaves that are not floats (masks, indices), which are never normalised.
    ``one_hot`` (``EnvSpec.obs_classes``: per leaf, the categories of a leaf networks
    one-hot encode, else 0) gives None for those leaves too, an array observation
    included: a normalised category would no longer be one."""
    if isinstance(observation, jax.ShapeDtypeStruct):
        return None if any(one_hot) else running_stats_init(observation.shape)
    classes = one_hot or (0,) * len(jax.tree.leaves(observation))
    return [
        running_stats_init(leaf.shape) if jnp.issubdtype(leaf.dtype, jnp.floating) and not n else None
        for leaf, n in zip(jax.tree.leaves(observation), classes, strict=True)
    ]


def observation_stats_update(stats, batch):
    """Merge a batch of observations (leaves ``[B, ...]``) into :func:`observation_stats_init`'s statistics."""
    if stats is None or isinstance(stats, RunningStats):
        return stats if stats is None else running_stats_update(stats, batch)
    leaves = jax.tree.leaves(batch)
    return [None if s is None else running_stats_update(s, x) for s, x in zip(stats, leaves, strict=True)]


def observation_stats_fold(stats, obs, observation):
    """:func:`observation_stats_update` with every leading axis of ``obs`` a batch axis:
    leaves ``[..., *shape]``, each ``shape`` that of its leaf of ``observation`` (an
    ``EnvSpec.observation``), e.g. a rollout's ``[T, N, ...]``."""
    flat = jax.tree.map(lambda x, leaf: x.reshape((-1,) + leaf.shape), obs, observation)
    return observation_stats_update(stats, flat)


def normalize_observation(stats, obs, clip: float = 10.0):
    """:func:`normalize` each float leaf of ``obs`` (leaves ``[..., *shape]``) by its statistics."""
    if stats is None or isinstance(stats, RunningStats):
        return obs if stats is None else normalize(stats, obs, clip)
    leaves, treedef = jax.tree.flatten(obs)
    leaves = [x if s is None else normalize(s, x, clip) for s, x in zip(stats, leaves, strict=True)]
    return jax.tree.unflatten(treedef, leaves)


# --------------------------------------------------------------------------------------


class Wrapper:
    """Base class: forwards everything it does not override to the wrapped env."""

    def __init__(self, env):
        self._env = env

    def __getattr__(self, name):
        # Only called for names not found normally; refusing private names keeps copy and
        # pickle (which probe attributes before ``__init__`` ran) from recursing.
        if name.startswith("__") or name == "_env":
            raise AttributeError(name)
        return getattr(self._env, name)

    @property
    def unwrapped(self):
        return getattr(self._env, "unwrapped", self._env)

    def reset(self, key, params=None):
        return self._env.reset(key, params)

    def step(self, key, state, action, params=None):
        return self._env.step(key, state, action, params)


@struct.dataclass
class EpisodeStatisticsState:
    env_state: Any
    episode_return: jax.Array  # running return of the current episode
    episode_length: jax.Array


class EpisodeStatistics(Wrapper):
    """Track return and length of the current episode.

    ``info["episode_return"]`` / ``info["episode_length"]`` hold the totals of the
    episode that ended at this step and ``info["episode_done"]`` marks those steps;
    where no episode ended they are 0 and must be masked out (see
    :func:`jaxrl.rollout.episode_metrics`), never averaged in. Steps an env marks
    ``info["valid"] = False`` (padding, not transitions) are not counted.
    """

    def reset(self, key, params=None):
        obs, env_state = self._env.reset(key, params)
        return obs, EpisodeStatisticsState(env_state, jnp.zeros((), jnp.float32), jnp.zeros((), jnp.int32))

    def step(self, key, state, action, params=None):
        obs, env_state, reward, terminated, truncated, info = self._env.step(key, state.env_state, action, params)
        done = jnp.logical_or(terminated, truncated)
        episode_return = state.episode_return + reward.astype(jnp.float32)
        # An env's padding step (info["valid"] False) is not part of any episode.
        episode_length = state.episode_length + (info["valid"].astype(jnp.int32) if "valid" in info else 1)
        info = {
            **info,
            "episode_return": jnp.where(done, episode_return, 0.0),
            "episode_length": jnp.where(done, episode_length, 0),
            "episode_done": done,
        }
        state = EpisodeStatisticsState(
            env_state,
            jnp.where(done, 0.0, episode_return),
            jnp.where(done, 0, episode_length),
        )
        return obs, state, reward, terminated, truncated, info


class ClipAction(Wrapper):
    """Clip actions to the bounds of a Box action space (a no-op for other spaces)."""

    def step(self, key, state, action, params=None):
        space = self._env.action_space(params)
        if isinstance(space, spaces.Box):
            action = jnp.clip(action, space.low, space.high)
        return self._env.step(key, state, action, params)


@struct.dataclass
class NormalizeObservationState:
    env_state: Any
    stats: RunningStats


class NormalizeObservation(Wrapper):
    """Normalise observations (and ``info["final_observation"]``) by running statistics.

    The statistics are updated with every observation the env emits and live in the
    state, so under ``jax.vmap`` each env lane keeps its own.
    """

    def __init__(self, env, clip: float = 10.0):
        super().__init__(env)
        self.clip = clip

    def reset(self, key, params=None):
        obs, env_state = self._env.reset(key, params)
        stats = running_stats_update(running_stats_init(jnp.shape(obs)), obs[None])
        return normalize(stats, obs, self.clip), NormalizeObservationState(env_state, stats)

    def step(self, key, state, action, params=None):
        obs, env_state, reward, terminated, truncated, info = self._env.step(key, state.env_state, action, params)
        stats = running_stats_update(state.stats, obs[None])
        info = dict(info)
        if "final_observation" in info:
            info["final_observation"] = normalize(stats, info["final_observation"], self.clip)
        obs = normalize(stats, obs, self.clip)
        return obs, NormalizeObservationState(env_state, stats), reward, terminated, truncated, info


@struct.dataclass
class ScaleRewardState:
    env_state: Any
    discounted_return: jax.Array
    stats: RunningStats


class ScaleReward(Wrapper):
    """Divide rewards by the running std of the discounted return (as in PPO's reward
    scaling). The reported ``info`` of inner wrappers (episode statistics) stays raw."""

    def __init__(self, env, gamma: float = 0.99, clip: float = 10.0):
        super().__init__(env)
        self.gamma = gamma
        self.clip = clip

    def reset(self, key, params=None):
        obs, env_state = self._env.reset(key, params)
        return obs, ScaleRewardState(env_state, jnp.zeros((), jnp.float32), running_stats_init(()))

    def step(self, key, state, action, params=None):
        obs, env_state, reward, terminated, truncated, info = self._env.step(key, state.env_state, action, params)
        discounted_return = state.discounted_return * self.gamma + reward
        stats = running_stats_update(state.stats, discounted_return[None])
        scaled = jnp.clip(reward / jnp.sqrt(stats.var + 1e-8), -self.clip, self.clip)
        done = jnp.logical_or(terminated, truncated)
        state = ScaleRewardState(env_state, jnp.where(done, 0.0, discounted_return), stats)
        return obs, state, scaled, terminated, truncated, info
