"""Collecting experience: ``lax.scan`` over ``jax.vmap``-ed env steps."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from jaxrl.networks import reset_carry
from jaxrl.types import Trajectory

# policy(obs [N, ...], carry, key) -> (action [N, ...], carry, extras: dict of [N, ...] arrays);
# ``carry`` is a recurrent policy's memory (leaves [N, ...]), ``()`` for a feed-forward one.
PolicyFn = Callable[[jax.Array, object, jax.Array], tuple[jax.Array, object, dict]]


def reset(env, env_params, key: jax.Array, num_envs: int):
    """Reset ``num_envs`` envs; returns ``(obs [N, ...], env_state)``."""
    return jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key, num_envs), env_params)


def collect(env, env_params, policy: PolicyFn, env_state, obs, key: jax.Array, num_steps: int, carry=()):
    """Run ``policy`` for ``num_steps`` steps in every env of the batch.

    ``env`` must report episode statistics (wrap it in
    :class:`jaxrl.envs.EpisodeStatistics`). ``obs`` is ``[N, ...]`` and ``env_state``
    the matching batched state, as returned by :func:`reset` or a previous call;
    ``carry`` the policy's memory for ``obs`` (``()`` without memory), reset to the
    initial carry (:func:`jaxrl.networks.reset_carry`) wherever an episode ends.
    Returns ``(trajectory, env_state, obs, carry)`` with ``trajectory`` leaves
    ``[T, N, ...]`` (``T = num_steps``) and the state, obs and carry to continue from.
    """
    num_envs = jax.tree.leaves(obs)[0].shape[0]
    batched_step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def one_step(loop_carry, step_keys):
        env_state, obs, carry = loop_carry
        action, carry, extras = policy(obs, carry, step_keys[0])
        next_obs, env_state, reward, terminated, truncated, info = batched_step(
            step_keys[1:], env_state, action, env_params
        )
        transition = Trajectory(
            obs=obs,
            action=action,
            reward=reward.astype(jnp.float32),
            terminated=terminated,
            truncated=truncated,
            next_obs=info["final_observation"],
            episode_return=info["episode_return"],
            episode_length=info["episode_length"],
            extras=extras,
            valid=info.get("valid"),
        )
        return (env_state, next_obs, reset_carry(carry, terminated | truncated)), transition

    # All keys in one vectorised split up front: per step, one for the policy and one
    # per env (many small splits inside the loop cost more on CPU).
    keys = jax.random.split(key, (num_steps, num_envs + 1))
    (env_state, obs, carry), trajectory = jax.lax.scan(one_step, (env_state, obs, carry), keys)
    return trajectory, env_state, obs, carry


def episode_starts(done: jax.Array) -> jax.Array:
    """``[T, N]`` True where the previous step ended an episode (``done [T, N]`` shifted
    by one): where a recurrent policy re-run over stored steps resets its memory. False at
    ``t = 0``, whose stored carry is already the one the policy used."""
    return jnp.concatenate([jnp.zeros_like(done[:1]), done[:-1]])


def masked_mean(x: jax.Array, mask: jax.Array | None = None, axis=None) -> jax.Array:
    """The mean of ``x`` over ``axis`` (all axes by default) where ``mask`` (broadcast
    against ``x``) is True: ``jnp.mean(x, axis)`` exactly when ``mask`` is None, and 0
    where nothing is selected."""
    if mask is None:
        return jnp.mean(x, axis=axis)
    mask = jnp.broadcast_to(mask, x.shape)
    return jnp.sum(jnp.where(mask, x, 0.0), axis=axis) / jnp.maximum(jnp.sum(mask, axis=axis), 1)


def episode_metrics(trajectory: Trajectory) -> dict:
    """Mean return and length over the episodes that *finished* in ``trajectory``.

    Returns scalars ``episode_return`` and ``episode_length`` (NaN when no episode
    finished: never a zero placeholder) and ``episodes``, the count. Steps that are no
    transitions (``valid`` False: an env's padding, an agent that has left) end none.
    """
    valid = getattr(trajectory, "valid", None)  # a Trajectory's, or none (a jaxrl.data.Dataset)
    done = trajectory.done if valid is None else trajectory.done & valid
    count = jnp.sum(done)
    safe = jnp.maximum(count, 1)
    mean_return = jnp.sum(jnp.where(done, trajectory.episode_return, 0.0)) / safe
    mean_length = jnp.sum(jnp.where(done, trajectory.episode_length, 0)) / safe
    return {
        "episode_return": jnp.where(count > 0, mean_return, jnp.nan),
        "episode_length": jnp.where(count > 0, mean_length, jnp.nan),
        "episodes": count,
    }


def restart(state, env, env_params, key: jax.Array, num_envs: int):
    """``state`` (an algorithm's, with fields ``obs``, ``env_state`` and ``carry``) with
    every env reset from ``key`` and the policy's memory cleared: fresh episodes, for a
    resumed run whose host envs could not be saved."""
    obs, env_state = reset(env, env_params, key, num_envs)
    # Every policy's initial memory is zeros (networks.initial_carry).
    return state.replace(obs=obs, env_state=env_state, carry=jax.tree.map(jnp.zeros_like, state.carry))
